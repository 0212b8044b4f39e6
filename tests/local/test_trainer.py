"""The background trainer and the plan ``up`` makes: adapters train one after another, each is
declared as soon as it passes its gate, one that fails its gate is held back (not served), and
progress is a status file the playground and ``python -m local status`` read."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from contracts.manifests import AdapterManifest, BaseManifest, BaseRef
from contracts.routing import RoutingTable
from local import trainer
from local.artifacts import plan_adapters
from local.options import Options


def _manifest(publishable: bool) -> AdapterManifest:
    """What training records for an adapter, with the gate's verdict."""
    return AdapterManifest(base=BaseRef(model_id="local/base"), eval=_verdict(publishable))


#: A base directory's record, as training/base.py writes it.
BASE = BaseManifest(model_id="local/base", tokenizer_sha256="0" * 64)


def _verdict(publishable: bool) -> dict:
    return {
        "metric": "chrf",
        "publishable": publishable,
        "beats_base": publishable,
        "failures": [] if publishable else ["faithfulness 0.500 is below 0.8"],
        "adapter": {"score": 50.0},
        "base": {"score": 10.0},
        "bootstrap": {"ci_low": 20.0 if publishable else -1.0},
    }


@pytest.fixture
def opts(tmp_path: Path) -> Options:
    state = tmp_path / "state"
    state.mkdir()
    return Options(
        env="local-quick", state_dir=state, artifacts=tmp_path / "artifacts", log=lambda _m: None
    )


@pytest.fixture
def catalog_unchanged(monkeypatch):
    """No entry is added to the catalog while the trainer runs."""
    monkeypatch.setattr("local.trainer._added", lambda *a: [])


def test_adapters_train_in_order_and_only_publishable_ones_come_online(
    opts, monkeypatch, catalog_unchanged
) -> None:
    seen_states: list[dict] = []
    declared: list[str] = []
    verdicts = {"sales-json": True, "style-formal": False, "pii-redaction": True}

    def fake_train(name, **kw):
        kw["log"](f"[{name}] step 10/20 eval_loss 0.5")
        seen_states.append(json.loads((opts.state_dir / trainer.STATUS_FILE).read_text()))
        kw["log"](f"[{name}] evaluating the adapter on 64 test examples")
        return SimpleNamespace(manifest=_manifest(verdicts[name]), seconds=1.0)

    monkeypatch.setattr("training.train.train", fake_train)
    names = list(verdicts)
    offline = trainer.run(opts, names, declare=lambda: declared.append("x"), log=lambda _m: None)
    assert offline == 1 and len(declared) == 2, "declared after each publishable adapter only"
    first = seen_states[0]["adapters"]
    assert first["sales-json"] == {
        "state": "training",
        "started": first["sales-json"]["started"],
        "step": 10,
        "steps": 20,
    }
    assert first["style-formal"] == {"state": "queued"}
    final = trainer.read_status(opts.state_dir)
    assert final["finished"] is not None
    states = {n: a["state"] for n, a in final["adapters"].items()}
    assert states == {
        "sales-json": "online",
        "style-formal": "not publishable",
        "pii-redaction": "online",
    }
    assert "faithfulness" in final["adapters"]["style-formal"]["detail"]


def test_a_failing_training_is_reported_and_the_rest_go_on(
    opts, monkeypatch, catalog_unchanged
) -> None:
    def fake_train(name, **kw):
        if name == "sales-json":
            raise RuntimeError("out of memory")
        return SimpleNamespace(manifest=_manifest(True), seconds=1.0)

    monkeypatch.setattr("training.train.train", fake_train)
    declared = []
    trainer.run(
        opts,
        ["sales-json", "pii-redaction"],
        declare=lambda: declared.append(1),
        log=lambda _m: None,
    )
    final = trainer.read_status(opts.state_dir)["adapters"]
    assert (
        final["sales-json"]["state"] == "failed"
        and "out of memory" in final["sales-json"]["detail"]
    )
    assert final["pii-redaction"]["state"] == "online" and declared == [1]


