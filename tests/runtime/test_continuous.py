"""Continuous batching: requests join a running batch at the next decode step and leave when
they finish, a short request does not wait for a long one, a cancelled or late row leaves at
the next step, and no row's output depends on what joins or leaves."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from runtime.engine import Engine
from runtime.request import EngineError, GenParams, GenRequest
from runtime.settings import Settings

PROMPTS = ["pt 45yo m c/o sob and cp", "Rep: Hello, this is the sales desk.",
           "Alamak, I forgot my wallet lah", "This phone is absolute garbage!!!"]  # fmt: skip


def fixed(n: int) -> GenParams:
    """Exactly ``n`` greedy tokens (the tiny untrained base may emit EOS at any point)."""
    return GenParams(max_new_tokens=n, min_new_tokens=n)


@pytest.fixture(scope="module")
def engine(tiny_base: Path, adapters: dict[str, Path], tmp_path_factory: pytest.TempPathFactory):
    # Two device slots for four adapters: joins force evictions and reloads.
    e = Engine(Settings(model_dir=tiny_base, max_loras=2, max_cpu_loras=8, max_batch_size=16,
                        work_dir=tmp_path_factory.mktemp("work")))  # fmt: skip
    e.start()
    for name, path in adapters.items():
        e.cache.register(e.cache.validate(name, path), pin=False)
    yield e
    e.stop()


def submit(engine: Engine, adapter: str | None, prompt: str, params: GenParams,
           on_token=None) -> GenRequest:  # fmt: skip
    return engine.submit(GenRequest(adapter=adapter, input_ids=engine.encode(prompt, None),
                                    params=params, on_token=on_token))  # fmt: skip


def alone(engine: Engine, adapter: str | None, prompt: str, params: GenParams) -> str:
    return engine.wait(submit(engine, adapter, prompt, params), timeout=60)["generated_text"]


def test_joins_mid_generation_match_single_request_references(engine, adapters) -> None:
    names = [None, *adapters]
    jobs = [(names[i % len(names)], PROMPTS[i % len(PROMPTS)], 6 + 3 * (i % 5)) for i in range(15)]
    reference = {job: alone(engine, job[0], job[1], fixed(job[2])) for job in jobs}
    evictions = engine.telemetry.cache_events.labels("eviction", "device")._value.get()

    long_tokens = threading.Event()
    seen = []

    def count(_text: str) -> None:
        seen.append(1)
        if len(seen) == 5:
            long_tokens.set()

    long = submit(engine, "all-r16", PROMPTS[0], fixed(400), on_token=count)
    assert long_tokens.wait(30), "the long request never started"
    joined = []
    for job in jobs:  # each joins the running batch, some while others leave
        joined.append(submit(engine, job[0], job[1], fixed(job[2])))
        time.sleep(0.01)
    results = [engine.wait(r, timeout=60)["generated_text"] for r in joined]
    assert not long.done.is_set(), "the joined requests waited for the long one to finish"
    for job, text in zip(jobs, results, strict=True):
        assert text == reference[job], f"{job}: a neighbour changed this row's output"
    long_text = engine.wait(long, timeout=60)["generated_text"]
    assert long_text == alone(engine, "all-r16", PROMPTS[0], fixed(400))
    after = engine.telemetry.cache_events.labels("eviction", "device")._value.get()
    assert after > evictions, "four adapters over two slots: the joins must have evicted"


def test_a_short_request_does_not_wait_for_a_long_one(engine) -> None:
    started = threading.Event()
    long = submit(engine, None, PROMPTS[1], fixed(400), on_token=lambda _t: started.set())
    assert started.wait(30)
    t0 = time.perf_counter()
    short = submit(engine, None, PROMPTS[2], fixed(4))
    engine.wait(short, timeout=60)
    took = time.perf_counter() - t0
    assert not long.done.is_set(), "the short request finished only after the long one"
    assert short.timings["queue"] < 1000, short.timings
    engine.wait(long, timeout=120)
    assert took < long.timings["total"] / 1000


def test_a_cancelled_row_leaves_at_the_next_step(engine) -> None:
    started = threading.Event()
    req = submit(engine, "attn-r4", PROMPTS[0], fixed(500), on_token=lambda _t: started.set())
    other = submit(engine, None, PROMPTS[3], fixed(30))
    assert started.wait(30)
    req.cancel()
    with pytest.raises(EngineError) as err:
        engine.wait(req, timeout=30)
    assert err.value.status == 499 and req.finish_reason == "cancelled"
    assert len(req.output_ids) < 500
    assert engine.wait(other, timeout=60)["usage"]["output_tokens"] == 30
    assert engine.cache.get("attn-r4").inflight == 0, "the cancelled row kept its adapter held"


def test_a_row_past_its_deadline_leaves_with_504(tiny_base, tmp_path) -> None:
    e = Engine(Settings(model_dir=tiny_base, request_timeout_s=0.5, work_dir=tmp_path))
    e.start()
    try:
        req = submit(e, None, PROMPTS[0], GenParams(max_new_tokens=1000, min_new_tokens=1000))
        with pytest.raises(EngineError) as err:
            e.wait(req, timeout=30)
        assert err.value.status == 504 and 0 < len(req.output_ids) < 1000
        assert req.finish_reason == "timeout"
    finally:
        e.stop()


def test_static_waves_behind_the_flag_still_serve_and_make_short_requests_wait(
    tiny_base, tmp_path
) -> None:
    e = Engine(Settings(model_dir=tiny_base, scheduler="static", work_dir=tmp_path))
    e.start()
    try:
        started = threading.Event()
        long = submit(e, None, PROMPTS[1], fixed(150), on_token=lambda _t: started.set())
        assert started.wait(30)
        short = submit(e, None, PROMPTS[2], fixed(4))
        e.wait(short, timeout=60)
        assert long.done.is_set(), "static waves: the short request waits for the wave"
        assert e.wait(short, timeout=1)["generated_text"] == alone(e, None, PROMPTS[2], fixed(4))
    finally:
        e.stop()


@pytest.fixture
def busy(tiny_base, tmp_path):
    """A fresh engine with one 300-token request already generating: (engine, that request)."""
    e = Engine(Settings(model_dir=tiny_base, work_dir=tmp_path))
    e.start()
    started = threading.Event()
    long = submit(e, None, PROMPTS[1], fixed(300), on_token=lambda _t: started.set())
    assert started.wait(30)
    yield e, long
    e.stop()


def test_a_request_arriving_during_a_prompt_joins_before_the_next_decode_step(busy) -> None:
    """Time to first token: a request that arrives while another's prompt runs is prefilled in
    the same iteration, instead of waiting for the running rows' decode step as well."""
    e, long = busy
    events: list[str] = []
    late: list[GenRequest] = []
    prefill, decode = e._prefill, e._decode

    def prefill_and_arrive(admitted):
        events.append("prefill " + ",".join(r.adapter or "base" for r in admitted))
        if not late:  # the second request arrives while the first one's prompt runs
            late.append(submit(e, None, PROMPTS[3], fixed(3)))
        return prefill(admitted)

    def record_decode(batch, tokens):
        events.append("decode")
        return decode(batch, tokens)

    e._prefill, e._decode = prefill_and_arrive, record_decode
    first = submit(e, None, PROMPTS[2], fixed(3))
    assert e.wait(first, timeout=30)["usage"]["output_tokens"] == 3
    assert e.wait(late[0], timeout=30)["usage"]["output_tokens"] == 3
    at = [i for i, ev in enumerate(events) if ev.startswith("prefill")]
    assert len(at) >= 2 and "decode" not in events[at[0] : at[1]], events[:8]
    assert e.wait(long, timeout=60)["usage"]["output_tokens"] == 300


