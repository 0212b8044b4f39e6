"""The engine: one base model loaded once, continuous batching over mixed adapters.

Requests are queued; one engine thread runs iterations. Each iteration

1. drops the running rows that were cancelled (the client went away) or passed their deadline;
2. asks the scheduler (``runtime.scheduler``) which waiting requests join, makes their
   adapters device-resident and prefills them, then merges them into the running batch
   (``runtime.batch``);
3. picks every row's next token (``runtime.sampler``), streams it, and lets finished rows leave;
4. runs one decode step for the rows that remain.

So new requests join at the next decode step and finished ones leave at once; a row's output
does not depend on what joins or leaves (padding is masked, positions are per row, the LoRA
delta is per row). There is no process-wide active adapter: the adapter of each row is a
property of the batch (``BatchContext``).

The decode loop is ours rather than ``generate()`` because ``generate`` takes one set of
sampling parameters and one stopping rule for the whole batch, and cannot take rows in and out.
"""

from __future__ import annotations

import inspect
import itertools
import logging
import queue
import threading
import time
from typing import Any

import torch

from runtime.adapters import BaseIdentity, PromptFormat
from runtime.batch import RunningBatch, check_cache
from runtime.cache import AdapterCache, CapacityError, cuda_memory
from runtime.compat import verify_tokenizer
from runtime.lora import BatchContext, inject
from runtime.request import EngineError, GenRequest
from runtime.sampler import choose
from runtime.scheduler import Scheduler
from runtime.settings import Settings
from runtime.telemetry import Telemetry, host_rss_bytes, host_total_bytes

log = logging.getLogger("runtime.engine")


def encode_chat(tokenizer: Any, messages: list[dict[str, str]]) -> list[int]:
    """The chat template's token ids, where only the template places control tokens.

    Tokenizing the rendered conversation as one string would turn ``<|im_end|>`` typed by a user
    into the real control token and let them forge a system turn. So the template is rendered
    around stand-ins, its own text is tokenized as usual, and each message's content with
    special tokens split (transformers' ``split_special_tokens``), as plain text.
    """
    marks = [f"\ue000{i}\ue001" for i in range(len(messages))]
    text = tokenizer.apply_chat_template(
        [{**m, "content": mark} for m, mark in zip(messages, marks, strict=True)],
        add_generation_prompt=True, tokenize=False,
    )  # fmt: skip
    ids: list[int] = []
    pos = 0
    for message, mark in zip(messages, marks, strict=True):
        at = text.find(mark, pos)
        if at < 0:
            raise EngineError(400, "the chat template does not place every message's content")
        ids += tokenizer(text[pos:at], add_special_tokens=False)["input_ids"]
        ids += tokenizer(message["content"], add_special_tokens=False,
                         split_special_tokens=True)["input_ids"]  # fmt: skip
        pos = at + len(mark)
    ids += tokenizer(text[pos:], add_special_tokens=False)["input_ids"]
    return ids


def pick_dtype(setting: str) -> torch.dtype:
    if setting != "auto":
        return {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}[
            setting
        ]
    if torch.cuda.is_available():
        # bf16 on Ampere or newer, fp16 on older GPUs.
        return torch.bfloat16 if torch.cuda.get_device_capability()[0] >= 8 else torch.float16
    return torch.float32


