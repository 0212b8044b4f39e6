"""A client that goes away stops its generation: streamed or not, its request is aborted in
vLLM instead of generating to the end for nobody."""

from __future__ import annotations

import time

import httpx
import pytest

from tests.runtime.conftest import Server

LONG = {
    "inputs": "pt 45yo m c/o sob",
    "parameters": {"max_new_tokens": 2900, "min_new_tokens": 2900},
}


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


def test_vllm_is_left_with_no_running_request(server) -> None:
    """After both kinds of disconnect, the engine has nothing left to do: a short request is
    answered as fast as on an idle engine (vLLM would otherwise still be decoding 3,000
    tokens for nobody, and /metrics' admitted count would not be back to 0)."""
    assert _wait_for(lambda: _gauge(server, "lora_queue_depth") == 0)


def _gauge(server: Server, name: str) -> float:
    for line in server.client.get("/metrics").text.splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return -1.0
