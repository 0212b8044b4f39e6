"""The engine: one base model loaded once, batched generation over mixed adapters.

Requests are queued; a single engine thread forms batches (up to ``max_batch_size`` rows,
adapters of one batch limited to what fits in the device slots), makes their adapters
resident, prefills all rows together (left-padded) and decodes step by step. Each row has its
own sampling parameters, stop sequences, seed and deadline; finished rows leave the batch (the
KV cache is narrowed) so the rest continue at a smaller batch size. There is no process-wide
active adapter: the adapter of each row is a property of the batch (``BatchContext``).

The decode loop is ours rather than ``generate()`` because ``generate`` takes one set of
sampling parameters and one stopping rule for the whole batch.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from runtime.adapters import BaseIdentity
from runtime.cache import AdapterCache, CapacityError, Record, cuda_memory
from runtime.compat import verify_tokenizer
from runtime.lora import BatchContext, inject
from runtime.settings import Settings
from runtime.telemetry import Telemetry, host_rss_bytes, host_total_bytes

log = logging.getLogger("runtime.engine")


#: Sampling bounds, the same in the router's schema: a temperature is 0 (greedy) or at least
#: MIN_TEMPERATURE; a repetition penalty lies within REPETITION_PENALTY. Outside them logits
#: overflow to inf/nan (5e-324 divides them into infinity).
MIN_TEMPERATURE = 1e-2
REPETITION_PENALTY = (0.1, 10.0)


class EngineError(Exception):
    """A request failed; ``status`` is the HTTP status the server answers with."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class GenParams:
    max_new_tokens: int = 128
    min_new_tokens: int = 0
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    repetition_penalty: float = 1.0
    stop: tuple[str, ...] = ()
    seed: int | None = None
    do_sample: bool = False

    @property
    def greedy(self) -> bool:
        return not self.do_sample or self.temperature == 0