class Engine:
    def __init__(self, settings: Settings, telemetry: Telemetry | None = None) -> None:
        self.settings = settings
        self.telemetry = telemetry or Telemetry()
        self.ready = threading.Event()
        self._queue: queue.Queue[GenRequest] = queue.Queue()
        self._batch = RunningBatch()
        #: Requests the scheduler admitted in this iteration (until they are in ``_batch``).
        self._admitted: list[GenRequest] = []
        self._ids = itertools.count(1)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.load_error: str | None = None

    # ------------------------------------------------------------------ start-up
    def load(self) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        s = self.settings
        t0 = time.perf_counter()
        tok_sha = verify_tokenizer(s.model_dir, s.base_tokenizer_sha256)
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self.dtype = pick_dtype(s.dtype)
        kwargs: dict[str, Any] = {"dtype": self.dtype, "attn_implementation": s.attention}
        if s.quantization == "nf4":
            from transformers import BitsAndBytesConfig

            kwargs["quantization_config"] = BitsAndBytesConfig(
                load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=self.dtype
            )
        self.tokenizer = AutoTokenizer.from_pretrained(s.model_dir)
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        model = AutoModelForCausalLM.from_pretrained(s.model_dir, **kwargs)
        if s.quantization != "nf4":
            model.to(self.device)
        model.eval()
        # transformers 5 renamed ``past_key_values`` to ``cache`` (the old name still works,
        # with a warning); use whichever this version's forward takes.
        forward = inspect.signature(model.forward).parameters
        self._cache_arg = "cache" if "cache" in forward else "past_key_values"
        with torch.inference_mode():  # rows join a running batch by rewriting its KV cache
            probe = model(input_ids=torch.tensor([[0]], device=self.device), use_cache=True)
        check_cache(self._kv(probe))
        self.ctx = BatchContext()
        layers = inject(model, self.ctx, s.lora_gather_bytes)
        self.model = model
        # Constant for the life of the server; GET /adapters and /metrics report it often.
        self.weight_bytes = sum(t.numel() * t.element_size() for t in model.parameters())
        eos = model.generation_config.eos_token_id
        eos_ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        if self.tokenizer.eos_token_id is not None:
            eos_ids.add(self.tokenizer.eos_token_id)
        self.eos_ids = eos_ids
        manifest = s.model_dir / "base_manifest.json"
        local = {}
        if manifest.exists():
            import json

            local = json.loads(manifest.read_text())
        model_id = s.base_model_id or local.get("model_id") or str(s.model_dir)
        revision = s.base_revision or local.get("recipe")
        self.identity = BaseIdentity(
            model_id=model_id,
            revision=revision,
            model_dir=str(s.model_dir.resolve()),
            modules={n: (m.in_features, m.out_features) for n, m in layers.items()},
            max_lora_rank=s.max_lora_rank,
        )
        self.cache = AdapterCache(
            base=self.identity,
            layers=layers,
            device=self.device,
            dtype=self.dtype,
            max_loras=s.max_loras,
            max_cpu_loras=s.max_cpu_loras,
            vram_headroom=s.vram_headroom,
            telemetry=self.telemetry,
        )
        self.scheduler = Scheduler(self.cache, max_batch_size=s.max_batch_size,
                                   max_prefill_tokens=s.max_prefill_tokens,
                                   continuous=s.scheduler == "continuous")  # fmt: skip
        self.base_info = {
            "model_id": model_id,
            "revision": revision,
            "tokenizer_sha256": tok_sha,
            "dtype": str(self.dtype).removeprefix("torch."),
            "quantization": s.quantization,
            "device": torch.cuda.get_device_name() if self.device.type == "cuda" else "cpu",
            "parameters": sum(p.numel() for p in model.parameters()),
            "load_seconds": round(time.perf_counter() - t0, 3),
        }
        self.telemetry.event("base_load", **self.base_info)
        if s.base_tokenizer_sha256 is None:
            log.warning(
                "tokenizer sha256 unpinned: record tokenizer_sha256: %s in the catalog", tok_sha
            )

    def start(self) -> None:
        """Load the base and start serving, both on the engine thread; returns once ready.

        On the CPU every tensor operation of the server happens on this one thread: the model
        is loaded, and requests run, where the work runs. GNU OpenMP keeps a thread pool per OS
        thread that ever ran a parallel region; once more pool threads exist than cores, it
        stops spinning between regions, and decoding (many short regions) ran at half speed
        (measured here: 260 against 510 tokens/s). So no other thread runs parallel tensor
        code: adapters are checked with NumPy (``runtime.adapters``).
        """
        failure: list[BaseException] = []
        loaded = threading.Event()

        def run() -> None:
            try:
                self.load()
            except BaseException as exc:
                failure.append(exc)
                self.load_error = f"{type(exc).__name__}: {exc}"
                return
            finally:
                loaded.set()
            self.ready.set()
            self._loop()

        self._thread = threading.Thread(target=run, name="engine", daemon=True)
        self._thread.start()
        loaded.wait()
        if failure:
            raise failure[0]

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=10)

    # ------------------------------------------------------------------ requests
    def memory(self) -> dict[str, Any]:
        """Device and host memory for telemetry; on a CPU the host is the device.

        Without an accelerator the device figure is what the base and the resident adapters
        hold (parameters and slots), against the machine's memory.
        """
        probe = cuda_memory()
        if probe is not None:
            used, total = probe
        else:
            slots = sum(r.nbytes for r in self.cache.records.values() if r.slot is not None)
            used, total = self.weight_bytes + slots, host_total_bytes()
        self.telemetry.device_memory.labels("used").set(used)
        self.telemetry.device_memory.labels("total").set(total)
        return {
            "device": self.base_info.get("device", "cpu"),
            "device_used_bytes": used,
            "device_total_bytes": total,
            "host_rss_bytes": host_rss_bytes(),
            "host_total_bytes": host_total_bytes(),
        }

    def encode(
        self,
        inputs: str | None,
        messages: list[dict[str, str]] | None,
        prompt: PromptFormat | None = None,
    ) -> list[int]:
        """Token ids of a request. Plain ``inputs`` for an adapter trained on chats
        (``prompt``) are given that chat's shape; otherwise they are tokenized as they are."""
        if messages is None and prompt is not None:
            messages = prompt.messages(inputs or "")
        if messages is not None:
            return encode_chat(self.tokenizer, messages)
        return list(self.tokenizer(inputs or "", split_special_tokens=True)["input_ids"])

    def submit(self, req: GenRequest) -> GenRequest:
        s = self.settings
        if not req.input_ids:
            raise EngineError(400, "the prompt is empty after tokenization")
        if len(req.input_ids) > s.max_input_tokens:
            raise EngineError(
                413, f"input is {len(req.input_ids)} tokens, over the limit of {s.max_input_tokens}"
            )
        if req.adapter is not None and self.cache.get(req.adapter) is None:
            raise EngineError(404, f"adapter {req.adapter!r} is not registered")
        if self._queue.qsize() + len(self.scheduler) >= s.max_queue:
            raise EngineError(503, f"server busy: {s.max_queue} requests already queued")
        req.id = next(self._ids)
        req.deadline = req.arrival + s.request_timeout_s
        if not req.params.greedy:
            seed = req.params.seed if req.params.seed is not None else int(time.time_ns() % 2**31)
            req.generator = torch.Generator(device="cpu").manual_seed(seed)
        self._queue.put(req)
        return req

    @property
    def alive(self) -> bool:
        """Whether the engine thread still runs: ``/ping`` fails when it does not, so SageMaker
        replaces the copy instead of routing requests that would never finish."""
        return self._thread is not None and self._thread.is_alive()

    def wait(self, req: GenRequest, timeout: float | None = None) -> dict[str, Any]:
        if not req.done.wait(timeout):
            raise EngineError(504, "request timed out")
        if req.error is not None:
            raise req.error
        return req.result()

    # ------------------------------------------------------------------ engine thread
    def _loop(self) -> None:
        while not self._stop.is_set():
            self._pull(block=not self._batch.rows and not self.scheduler.waiting)
            self.telemetry.queue_depth.set(len(self.scheduler))
            if not self._batch.rows and not self.scheduler.waiting:
                continue
            try:
                with torch.inference_mode():
                    self._iterate()
            except Exception as exc:
                # A failed step fails the rows it ran, never the engine thread.
                log.exception("decode step failed")
                for r in self._batch.rows + self._admitted:
                    self._finish_error(r, EngineError(500, f"generation failed: {exc}"))
                self._batch, self._admitted = RunningBatch(), []

    def _pull(self, block: bool) -> None:
        """Move submitted requests to the scheduler (waiting briefly for one when idle)."""
        try:
            self.scheduler.add(self._queue.get(timeout=0.05) if block else
                               self._queue.get_nowait())  # fmt: skip
            while True:
                self.scheduler.add(self._queue.get_nowait())
        except queue.Empty:
            pass

    def _iterate(self) -> None:
        batch = self._batch
        now = time.perf_counter()
        batch.keep([i for i, r in enumerate(batch.rows) if not self._stopped(r, now)])
        # New requests first (time to first token is what a caller waits on): their prompts
        # run, and their first tokens go out before the running rows' next step and before
        # the merge of the KV caches (which copies the whole batch's). Requests that arrived
        # during those prompts get one more round, so they need not wait for a decode step.
        joined, joined_tokens = RunningBatch(), []
        taken: list[GenRequest] = []
        self._admitted = taken
        for again in (False, True):
            if again:
                if not joined.rows:
                    break
                self._pull(block=False)
            admitted = self.scheduler.admit(batch.rows + joined.rows, time.perf_counter(),
                                            self._finish_error)  # fmt: skip
            if not admitted:
                break
            taken += admitted
            part = self._prefill(admitted)
            if part is not None:
                joined_tokens += self._sample(part)
                joined.merge(part)
        tokens = self._sample(batch) if batch.rows else []
        if joined.rows:
            batch.merge(joined)
            tokens += joined_tokens
        self._admitted = []
        if not batch.rows:
            if self.scheduler.waiting and not taken:
                time.sleep(0.002)  # every waiting request waits for a slot to free
            return
        self._decode(batch, tokens)

    def _sample(self, batch: RunningBatch) -> list[int]:
        """Choose each row's next token and hand it over; rows that are done (or fail, alone)
        leave. The tokens of the rows that go on, in their order."""
        assert batch.logits is not None
        tokens, failed = choose(batch.logits, batch.rows, self.eos_ids)
        now = time.perf_counter()
        going = []
        for i, (r, tok) in enumerate(zip(batch.rows, tokens, strict=True)):
            if i in failed:  # this row alone fails; the others go on unchanged
                self._finish_error(r, failed[i])
            elif self._advance(r, tok, now):
                going.append(i)
            else:
                self._finish(r, now)
        batch.keep(going)
        return [tokens[i] for i in going]

    def _stopped(self, r: GenRequest, now: float) -> bool:
        """Whether a running row must leave before the next step, and with what error."""
        if r.cancelled:
            self.telemetry.stopped.labels("cancelled").inc()
            self._finish_error(r, EngineError(499, "the client went away"), reason="cancelled")
            return True
        if now > r.deadline:
            self.telemetry.stopped.labels("deadline").inc()
            self._finish_error(r, EngineError(
                504, f"generation exceeded the {self.settings.request_timeout_s:g} s deadline"),
                reason="timeout")  # fmt: skip
            return True
        return False

    def _prefill(self, admitted: list[GenRequest]) -> RunningBatch | None:
        """Make the admitted rows' adapters resident and run their prompts; the new rows with
        their KV cache and first scores, or None when none of them can run."""
        t_start = time.perf_counter()
        try:
            loads, failed = self.cache.acquire([r.record for r in admitted if r.record is not None])
        except CapacityError as exc:
            for r in admitted:
                self._finish_error(r, EngineError(503, str(exc)))
            return None
        for name, exc in failed.items():
            # The reason (with local paths) goes to the log; the caller gets the name only.
            log.error("adapter %s could not be reloaded: %s", name, exc)
            self.telemetry.event("adapter_reload_failed", adapter=name)
        rows = []
        for r in admitted:
            if r.adapter in failed:
                self._finish_error(r, EngineError(
                    424, f"adapter {r.adapter!r} could not be loaded: its artifact on this "
                    "copy's disk is no longer valid; register it again"))  # fmt: skip
            else:
                rows.append(r)
        if not rows:
            return None
        t_loaded = time.perf_counter()
        for r in rows:
            r.timings["queue"] = (t_start - r.arrival) * 1000
            r.timings["adapter_load"] = loads.get(r.adapter, 0.0) if r.adapter else 0.0
        # Prompts of one length run together, unpadded: a row's prefill then computes what it
        # computes alone (padding would change the LoRA products' bits, see runtime.lora).
        by_length: dict[int, list[GenRequest]] = {}
        for r in rows:
            by_length.setdefault(len(r.input_ids), []).append(r)
        joined = RunningBatch()
        for group in by_length.values():
            part = self._prefill_group(group)
            if part is not None:
                joined.merge(part)
        t_prefill = time.perf_counter()
        for r in joined.rows:
            r.timings["prefill"] = (t_prefill - t_loaded) * 1000
        return joined if joined.rows else None

    def _prefill_group(self, rows: list[GenRequest]) -> RunningBatch | None:
        """Run prompts of equal length; their KV cache and the scores of their first token."""
        self.ctx.set_rows([self.cache.slot_of(r.record) if r.record else None for r in rows])
        ids = torch.tensor([r.input_ids for r in rows], device=self.device)
        mask = torch.ones_like(ids)
        positions = torch.arange(ids.shape[1], device=self.device).expand_as(ids)
        try:
            # Only the last position's scores are needed (a prompt's full logits are
            # prompt length x vocabulary).
            out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions,
                             use_cache=True, logits_to_keep=1)  # fmt: skip
        except Exception as exc:
            # A prompt that breaks the forward pass fails its own rows, not the running batch.
            log.exception("prefill failed")
            for r in rows:
                self._finish_error(r, EngineError(500, f"prefill failed: {exc}"))
            return None
        last = positions[:, -1].clone()
        return RunningBatch(rows=rows, kv=self._kv(out), mask=mask, positions=last,
                            logits=out.logits[:, -1, :])  # fmt: skip

    def _decode(self, batch: RunningBatch, tokens: list[int]) -> None:
        """One decode step: feed each row's new token, keep the scores of the next one."""
        self.telemetry.batch_size.observe(len(batch.rows))
        self.ctx.set_rows([self.cache.slot_of(r.record) if r.record else None for r in batch.rows])
        mask = batch.extend_mask()
        batch.positions = batch.positions + 1  # type: ignore[operator]
        step = torch.tensor(tokens, device=self.device).unsqueeze(1)
        out = self.model(input_ids=step, attention_mask=mask,
                         position_ids=batch.positions.unsqueeze(1), use_cache=True,
                         **{self._cache_arg: batch.kv})  # fmt: skip
        batch.kv = self._kv(out)
        batch.logits = out.logits[:, -1, :]

    @staticmethod
    def _kv(out: Any) -> Any:
        """The KV cache a forward pass returned (``cache`` in transformers 5.24+)."""
        kv = getattr(out, "cache", None)
        return kv if kv is not None else out.past_key_values

    def _finish(self, r: GenRequest, now: float) -> None:
        if r.done.is_set():  # finished already (a failed step fails every row it touched)
            return
        r.timings["decode"] = (now - r.arrival) * 1000 - r.timings.get("first_token", 0.0)
        r.timings["total"] = (now - r.arrival) * 1000
        if r.record is not None:
            self.cache.release(r.record)
        r.done.set()

    def _finish_error(self, req: GenRequest, err: EngineError, reason: str | None = None) -> None:
        if req.done.is_set():  # answered already: its answer and its adapter hold stand
            return
        req.error = err
        if reason is not None:
            req.finish_reason = reason
        if req.record is not None:
            self.cache.release(req.record)
        req.done.set()

    def _advance(self, r: GenRequest, token: int, now: float) -> bool:
        """Append ``token`` to ``r``; returns whether the row continues."""
        if "first_token" not in r.timings:
            r.timings["first_token"] = (now - r.arrival) * 1000
            self.telemetry.first_token.observe(now - r.arrival)
        if token in self.eos_ids:
            r.finish_reason = "stop"
            self._decode_text(r)
            self._flush(r, final=True)
            return False
        r.output_ids.append(token)
        # The text is needed at every step only to find a stop sequence or to stream; other
        # rows are decoded once, when they finish.
        if r.params.stop or r.on_token is not None:
            text = self._decode_text(r)
            for stop in r.params.stop:
                at = text.find(stop)
                if at >= 0:
                    r.text = text[:at]
                    r.finish_reason = "stop_sequence"
                    self._flush(r, final=True)
                    return False
        if len(r.output_ids) >= r.params.max_new_tokens:
            r.finish_reason = "length"
            self._decode_text(r)
            self._flush(r, final=True)
            return False
        self._flush(r, final=False)
        return True

    def _decode_text(self, r: GenRequest) -> str:
        r.text = self.tokenizer.decode(r.output_ids, skip_special_tokens=True)
        return r.text

    def _flush(self, r: GenRequest, final: bool) -> None:
        """Stream the text produced since the last flush (holding back a partial character)."""
        if r.on_token is None:
            return
        stable = r.text if final else r.text.rstrip("\ufffd")
        if final and r.params.stop:
            stable = r.text
        # Hold back text that could still turn into a stop sequence.
        if not final and r.params.stop:
            hold = max(len(s) for s in r.params.stop) - 1
            stable = stable[: max(r.emitted, len(stable) - hold)]
        if len(stable) > r.emitted:
            r.on_token(stable[r.emitted :])
            r.emitted = len(stable)
