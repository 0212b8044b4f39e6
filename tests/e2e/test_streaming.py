"""Streaming end to end through the local platform: client -> gateway -> the router's web app ->
InvokeEndpointWithResponseStream -> local endpoint -> model server, and back as server-sent
events. Events arrive before the generation ends, a client that goes away stops the generation
in the model server, and the official ``openai`` client streams chat and completion chunks."""

from __future__ import annotations

import json
import time

import httpx
import openai
import pytest

from tests.e2e.test_platform import _deployment

pytestmark = pytest.mark.e2e
# Sampled with a seed: long and reproducible (the small test base rarely ends early).
LONG = {
    "inputs": "pt 45yo m c/o sob",
    "stream": True,
    "parameters": {"max_new_tokens": 600, "do_sample": True, "temperature": 1.0, "seed": 7},
}


def _events(resp: httpx.Response):
    event = "message"
    for line in resp.iter_lines():
        if line.startswith("event: "):
            event = line[7:]
        elif line.startswith("data: "):
            yield event, json.loads(line[6:]), time.perf_counter()


def _cancelled(platform) -> float:
    for line in httpx.get(f"{platform.runtime}/metrics").text.splitlines():
        if line.startswith('lora_rows_stopped_total{reason="cancelled"}'):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


#: Seeds to try: the fixture's adapters learned to end their short training labels, so a
#: sampled answer may stop after a dozen tokens, which take a few milliseconds on the CPU.
SEEDS = range(7, 27)


def _with_seed(body: dict, seed: int) -> dict:
    return {**body, "parameters": {**body["parameters"], "seed": seed}}


def test_events_arrive_before_the_generation_ends(platform) -> None:
    """A long answer's first token reaches the client while the model server is still
    generating it (its adapter has a request in flight), or well before the answer ends. On a
    busy machine one stream's delivery can bunch (the local gateway was seen holding the first
    events for a third of a second, longer than a short answer takes), so each seed that gives a
    long answer is one try, and one streamed delivery is what this asserts; a router or gateway
    that buffers every stream fails every try."""
    adapter = _deployment(platform).adapters[0]
    url = f"{platform.gateway}/v1/adapters/{adapter.name}/generate"
    tried = []
    for seed in SEEDS:
        with httpx.stream("POST", url, json=_with_seed(LONG, seed), timeout=120) as resp:
            assert resp.status_code == 200, resp.read()
            stream = _events(resp)
            first = next(e for e in stream if e[0] == "token")
            running = _inflight(platform, adapter.component_name)
            events = [first, *stream]
        tokens = [e for e in events if e[0] == "token"]
        kind, done, t_done = events[-1]
        assert kind == "done"
        assert "".join(e[1]["text"] for e in tokens) == done["output"]
        assert done["served_by"] == adapter.component_name
        if len(tokens) < 60:
            continue
        tried.append((len(tokens), running, round(t_done - first[2], 3)))
        if running > 0 or first[2] < t_done - 0.05:
            return
    pytest.fail(f"every long answer came in one piece (tokens, in flight, seconds): {tried}")


def _inflight(platform, component: str) -> int:
    """Requests the model server is running for this adapter component now."""
    listed = httpx.get(f"{platform.runtime}/adapters", timeout=30).json()["adapters"]
    return next((a["inflight"] for a in listed if a["name"] == component), 0)


def test_a_client_that_goes_away_stops_the_generation(platform) -> None:
    """Each try leaves after the first token of an answer of up to 600 tokens; an answer that
    the adapter ends within a few tokens finishes before the departure reaches the server, so
    the next seed is tried. One stopped generation is what this asserts."""
    adapter = _deployment(platform).adapters[0]
    url = f"{platform.gateway}/v1/adapters/{adapter.name}/generate"
    for seed in SEEDS:
        before = _cancelled(platform)
        with httpx.stream("POST", url, json=_with_seed(LONG, seed), timeout=120) as resp:
            assert resp.status_code == 200
            next(e for e in _events(resp) if e[0] == "token")
        # Leaving the block closed the connection: the model server must drop the row.
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and _cancelled(platform) <= before:
            time.sleep(0.1)
        if _cancelled(platform) > before:
            return
    pytest.fail("the generation ran on for a client that left, for every seed tried")


@pytest.fixture(scope="module")
def client(platform) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{platform.gateway}/v1", api_key="unused", max_retries=0)


def test_the_openai_client_streams_a_chat(client, platform) -> None:
    adapter = _deployment(platform).adapters[0]
    # Sampled with a seed: never cached, and the same text however it is delivered.
    ask = {
        "model": adapter.name,
        "messages": [{"role": "user", "content": "pt 45yo m c/o sob"}],
        "max_tokens": 12,
        "temperature": 0.8,
        "seed": 21,
    }
    stream = client.chat.completions.create(
        **ask, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finals = [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ]
    assert finals in (["stop"], ["length"])
    assert chunks[-1].usage is not None and 0 < chunks[-1].usage.completion_tokens <= 12
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) > 1
    whole = client.chat.completions.create(**ask)  # the same request, unstreamed
    assert whole.choices[0].message.content == text


def test_the_openai_client_streams_a_completion(client, platform) -> None:
    adapter = _deployment(platform).adapters[-1]
    ask = {
        "model": adapter.name,
        "prompt": "Alamak, I forgot lah",
        "max_tokens": 8,
        "temperature": 0,
    }
    chunks = list(client.completions.create(**ask, stream=True))
    assert chunks and all(c.object == "text_completion" for c in chunks)
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text and text == client.completions.create(**ask).choices[0].text
