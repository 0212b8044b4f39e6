"""A client that goes away stops its generation: streamed or not, its row leaves the batch at
the next decode step instead of generating to the end for nobody."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.runtime.conftest import Server, start_server, stop_server

LONG = {"inputs": "pt 45yo m c/o sob", "parameters": {"max_new_tokens": 3000,
                                                      "min_new_tokens": 3000}}  # fmt: skip


@pytest.fixture(scope="module")
def server(tiny_base: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start_server(tiny_base, tmp_path_factory.mktemp("disconnect"),
                       OPTION_MAX_NEW_TOKENS="4000", OPTION_MAX_INPUT_TOKENS="256")  # fmt: skip
    yield srv
    stop_server(srv)


def _stopped(server: Server) -> float:
    for line in server.client.get("/metrics").text.splitlines():
        if line.startswith('lora_rows_stopped_total{reason="cancelled"}'):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def _output_tokens(server: Server) -> float:
    for line in server.client.get("/metrics").text.splitlines():
        if line.startswith('lora_tokens_total{adapter="__base__",kind="output"}'):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def _wait_for(predicate, timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_a_stream_whose_client_disconnects_stops_generating(server) -> None:
    before = _stopped(server)
    with (
        httpx.Client(base_url=server.url, timeout=30) as client,
        client.stream("POST", "/invocations", json={**LONG, "stream": True}) as resp,
    ):
        assert resp.status_code == 200
        next(resp.iter_lines())  # generation has started; leaving closes the connection
    assert _wait_for(lambda: _stopped(server) > before), "the row kept generating"
    # The engine is free again: a new request is served at once.
    r = server.client.post(
        "/invocations", json={"inputs": "hi", "parameters": {"max_new_tokens": 2}}
    )
    assert r.status_code == 200


def test_a_waiting_client_that_disconnects_cancels_its_row(server) -> None:
    before, tokens = _stopped(server), _output_tokens(server)
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{server.url}/invocations", json=LONG, timeout=httpx.Timeout(30, read=0.5))
    assert _wait_for(lambda: _stopped(server) > before), "the row kept generating"
    assert _output_tokens(server) == tokens, "a cancelled request is not counted as served"
