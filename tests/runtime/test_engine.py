"""The engine's own mapping onto vLLM, and the guarantees vLLM does not give by itself, checked
against the shared server (vLLM's CPU build) and, where a server cannot show it, in process."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import pytest

from contracts.settings import RuntimeSettings
from runtime.engine import Engine, finish_reason, with_system
from runtime.registry import AdapterRegistry
from runtime.request import EngineError, GenParams, GenRequest

PROMPTS = ["pt 45yo m c/o sob and cp", "Alamak, I forgot my wallet lah", "Rep: Hello there"]


def _text(server, prompt: str, adapter: str | None = None, **params) -> str:
    r = server.invoke(adapter, inputs=prompt, parameters={"max_new_tokens": 8, **params})
    assert r.status_code == 200, r.text
    return r.json()["generated_text"]


@pytest.mark.parametrize(
    "params",
    [
        {"temperature": 5e-324, "do_sample": True},
        {"repetition_penalty": 1e-300},
        {"repetition_penalty": 11.0},
    ],
)
def test_out_of_range_sampling_parameters_are_a_400(server, params) -> None:
    r = server.invoke(inputs="hello", parameters={"max_new_tokens": 2, **params})
    assert r.status_code == 400, r.text


def test_sampling_is_seeded_per_request_and_top_k_1_is_greedy(server) -> None:
    prompt = PROMPTS[1]
    sampled = {"do_sample": True, "temperature": 1.5}
    texts = {_text(server, prompt, seed=s, **sampled) for s in range(6)}
    assert len(texts) > 1, "different seeds gave the same text every time"
    assert _text(server, prompt, seed=4, **sampled) == _text(server, prompt, seed=4, **sampled)
    assert _text(server, prompt, seed=9, top_k=1, **sampled) == _text(server, prompt)


def test_a_seed_gives_the_same_text_whatever_the_batch_holds(server) -> None:
    sampled = {"do_sample": True, "temperature": 1.2, "seed": 11}
    alone = _text(server, PROMPTS[0], **sampled)
    jobs = [(PROMPTS[0], sampled)] + [
        (p, {"max_new_tokens": 3 + i % 5, "do_sample": i % 2 == 0, "temperature": 0.9, "seed": i})
        for i, p in enumerate(PROMPTS * 4)
    ]
    with ThreadPoolExecutor(len(jobs)) as pool:
        results = list(pool.map(lambda j: _text(server, j[0], **j[1]), jobs))
    assert results[0] == alone


def test_min_new_tokens_and_stop_sequences_map_onto_vllm(server) -> None:
    r = server.invoke(inputs=PROMPTS[0], parameters={"max_new_tokens": 12, "min_new_tokens": 12})
    out = r.json()
    assert out["usage"]["output_tokens"] == 12 and out["finish_reason"] == "length"
    full = out["generated_text"]
    stop = full[3:5]
    cut = server.invoke(inputs=PROMPTS[0], parameters={"max_new_tokens": 12, "stop": [stop]})
    cut = cut.json()
    assert cut["finish_reason"] == "stop_sequence", cut
    assert stop not in cut["generated_text"] and full.startswith(cut["generated_text"])


def test_vllm_finish_reasons_in_the_runtimes_words() -> None:
    assert finish_reason("length", None) == "length"
    assert finish_reason("stop", "###") == "stop_sequence"
    assert finish_reason("stop", None) == "stop"  # an end-of-sequence token
    assert finish_reason("stop", 151645) == "stop"  # a stop token id


def test_a_chat_without_a_system_turn_gets_the_adapters_instruction() -> None:
    from contracts.manifests import PromptFormat

    fmt = PromptFormat(format="chat", system="Expand the shorthand.")
    user = [{"role": "user", "content": "pt 72yo f"}]
    assert with_system(user, fmt)[0] == {"role": "system", "content": "Expand the shorthand."}
    own = [{"role": "system", "content": "mine"}, *user]
    assert with_system(own, fmt) == own  # the caller's own system turn wins
    assert with_system(user, None) == user  # the base model and raw adapters: unchanged


class _SlowStream:
    """A vLLM output stream that never produces anything (an engine stuck on other work)."""

    def __aiter__(self):
        return self

    async def __anext__(self):
        await asyncio.sleep(3600)

    async def aclose(self) -> None:
        self.closed = True


def _stuck_engine(tiny_base, **settings) -> tuple[Engine, _SlowStream, list[str]]:
    """An engine whose vLLM never answers (stuck inside ``add_request`` or behind other
    work), recording what it is asked to abort."""
    engine = Engine(RuntimeSettings(model_dir=tiny_base, **settings))
    engine.registry = AdapterRegistry(max_cpu_loras=2)
    stream, aborted = _SlowStream(), []

    async def abort(request_id: str) -> None:
        aborted.append(request_id)

    engine.llm = SimpleNamespace(generate=lambda prompt, params, rid, **k: stream, abort=abort)
    return engine, stream, aborted


def test_the_deadline_aborts_the_request_with_504(tiny_base) -> None:
    engine, stream, aborted = _stuck_engine(tiny_base, request_timeout_s=0.3)
    req = GenRequest(adapter=None, input_ids=[1, 2], params=GenParams(max_new_tokens=4))
    engine.admit(req)

    async def run() -> None:
        async for _ in engine.generate(req):
            pass

    with pytest.raises(EngineError) as err:
        asyncio.run(run())
    assert err.value.status == 504
    assert stream.closed, "the stream was not closed, so vLLM would not abort the request"
    # Closing vLLM's stream aborts nothing while it is still inside add_request: the engine
    # aborts by its own request id as well.
    assert len(aborted) == 1 and aborted[0].startswith("rt-")
    assert engine._admitted == 0


def test_a_request_cancelled_before_its_first_output_is_aborted_in_vllm(tiny_base) -> None:
    """A client that goes away while vLLM is still taking the request in (add_request)."""
    engine, _, aborted = _stuck_engine(tiny_base)
    req = GenRequest(adapter=None, input_ids=[1, 2], params=GenParams(max_new_tokens=4))
    engine.admit(req)

    async def run() -> None:
        async def consume() -> None:
            async for _ in engine.generate(req):
                pass

        task = asyncio.create_task(consume())
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(run())
    assert len(aborted) == 1 and aborted[0].startswith("rt-")
    assert engine._admitted == 0


def test_the_sampling_parameters_vllm_gets(tiny_base) -> None:
    engine = Engine(RuntimeSettings(model_dir=tiny_base))
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    greedy = engine.sampling_params(
        GenRequest(
            None,
            [1],
            GenParams(
                max_new_tokens=9,
                min_new_tokens=2,
                temperature=0.7,
                top_k=5,
                stop=("x",),
                json_schema=schema,
            ),
        )
    )
    assert (greedy.max_tokens, greedy.min_tokens, greedy.temperature) == (9, 2, 0.0)
    assert greedy.stop == ["x"] and greedy.structured_outputs.json == schema
    sampled = engine.sampling_params(
        GenRequest(
            None,
            [1],
            GenParams(
                do_sample=True, temperature=0.7, top_p=0.9, top_k=5, seed=3, repetition_penalty=1.2
            ),
        )
    )
    assert (sampled.temperature, sampled.top_p, sampled.top_k, sampled.seed) == (0.7, 0.9, 5, 3)
    assert sampled.repetition_penalty == 1.2 and sampled.structured_outputs is None


def test_only_a_stream_asks_vllm_for_every_steps_output() -> None:
    """``vllm serve`` asks for FINAL_ONLY when a request does not stream: one output and one
    wake-up of the API process per request, not per engine step (GPU review defect 9)."""
    from vllm.sampling_params import RequestOutputKind

    from contracts.settings import RuntimeSettings
    from runtime.engine import Engine
    from runtime.request import GenParams, GenRequest

    engine = Engine(RuntimeSettings())
    kinds = {
        stream: engine.sampling_params(
            GenRequest(None, [1], GenParams(), stream=stream)
        ).output_kind
        for stream in (False, True)
    }
    assert kinds == {False: RequestOutputKind.FINAL_ONLY, True: RequestOutputKind.DELTA}


def test_the_registration_lock_table_keeps_only_names_in_registration() -> None:
    import asyncio

    from runtime import server

    async def register_many() -> None:
        for i in range(50):
            async with server._registering(f"adapter-{i}"):
                await asyncio.sleep(0)

    asyncio.run(register_many())
    assert server._REGISTERING == {}


class LruHostTier:
    """vLLM's host tier as ``LRUCacheWorkerLoRAManager`` keeps it (``vllm/lora/worker_manager.py``):
    ``add_lora`` past ``max_cpu_loras`` evicts the least recently used adapter, whichever it is;
    ``remove_lora`` drops one; ``list_loras`` names what is held."""

    def __init__(self, capacity: int) -> None:
        import collections

        self.capacity = capacity
        self.held: collections.OrderedDict[int, str] = collections.OrderedDict()

    async def add_lora(self, request) -> bool:
        if request.lora_int_id in self.held:
            self.held.move_to_end(request.lora_int_id)
            return False
        if len(self.held) >= self.capacity:
            self.held.popitem(last=False)
        self.held[request.lora_int_id] = request.lora_name
        return True

    async def remove_lora(self, lora_id: int) -> bool:
        return self.held.pop(lora_id, None) is not None

    async def list_loras(self) -> set[int]:
        return set(self.held)


def test_a_returning_pin_never_evicts_the_next_pinned_adapter() -> None:
    """Three host places, two pins: a request for a new adapter made vLLM evict the oldest pin;
    loading it back evicted the other pin (vLLM's LRU picks any adapter), and so on."""
    import asyncio

    from vllm.lora.request import LoRARequest

    from contracts.settings import RuntimeSettings
    from runtime.engine import Engine
    from runtime.registry import AdapterRecord

    engine = Engine(RuntimeSettings(max_loras=1, max_cpu_loras=3))
    tier = LruHostTier(3)
    engine.llm = tier

    def record(name: str, lora_id: int, pinned: bool, used: float) -> AdapterRecord:
        rec = AdapterRecord(
            name,
            lora_id,
            f"{name}@{lora_id}",
            f"/x/{name}",
            pinned,
            "1",
            4,
            8,
            ("q_proj",),
            1,
            last_used=used,
        )
        engine.registry.records[name] = rec
        return rec

    pins = [record("pin-1", 1, True, 1.0), record("pin-2", 2, True, 2.0)]
    unpinned = record("plain", 3, False, 3.0)
    newcomer = record("new", 4, False, 4.0)

    async def run() -> None:
        for rec in (*pins, unpinned):
            await tier.add_lora(LoRARequest(rec.lora_name, rec.lora_id, rec.src))
        engine.registry.host_ids = await tier.list_loras()
        # A request for the newcomer: vLLM loads it and evicts its LRU, the first pin.
        await tier.add_lora(LoRARequest(newcomer.lora_name, newcomer.lora_id, newcomer.src))
        await engine.refresh_tiers()

    asyncio.run(run())
    held = set(tier.held)
    assert {1, 2} <= held, f"a pin was evicted to bring another back: {tier.held}"
    assert engine.registry.host_ids == held and len(held) == 3