def test_the_plan_holds_back_a_cached_adapter_that_failed_its_gate(opts, monkeypatch) -> None:
    from config import load_deployment

    dep = load_deployment("local-quick")
    out = opts.artifacts / "adapters" / dep.base_key
    for a in dep.adapters[:2]:
        (out / a.name).mkdir(parents=True)
        (out / f"{a.name}.tar.gz").write_bytes(b"x")
        publishable = a is dep.adapters[0]
        _manifest(publishable).dump(out / a.name)
    monkeypatch.setattr(
        "local.artifacts.cached_adapter",
        lambda dep, name, *a: (
            None if name in {x.name for x in dep.adapters[:2]} else "no artifact yet"
        ),
    )
    plan = plan_adapters(dep, opts, base_manifest=BASE)
    assert list(plan.ready) == [dep.adapters[0].name]
    assert list(plan.held) == [dep.adapters[1].name] and "below" in plan.held[dep.adapters[1].name]
    assert len(plan.todo) == len(dep.adapters) - 2
    opts.serve_unpublishable = True
    served = plan_adapters(dep, opts, base_manifest=BASE)
    assert len(served.ready) == 2 and served.unpublishable == [dep.adapters[1].name]


def test_an_adapter_served_without_passing_its_gate_is_shown_as_such(opts) -> None:
    from local.gateway import availability

    trainer.Status(opts.state_dir, []).set("style-formal", state="online", publishable=False)
    gateway = SimpleNamespace(
        state_dir=opts.state_dir,
        table=RoutingTable.model_validate(
            {
                "endpoint": "e",
                "base_component": "b",
                "adapters": {
                    "style-formal": {"component": "c-style", "version": "1"},
                    "sales-json": {"component": "c-sales", "version": "1"},
                },
            }
        ),
    )
    shown = availability(gateway, [{"name": "c-style"}, {"name": "c-sales"}])
    assert shown == {
        "style-formal": {"state": "online", "publishable": False},
        "sales-json": {"state": "online"},
    }


def test_entries_added_while_the_trainer_runs_are_trained_when_its_queue_ends(
    opts, monkeypatch
) -> None:
    """``up`` does not start a second trainer; the running one plans again when its queue
    ends and trains what needs training and was not tried (a failed one is not retried)."""
    from config import load_deployment

    dep = load_deployment("local-quick")
    base = opts.artifacts / "base" / dep.base_key
    base.mkdir(parents=True)
    BASE.dump(base)
    out = opts.artifacts / "adapters" / dep.base_key
    trained: list[str] = []
    first, failing, *rest = [a.name for a in dep.adapters]

    def fake_train(name, **kw):
        if name == failing:
            raise RuntimeError("out of memory")
        trained.append(name)
        (out / name).mkdir(parents=True)
        (out / f"{name}.tar.gz").write_bytes(b"x")
        _manifest(True).dump(out / name)
        return SimpleNamespace(manifest=_manifest(True), seconds=1.0)

    monkeypatch.setattr("training.train.train", fake_train)
    monkeypatch.setattr(
        "local.artifacts.cached_adapter",
        lambda dep, name, *a: None if name in trained else "no artifact yet",
    )
    offline = trainer.run(opts, [first], declare=lambda: None, log=lambda _m: None)
    assert trained == [first, *rest] and offline == 1
    states = {n: a["state"] for n, a in trainer.read_status(opts.state_dir)["adapters"].items()}
    assert states == {first: "online", failing: "failed", **{n: "online" for n in rest}}


def test_background_training_runs_at_the_lowest_priority_and_pauses_for_a_foreground_job(
    tmp_path,
) -> None:
    """A stand-in trainer (a process make up's state names) is paused by the test session's
    hook and resumes after; the trainer itself lowers its priority to nice 19."""
    import subprocess
    import sys
    import time

    from local import trainer
    from local.processes import write_state

    code = "import time\nfrom local.trainer import lower_priority\nlower_priority()\ntime.sleep(60)"
    proc = subprocess.Popen([sys.executable, "-c", code])
    try:
        write_state(tmp_path, {"trainer": {"pid": proc.pid, "adapters": ["a"], "health": None}})
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and trainer.priority(proc.pid) != (19, False):
            time.sleep(0.1)
        assert trainer.priority(proc.pid) == (19, False)
        pid = trainer.pause_running_trainer(tmp_path)
        assert pid == proc.pid
        time.sleep(0.2)
        assert trainer.priority(proc.pid) == (19, True), "paused"
        trainer.resume(pid)
        time.sleep(0.2)
        assert trainer.priority(proc.pid) == (19, False), "running again"
        assert trainer.pause_running_trainer(tmp_path / "elsewhere") is None
    finally:
        proc.kill()
        proc.wait()