def test_a_failure_after_new_rows_ran_their_prompts_fails_them_too(busy) -> None:
    """Rows between their prompt and the merge into the batch are failed with the batch when a
    step breaks (none waits for ever), and the engine goes on serving."""
    e, running = busy
    sample = e._sample
    broken = []

    def break_once(batch):
        if batch is e._batch and e._admitted and not broken:
            broken.append(1)
            raise RuntimeError("injected")
        return sample(batch)

    e._sample = break_once
    joining = submit(e, None, PROMPTS[2], fixed(50))
    for r in (running, joining):
        with pytest.raises(EngineError) as err:
            e.wait(r, timeout=30)
        assert err.value.status == 500 and "injected" in err.value.message
    assert broken and e.alive
    assert e.wait(submit(e, None, PROMPTS[0], fixed(2)), timeout=30)["usage"]["output_tokens"] == 2


def test_a_failure_while_loading_admitted_adapters_fails_them_and_frees_the_adapter(
    tiny_base, adapters, tmp_path
) -> None:
    """An unexpected error before admitted requests are rows of any batch (here while their
    adapter is made resident) answers them with 500 instead of leaving them waiting for ever
    with their adapter held (it could then never be evicted)."""
    e = Engine(Settings(model_dir=tiny_base, work_dir=tmp_path))
    e.start()
    try:
        e.cache.register(e.cache.validate("all-r16", adapters["all-r16"]), pin=False)
        acquire = e.cache.acquire
        calls = []

        def fail_once(recs):
            calls.append(1)
            if len(calls) == 1:
                raise RuntimeError("device out of memory")
            return acquire(recs)

        e.cache.acquire = fail_once
        req = submit(e, "all-r16", PROMPTS[0], fixed(3))
        with pytest.raises(EngineError) as err:
            e.wait(req, timeout=30)
        assert err.value.status == 500 and "out of memory" in err.value.message
        assert e.cache.get("all-r16").inflight == 0
        again = submit(e, "all-r16", PROMPTS[0], fixed(3))
        assert e.wait(again, timeout=30)["usage"]["output_tokens"] == 3
    finally:
        e.stop()