class Completion(threading.Event):
    """A request's done flag that also wakes the asyncio side without a waiting thread: the
    server awaits a future that ``set`` resolves, instead of holding a pool thread per request
    (which starved registrations behind open streams)."""

    def __init__(self) -> None:
        super().__init__()
        self._callbacks: list[Callable[[], None]] = []
        self._guard = threading.Lock()

    def add_callback(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` once set (at once if it already is); it runs on the setting thread."""
        with self._guard:
            if not self.is_set():
                self._callbacks.append(fn)
                return
        fn()

    def set(self) -> None:
        with self._guard:
            super().set()
            callbacks, self._callbacks = self._callbacks, []
        for fn in callbacks:
            fn()


@dataclass
class GenRequest:
    adapter: str | None
    input_ids: list[int]
    params: GenParams
    on_token: Callable[[str], None] | None = None
    arrival: float = field(default_factory=time.perf_counter)
    deadline: float = 0.0
    id: int = 0
    # filled by the engine
    record: Record | None = None
    output_ids: list[int] = field(default_factory=list)
    text: str = ""
    emitted: int = 0
    finish_reason: str | None = None
    timings: dict[str, float] = field(default_factory=dict)
    error: EngineError | None = None
    done: Completion = field(default_factory=Completion)
    generator: torch.Generator | None = None

    def result(self) -> dict[str, Any]:
        return {
            "generated_text": self.text,
            "adapter": self.adapter,
            "adapter_version": self.record.version if self.record else None,
            # What the container actually served: the artifact's manifest name and version and
            # its weights' sha256 (None for the base model).
            "artifact": self.record.identity if self.record else None,
            "finish_reason": self.finish_reason,
            "usage": {"input_tokens": len(self.input_ids), "output_tokens": len(self.output_ids)},
            "timings_ms": {k: round(v, 3) for k, v in self.timings.items()},
        }


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


def _check_scores(row: torch.Tensor, after: str) -> None:
    """Scores may be -inf (masked) but never NaN or +inf: both make sampling meaningless."""
    if torch.isnan(row).any() or torch.isposinf(row).any():
        raise FloatingPointError(f"the scores are not finite after {after}")


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
        self._waiting: list[GenRequest] = []
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
        kwargs: dict[str, Any] = {"dtype": self.dtype}
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
        self.ctx = BatchContext()
        layers = inject(model, self.ctx)
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
        self.load()
        self._thread = threading.Thread(target=self._loop, name="engine", daemon=True)
        self._thread.start()
        self.ready.set()

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

    def encode(self, inputs: str | None, messages: list[dict[str, str]] | None) -> list[int]:
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
        if self._queue.qsize() + len(self._waiting) >= s.max_queue:
            raise EngineError(503, f"server busy: {s.max_queue} requests already queued")
        req.id = next(self._ids)
        req.deadline = req.arrival + s.request_timeout_s
        if not req.params.greedy:
            seed = req.params.seed if req.params.seed is not None else int(time.time_ns() % 2**31)
            req.generator = torch.Generator(device="cpu").manual_seed(seed)
        self._queue.put(req)
        return req

    # ------------------------------------------------------------------ engine thread
    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self._waiting.append(self._queue.get(timeout=0.05))
            except queue.Empty:
                if not self._waiting:
                    continue
            while True:
                try:
                    self._waiting.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            self.telemetry.queue_depth.set(len(self._waiting))
            batch: list[GenRequest] = []
            try:
                batch = self._form_batch()
                if batch:
                    self._run(batch)
                elif self._waiting:
                    time.sleep(0.002)
            except Exception as exc:
                # A failed batch fails its own unfinished requests, never the engine thread.
                log.exception("batch failed")
                for r in batch:
                    if not r.done.is_set():
                        self._finish_error(r, EngineError(500, f"generation failed: {exc}"))

    @property
    def alive(self) -> bool:
        """Whether the engine thread still runs: ``/ping`` fails when it does not, so SageMaker
        replaces the copy instead of routing requests that would never finish."""
        return self._thread is not None and self._thread.is_alive()

    def _form_batch(self) -> list[GenRequest]:
        batch: list[GenRequest] = []
        names: set[str] = set()
        now = time.perf_counter()
        for req in list(self._waiting):
            if len(batch) >= self.settings.max_batch_size:
                break
            try:
                names = self._admit(req, batch, names, now)
            except Exception as exc:
                log.exception("admitting request %s failed", req.id)
                if req in self._waiting:
                    self._waiting.remove(req)
                self._finish_error(req, EngineError(500, f"could not schedule the request: {exc}"))
        return batch

    def _admit(
        self, req: GenRequest, batch: list[GenRequest], names: set[str], now: float
    ) -> set[str]:
        """Move ``req`` into ``batch`` when its adapter fits; the adapters of the batch after."""
        if now > req.deadline:
            self._waiting.remove(req)
            self._finish_error(req, EngineError(504, "request timed out waiting in the queue"))
            return names
        if req.adapter is not None:
            rec = self.cache.get(req.adapter)
            if rec is None:
                self._waiting.remove(req)
                self._finish_error(
                    req, EngineError(404, f"adapter {req.adapter!r} is not registered")
                )
                return names
            wanted = names | {req.adapter}
            if req.adapter not in names and not self.cache.can_fit(wanted):
                return names  # waits for a later batch, when a slot can be freed
            try:
                req.record = self.cache.hold(req.adapter)
            except KeyError:  # unregistered between get() and hold()
                self._waiting.remove(req)
                self._finish_error(
                    req, EngineError(404, f"adapter {req.adapter!r} is not registered")
                )
                return names
            names = wanted
        self._waiting.remove(req)
        batch.append(req)
        return names

    def _finish_error(self, req: GenRequest, err: EngineError) -> None:
        req.error = err
        if req.record is not None:
            self.cache.release(req.record)
        req.done.set()

    def _run(self, batch: list[GenRequest]) -> None:
        t_start = time.perf_counter()
        try:
            loads, failed = self.cache.acquire([r.record for r in batch if r.record is not None])
        except CapacityError as exc:
            for r in batch:
                self._finish_error(r, EngineError(503, str(exc)))
            return
        if failed:
            for name, exc in failed.items():
                # The reason (with local paths) goes to the log; the caller gets the name only.
                log.error("adapter %s could not be reloaded: %s", name, exc)
                self.telemetry.event("adapter_reload_failed", adapter=name)
            for r in batch:
                if r.adapter in failed:
                    self._finish_error(r, EngineError(
                        424, f"adapter {r.adapter!r} could not be loaded: its artifact on this "
                        "copy's disk is no longer valid; register it again"))  # fmt: skip
            batch = [r for r in batch if r.adapter not in failed]
            if not batch:
                return
        t_loaded = time.perf_counter()
        for r in batch:
            r.timings["queue"] = (t_start - r.arrival) * 1000
            r.timings["adapter_load"] = loads.get(r.adapter, 0.0) if r.adapter else 0.0
        self.telemetry.batch_size.observe(len(batch))

        active = list(batch)
        self.ctx.set_rows([self.cache.slot_of(r.record) if r.record else None for r in active])
        pad = self.tokenizer.pad_token_id
        width = max(len(r.input_ids) for r in active)
        ids = torch.full((len(active), width), pad, dtype=torch.long)
        mask = torch.zeros((len(active), width), dtype=torch.long)
        for i, r in enumerate(active):
            ids[i, width - len(r.input_ids) :] = torch.tensor(r.input_ids)
            mask[i, width - len(r.input_ids) :] = 1
        ids, mask = ids.to(self.device), mask.to(self.device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        with torch.inference_mode():
            out = self.model(
                input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True
            )
            kv = out.past_key_values
            logits = out.logits[:, -1, :]
            t_prefill = time.perf_counter()
            for r in active:
                r.timings["prefill"] = (t_prefill - t_loaded) * 1000
            last_pos = positions[:, -1]
            while active:
                tokens, failed = self._choose(logits, active)
                keep: list[int] = []
                now = time.perf_counter()
                for i, (r, tok) in enumerate(zip(active, tokens, strict=True)):
                    if i in failed:  # this row alone fails; the others go on unchanged
                        self._finish_error(r, failed[i])
                        continue
                    if self._advance(r, tok, now):
                        keep.append(i)
                    else:
                        r.timings["decode"] = (now - t_prefill) * 1000
                        r.timings["total"] = (now - r.arrival) * 1000
                        if r.record is not None:
                            self.cache.release(r.record)
                        r.done.set()
                if not keep:
                    break
                if len(keep) < len(active):
                    index = torch.tensor(keep, device=self.device)
                    kv.batch_select_indices(index)
                    mask, last_pos = mask[index], last_pos[index]
                    tokens = [tokens[i] for i in keep]
                    active = [active[i] for i in keep]
                    self.ctx.set_rows(
                        [self.cache.slot_of(r.record) if r.record else None for r in active]
                    )
                step = torch.tensor(tokens, device=self.device).unsqueeze(1)
                mask = torch.cat([mask, mask.new_ones((len(active), 1))], dim=1)
                last_pos = last_pos + 1
                out = self.model(
                    input_ids=step,
                    attention_mask=mask,
                    position_ids=last_pos.unsqueeze(1),
                    past_key_values=kv,
                    use_cache=True,
                )
                logits = out.logits[:, -1, :]

    def _choose(
        self, logits: torch.Tensor, rows: list[GenRequest]
    ) -> tuple[list[int], dict[int, EngineError]]:
        """Each row's next token, and the rows that cannot go on (non-finite scores or a
        failure in their own post-processing): those fail alone."""
        logits = logits.float()
        eos = sorted(self.eos_ids)
        for i, r in enumerate(rows):
            if eos and len(r.output_ids) < r.params.min_new_tokens:
                logits[i, eos] = float("-inf")  # as transformers' min_new_tokens does
        greedy = logits.argmax(dim=-1).tolist()
        finite = torch.isfinite(logits).any(dim=-1).tolist()
        out: list[int] = []
        failed: dict[int, EngineError] = {}
        for i, r in enumerate(rows):
            try:
                if not finite[i] or torch.isnan(logits[i]).any():
                    raise FloatingPointError("the model's scores are not finite")
                out.append(self._choose_row(logits[i], greedy[i], r))
            except Exception as exc:
                failed[i] = EngineError(
                    400 if isinstance(exc, FloatingPointError) else 500,
                    f"sampling failed for this request: {exc}",
                )
                out.append(0)
        return out, failed

    def _choose_row(self, scores: torch.Tensor, greedy: int, r: GenRequest) -> int:
        p = r.params
        if p.greedy and p.repetition_penalty == 1.0:
            return greedy
        if not (p.greedy or p.temperature >= MIN_TEMPERATURE):
            raise FloatingPointError(f"temperature {p.temperature:g} is below {MIN_TEMPERATURE:g}")
        row = scores.clone()
        if p.repetition_penalty != 1.0:
            seen = torch.tensor(sorted(set(r.input_ids) | set(r.output_ids)), device=row.device)
            score = row[seen]
            row[seen] = torch.where(
                score < 0, score * p.repetition_penalty, score / p.repetition_penalty
            )
            _check_scores(row, "the repetition penalty")
        if p.greedy:
            return int(row.argmax())
        row = row / p.temperature
        _check_scores(row, "the temperature")
        if p.top_k > 0:
            kth = torch.topk(row, min(p.top_k, row.numel())).values[-1]
            row[row < kth] = float("-inf")
        if p.top_p < 1.0:
            sorted_logits, order = torch.sort(row, descending=True)
            cum = sorted_logits.softmax(-1).cumsum(-1)
            drop = cum - sorted_logits.softmax(-1) > p.top_p  # keep the token crossing top_p
            row[order[drop]] = float("-inf")
        probs = row.softmax(-1).cpu()
        if not torch.isfinite(probs).all() or float(probs.sum()) <= 0:
            raise FloatingPointError("the sampling probabilities are not finite")
        return int(torch.multinomial(probs, 1, generator=r.generator))

    def _advance(self, r: GenRequest, token: int, now: float) -> bool:
        """Append ``token`` to ``r``; returns whether the row continues."""
        if token in self.eos_ids:
            r.finish_reason = "stop"
            self._flush(r, final=True)
            return False
        r.output_ids.append(token)
        text = self.tokenizer.decode(r.output_ids, skip_special_tokens=True)
        for stop in r.params.stop:
            at = text.find(stop)
            if at >= 0:
                r.text = text[:at]
                r.finish_reason = "stop_sequence"
                self._flush(r, final=True)
                return False
        r.text = text
        if len(r.output_ids) >= r.params.max_new_tokens:
            r.finish_reason = "length"
            self._flush(r, final=True)
            return False
        if now > r.deadline:
            r.finish_reason = "timeout"
            r.error = EngineError(
                504, f"generation exceeded the {self.settings.request_timeout_s:g} s deadline"
            )
            self._flush(r, final=True)
            return False
        self._flush(r, final=False)
        return True

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

    def wait(self, req: GenRequest, timeout: float | None = None) -> dict[str, Any]:
        if not req.done.wait(timeout):
            raise EngineError(504, "request timed out")
        if req.error is not None:
            raise req.error
        return req.result()
