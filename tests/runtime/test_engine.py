"""One request can never harm another: a row whose scores or probabilities are not finite, or
whose sampling raises, fails alone; a race between DELETE and batch forming never kills the
engine thread; and /ping fails once the engine thread is gone."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from runtime.engine import Engine
from runtime.request import EngineError, GenParams, GenRequest
from runtime.settings import Settings

PROMPTS = ["pt 45yo m c/o sob", "Alamak, I forgot my wallet lah", "Hello from the desk",
           "This phone is absolute garbage!!!"]  # fmt: skip


@pytest.fixture(scope="module")
def engine(tiny_base: Path, tmp_path_factory: pytest.TempPathFactory):
    e = Engine(Settings(model_dir=tiny_base, max_batch_size=16,
                        work_dir=tmp_path_factory.mktemp("work")))  # fmt: skip
    e.start()
    yield e
    e.stop()


def _run(engine: Engine, prompt: str, params: GenParams) -> dict | EngineError:
    req = GenRequest(adapter=None, input_ids=engine.encode(prompt, None), params=params)
    try:
        return engine.wait(engine.submit(req), timeout=60)
    except EngineError as exc:
        return exc


def test_a_request_with_non_finite_sampling_fails_alone(engine) -> None:
    greedy = GenParams(max_new_tokens=6)
    alone = {p: _run(engine, p, greedy)["generated_text"] for p in PROMPTS}
    hostile = [
        GenParams(max_new_tokens=6, do_sample=True, temperature=5e-324),
        GenParams(max_new_tokens=6, do_sample=True, temperature=1.0, repetition_penalty=1e-300),
        GenParams(max_new_tokens=6, repetition_penalty=1e-300),
    ]
    jobs = [(p, greedy) for p in PROMPTS for _ in range(8)] + [
        (PROMPTS[0], h) for h in hostile for _ in range(4)
    ]
    with ThreadPoolExecutor(len(jobs)) as pool:
        results = list(pool.map(lambda j: _run(engine, *j), jobs))
    good = results[: len(PROMPTS) * 8]
    bad = results[len(PROMPTS) * 8 :]
    for (prompt, _), out in zip(jobs, good, strict=False):
        assert isinstance(out, dict), out
        assert out["generated_text"] == alone[prompt], "a neighbour changed this row's output"
    for out in bad:
        assert isinstance(out, EngineError) and out.status == 400, out
        assert "sampling failed" in out.message


def test_an_adapter_deleted_while_a_batch_forms_fails_only_its_request(engine) -> None:
    # What DELETE between cache.get() and cache.hold() does: get() finds the record, hold()
    # (under the cache's lock, after the DELETE) does not.
    cache = engine.cache

    def vanished(name: str):
        raise KeyError(name)

    cache.get, cache.can_fit, cache.hold = (lambda n: object()), (lambda names: True), vanished
    try:
        req = GenRequest(adapter="ghost", input_ids=engine.encode("x", None),
                         params=GenParams(max_new_tokens=2))  # fmt: skip
        req.id, req.deadline = 0, req.arrival + 30
        engine._queue.put(req)
        with pytest.raises(EngineError) as err:
            engine.wait(req, timeout=30)
        assert err.value.status == 404
    finally:
        for attr in ("get", "can_fit", "hold"):
            del cache.__dict__[attr]  # the class's own methods again
    assert engine.alive
    assert _run(engine, PROMPTS[1], GenParams(max_new_tokens=3))["generated_text"] is not None


def test_ping_fails_when_the_engine_thread_has_stopped(tiny_base, tmp_path) -> None:
    from fastapi.testclient import TestClient

    from runtime.server import create_app

    e = Engine(Settings(model_dir=tiny_base, work_dir=tmp_path))
    with TestClient(create_app(e)) as client:
        assert client.get("/ping").status_code == 200
        e.stop()  # the thread ends as a crash would end it
        r = client.get("/ping")
        assert r.status_code == 503 and "engine thread" in r.json()["error"]


@pytest.mark.parametrize("params", [{"temperature": 5e-324, "do_sample": True},
                                    {"repetition_penalty": 1e-300},
                                    {"repetition_penalty": 11.0}])  # fmt: skip
def test_out_of_range_sampling_parameters_are_a_400(server, params) -> None:
    r = server.invoke(inputs="hello", parameters={"max_new_tokens": 2, **params})
    assert r.status_code == 400, r.text


def _text(engine: Engine, prompt: str, **params) -> str:
    out = _run(engine, prompt, GenParams(max_new_tokens=8, **params))
    assert isinstance(out, dict), out
    return out["generated_text"]


def test_sampling_is_seeded_per_request_and_top_k_1_is_greedy(engine) -> None:
    prompt = PROMPTS[2]
    sampled = {"do_sample": True, "temperature": 1.5}
    texts = {_text(engine, prompt, seed=s, **sampled) for s in range(6)}
    assert len(texts) > 1, "different seeds gave the same text every time"
    assert _text(engine, prompt, seed=4, **sampled) == _text(engine, prompt, seed=4, **sampled)
    assert _text(engine, prompt, seed=9, top_k=1, **sampled) == _text(engine, prompt)


def test_a_seed_gives_the_same_text_whatever_the_batch_holds(engine) -> None:
    sampled = GenParams(max_new_tokens=8, do_sample=True, temperature=1.2, seed=11)
    alone = _run(engine, PROMPTS[0], sampled)["generated_text"]
    jobs = [(PROMPTS[0], sampled)] + [(p, GenParams(max_new_tokens=3 + i % 5, do_sample=i % 2 == 0,
                                                     temperature=0.9, seed=i))
                                      for i, p in enumerate(PROMPTS * 3)]  # fmt: skip
    with ThreadPoolExecutor(len(jobs)) as pool:
        results = list(pool.map(lambda j: _run(engine, *j), jobs))
    assert results[0]["generated_text"] == alone


def test_registration_is_not_starved_by_requests_waiting_for_the_engine(
    tiny_base, adapters, tmp_path
) -> None:
    import asyncio
    import time

    import httpx

    from runtime.server import create_app

    e = Engine(Settings(model_dir=tiny_base, work_dir=tmp_path, request_timeout_s=5))
    e.start()
    e.stop()  # requests are accepted but never finish: each waits its whole deadline
    app = create_app(e)

    async def scenario() -> float:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://runtime") as client:
            waiting = [asyncio.create_task(client.post("/invocations", json={
                "inputs": f"hello {i}", "parameters": {"max_new_tokens": 4}}, timeout=60))
                for i in range(16)]  # fmt: skip
            await asyncio.sleep(0.5)
            t0 = time.perf_counter()
            # Preloading would wait for the stopped engine; registering must not wait at all.
            body = {"name": "prompt", "src": str(adapters["attn-r4"]), "preload": False}
            r = await client.post("/adapters", json=body, timeout=60)
            took = time.perf_counter() - t0
            assert r.status_code == 200, r.text
            for task in waiting:
                task.cancel()
            await asyncio.gather(*waiting, return_exceptions=True)
            return took

    assert asyncio.run(scenario()) < 3.0
