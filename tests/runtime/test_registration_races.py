"""Registrations racing with what they replace: a check that runs past its budget is answered
424 at once and, since its thread cannot be stopped, what it extracted is removed when it ends;
a request whose adapter is registered again while it is tokenized is tokenized again for the
record that serves it."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from runtime import server


def test_files_a_late_check_extracted_are_removed_when_it_ends(tmp_path) -> None:
    work = tmp_path / "work"
    owned = work / "adapter-abc" / "adapter"
    owned.mkdir(parents=True)
    (owned / "adapter_model.safetensors").write_bytes(b"\0" * 16)
    outside = tmp_path / "user-dir"  # a directory the server did not extract: never touched
    outside.mkdir()
    engine = SimpleNamespace(settings=SimpleNamespace(work_dir=work))

    async def run() -> None:
        loop = asyncio.get_running_loop()
        for src in (owned, outside):
            done = loop.create_future()
            done.set_result(SimpleNamespace(src=str(src)))
            server._discard_late(engine, done)  # type: ignore[arg-type]
        failed = loop.create_future()
        failed.set_exception(ValueError("bad adapter"))
        server._discard_late(engine, failed)  # type: ignore[arg-type]

    asyncio.run(run())
    assert not owned.parent.exists() and outside.exists()
    assert list(work.iterdir()) == []


class _Registry:
    def __init__(self, record: object) -> None:
        self.record = record

    def get(self, name: str) -> object:
        return self.record


class _SwappingEngine:
    """An engine whose adapter is registered again while the first tokenization runs."""

    def __init__(self, tmp_path) -> None:
        from contracts.settings import RuntimeSettings
        from runtime.telemetry import Telemetry

        self.settings = RuntimeSettings(model_dir=tmp_path, work_dir=tmp_path / "work")
        self.telemetry = Telemetry()
        self.ready = asyncio.Event()
        self.ready.set()
        self.alive = True
        self.old = SimpleNamespace(prompt="old prompt", json_schema=None)
        self.new = SimpleNamespace(prompt="new prompt", json_schema=None)
        self.registry = _Registry(self.old)
        self.prompts: list[str] = []
        self.admitted_with: list[object] = []

    def encode(self, inputs, messages, prompt) -> list[int]:
        self.prompts.append(prompt)
        self.registry.record = self.new  # a registration lands meanwhile
        return [1, 2, 3]

    def admit(self, req) -> None:
        from runtime.engine import EngineError

        self.admitted_with.append(self.registry.get(req.adapter))
        raise EngineError(429, "stop here: the test looks at what was prepared")

    async def stop(self) -> None:
        pass


def test_a_request_is_tokenized_for_the_record_that_serves_it(tmp_path) -> None:
    """The prompt shape (system turn, chat template) comes from the adapter's record; a
    registration during tokenization must not pair the old shape with the new weights."""
    from starlette.testclient import TestClient

    engine = _SwappingEngine(tmp_path)
    app = server.create_app(engine, start_engine=False)  # type: ignore[arg-type]
    with TestClient(app) as client:
        r = client.post(
            "/invocations",
            json={"inputs": "pt c/o sob"},
            headers={server.ADAPTER_HEADER: "medical"},
        )
    assert r.status_code == 429
    assert engine.prompts == ["old prompt", "new prompt"]
    assert engine.admitted_with == [engine.new]
