"""Tier behaviour: LRU by slot count, headroom eviction, pins, in-flight protection."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.cache import CapacityError
from runtime.engine import Engine
from runtime.request import GenParams, GenRequest
from runtime.settings import Settings


@pytest.fixture
def engine(tiny_base: Path, tmp_path: Path):
    eng = Engine(Settings(model_dir=tiny_base, max_loras=2, max_cpu_loras=1, work_dir=tmp_path))
    eng.start()
    yield eng
    eng.stop()


def _register(engine: Engine, name: str, src: Path, pin: bool = False):
    return engine.cache.register(engine.cache.validate(name, src), pin=pin)[0]


def _run(engine: Engine, adapter: str) -> dict:
    req = engine.submit(
        GenRequest(adapter=adapter, input_ids=[5, 6, 7], params=GenParams(max_new_tokens=2))
    )
    return engine.wait(req, timeout=60)


def test_lru_eviction_by_slot_count_and_host_tier_bound(engine, adapters) -> None:
    names = list(adapters)
    for n in names:
        _register(engine, n, adapters[n])
    for n in names[:3]:
        _run(engine, n)
    tiers = {a["name"]: a["tier"] for a in engine.cache.list()}
    assert tiers[names[0]] != "device"  # least recently used of three, two slots
    assert tiers[names[1]] == tiers[names[2]] == "device"
    assert sum(t == "host" for t in tiers.values()) <= 1  # OPTION_MAX_CPU_LORAS=1
    _run(engine, names[0])  # comes back from disk or host
    assert {a["name"]: a["tier"] for a in engine.cache.list()}[names[0]] == "device"
    events = [e["event"] for e in engine.telemetry.trace()]
    assert "adapter_evict" in events and "adapter_promote" in events


def test_pinned_adapters_are_never_evicted(engine, adapters) -> None:
    names = list(adapters)
    _register(engine, names[0], adapters[names[0]], pin=True)
    _run(engine, names[0])
    for n in names[1:]:
        _register(engine, n, adapters[n])
        _run(engine, n)
    assert engine.cache.get(names[0]).tier == "device"


def test_the_pin_that_would_take_the_last_slot_is_refused(engine, adapters) -> None:
    names = list(adapters)
    _register(engine, names[0], adapters[names[0]], pin=True)  # one of the two slots
    before = engine.cache.list()
    with pytest.raises(CapacityError, match="one stays unpinned"):
        _register(engine, names[1], adapters[names[1]], pin=True)
    assert engine.cache.list() == before
    # ... so unpinned adapters still get a slot and answer.
    for n in names[1:]:
        _register(engine, n, adapters[n])
        assert _run(engine, n)["adapter"] == n


def test_headroom_threshold_evicts_before_loading(engine, adapters) -> None:
    names = list(adapters)
    _register(engine, names[0], adapters[names[0]])
    _run(engine, names[0])
    engine.cache.memory_probe = lambda: (90, 100)  # 0.90 used > 0.85 headroom
    _register(engine, names[1], adapters[names[1]])
    _run(engine, names[1])
    assert engine.cache.get(names[0]).tier != "device"  # a free slot existed: headroom evicted it
    assert any(e.get("reason") == "headroom" for e in engine.telemetry.trace())


def test_in_flight_adapters_are_not_evicted(engine, adapters) -> None:
    names = list(adapters)
    for n in names[:3]:
        _register(engine, n, adapters[n])
    _run(engine, names[0])
    _run(engine, names[1])
    held = engine.cache.hold(names[0])  # as if a request for it were admitted
    try:
        assert not engine.cache.can_fit({names[2], names[1]})
        assert engine.cache.can_fit({names[2]})
    finally:
        engine.cache.release(held)


def test_a_failed_reload_from_disk_fails_only_that_adapters_requests(
    engine, adapters, tmp_path
) -> None:
    import shutil

    from runtime.request import EngineError

    names = list(adapters)[:3]
    copies = {}
    for n in names:
        copies[n] = tmp_path / f"copy-{n}"
        shutil.copytree(adapters[n], copies[n])
        _register(engine, n, copies[n])
    for n in names:
        _run(engine, n)  # two slots, one host place: the first is back on disk
    victim = next(a["name"] for a in engine.cache.list() if a["tier"] != "device")
    engine.cache.get(victim).host = None  # as the host tier's LRU would leave it: on disk only
    (copies[victim] / "adapter_model.safetensors").write_bytes(b"gone")
    others = [n for n in names if n != victim]
    reqs = [engine.submit(GenRequest(adapter=a, input_ids=[5, 6, 7],
                                     params=GenParams(max_new_tokens=2)))
            for a in [victim, None, *others]]  # fmt: skip
    with pytest.raises(EngineError) as err:
        engine.wait(reqs[0], timeout=60)
    assert err.value.status == 424 and victim in err.value.message
    assert str(tmp_path) not in err.value.message, "a local path leaked to the caller"
    for req in reqs[1:]:
        assert engine.wait(req, timeout=60)["generated_text"] is not None
