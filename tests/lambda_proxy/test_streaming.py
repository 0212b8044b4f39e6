"""The router's web app (what the Lambda Web Adapter serves): buffered requests reach the
Powertools handler unchanged, ``stream: true`` becomes server-sent events as SageMaker produces
them, refusals stay JSON errors, a client that goes away closes SageMaker's stream, and a
completed deterministic stream is cached."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from contracts.settings import RouterSettings
from lambda_proxy import service
from lambda_proxy.cache import ResponseCache
from lambda_proxy.web import app
from tests.fakes import served
from tests.lambda_proxy.conftest import ALLOWED_ROLE, TABLE, model_answer


class FakeEventStream:
    """What botocore returns for InvokeEndpointWithResponseStream: events, then the end."""

    def __init__(
        self, lines: list[dict[str, Any]], delay: float, split: int = 7, first_delay: float = 0.0
    ) -> None:
        data = b"".join(json.dumps(x).encode() + b"\n" for x in lines)
        # PayloadPart chunks cut lines anywhere, as the real stream may.
        self.chunks = [data[i : i + split] for i in range(0, len(data), split)]
        self.delay, self.first_delay = delay, first_delay
        self.closed = threading.Event()
        self.sent = 0

    def __iter__(self) -> Iterator[dict[str, Any]]:
        time.sleep(self.first_delay)
        for chunk in self.chunks:
            if self.closed.is_set():
                raise ValueError("read of closed stream")
            time.sleep(self.delay)
            self.sent += 1
            yield {"PayloadPart": {"Bytes": chunk}}

    def close(self) -> None:
        self.closed.set()


class FakeSageMaker:
    def __init__(self) -> None:
        self.streams: list[FakeEventStream] = []
        self.requests: list[dict[str, Any]] = []
        self.answer: dict[str, Any] | None = None

    def script(
        self,
        text: str,
        delay: float = 0.01,
        end: dict[str, Any] | None = None,
        first_delay: float = 0.0,
    ) -> None:
        """The container's lines for ``text``, then ``end`` (default: its final answer;
        ``{}`` for none at all)."""
        pieces = [text[i : i + 3] for i in range(0, len(text), 3)]
        final = {
            "done": True,
            "generated_text": text,
            "adapter": "lora-test-medical",
            "finish_reason": "stop",
            "usage": {"input_tokens": 4, "output_tokens": len(pieces)},
            "artifact": {"name": "medical", "version": "1.0.0", "sha256": "0" * 64},
        }
        end = final if end is None else end
        lines = [{"token": p} for p in pieces] + ([end] if end else [])
        self.next = FakeEventStream(lines, delay, first_delay=first_delay)

    def invoke_endpoint_with_response_stream(self, **kw: Any) -> dict[str, Any]:
        self.requests.append(kw)
        self.streams.append(self.next)
        return {"Body": self.next}

    def invoke_endpoint(self, **kw: Any) -> dict[str, Any]:
        self.requests.append(kw)
        return model_answer("buffered answer")


def _configure(redis_client, **settings: Any) -> FakeSageMaker:
    fake = FakeSageMaker()
    s = RouterSettings(routing_table=TABLE, max_new_tokens_cap=256, max_body_bytes=4096, **settings)
    cache = ResponseCache(redis_client, ttl_s=3600)
    service.configure(
        service.Dependencies(settings=s, cache=cache, client=fake, stream_client=fake)
    )
    return fake


@pytest.fixture
def sagemaker(redis_client) -> Iterator[FakeSageMaker]:
    yield _configure(redis_client)
    service.configure(None)


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with served(app) as base:
        yield base


def _headers(arn: str = ALLOWED_ROLE) -> dict[str, str]:
    context = {
        "requestId": f"r-{time.time_ns()}",
        "identity": {"userArn": arn},
        "accountId": "123456789012",
        "resourcePath": "/v1/adapters/{adapter}/generate",
        "stage": "v1",
    }
    lambda_context = {
        "request_id": "lambda-1",
        "invoked_function_arn": "arn:aws:lambda:us-east-1:123456789012:function:router",
    }
    return {
        "x-amzn-request-context": json.dumps(context),
        "x-amzn-lambda-context": json.dumps(lambda_context),
    }


def _events(lines: Iterator[str]) -> Iterator[tuple[str, dict[str, Any]]]:
    event = "message"
    for line in lines:
        if line.startswith("event: "):
            event = line[7:]
        elif line.startswith("data: "):
            yield event, json.loads(line[6:])
            event = "message"


def test_a_stream_arrives_event_by_event_before_the_generation_ends(url, sagemaker) -> None:
    sagemaker.script("Patient is a 45-year-old male.", delay=0.05)
    body = {
        "inputs": "pt 45yo m",
        "stream": True,
        "parameters": {"temperature": 0.7, "do_sample": True},
    }
    t0 = time.perf_counter()
    with httpx.stream(
        "POST", f"{url}/v1/adapters/medical/generate", json=body, headers=_headers(), timeout=30
    ) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        events = _events(resp.iter_lines())
        kind, first = next(events)
        first_at = time.perf_counter() - t0
        rest = list(events)
    total = time.perf_counter() - t0
    assert kind == "token" and first["text"] == "Pat"
    assert first_at < total / 2, "the first event waited for the whole generation"
    kinds = [k for k, _ in rest]
    assert kinds[-1] == "done" and set(kinds[:-1]) == {"token"}
    text = first["text"] + "".join(e["text"] for k, e in rest if k == "token")
    done = rest[-1][1]
    assert text == done["output"] == "Patient is a 45-year-old male."
    assert done["adapter"] == "medical" and done["cache"] == "bypass" and done["usage"]
    sent = sagemaker.requests[-1]
    assert sent["InferenceComponentName"] == "lora-test-medical"
    assert json.loads(sent["Body"])["stream"] is True


def test_refusals_are_json_errors_before_any_stream(url, sagemaker) -> None:
    stream = {"inputs": "x", "stream": True}
    forbidden = httpx.post(
        f"{url}/v1/adapters/medical/generate",
        json=stream,
        headers=_headers("arn:aws:sts::999999999999:assumed-role/x/y"),
    )
    assert forbidden.status_code == 404 and forbidden.json()["code"] == "UnknownAdapter"
    bad = httpx.post(
        f"{url}/v1/adapters/medical/generate",
        headers=_headers(),
        json={**stream, "parameters": {"max_new_tokens": 100000}},
    )
    assert bad.status_code == 400 and "max_new_tokens" in bad.text
    assert not sagemaker.requests, "a refused stream never reached SageMaker"
    no_context = httpx.post(f"{url}/v1/adapters/medical/generate", json=stream)
    assert no_context.status_code == 403


def test_a_client_that_goes_away_closes_sagemakers_stream(url, sagemaker) -> None:
    sagemaker.script("x" * 600, delay=0.05)  # 200 pieces, 10 s if read to the end
    with httpx.stream(
        "POST",
        f"{url}/v1/adapters/medical/generate",
        headers=_headers(),
        json={"inputs": "pt", "stream": True},
        timeout=30,
    ) as resp:
        next(_events(resp.iter_lines()))
    stream = sagemaker.streams[-1]
    assert stream.closed.wait(5), "the router kept reading for a client that left"
    assert stream.sent < len(stream.chunks)


def test_a_completed_deterministic_stream_is_cached_and_replayed(
    url, sagemaker, redis_client
) -> None:
    prompt = f"pt {time.time_ns()}"
    sagemaker.script("Patient.")
    body = {"inputs": prompt, "stream": True}
    with httpx.stream(
        "POST", f"{url}/v1/adapters/medical/generate", json=body, headers=_headers(), timeout=30
    ) as resp:
        first = list(_events(resp.iter_lines()))
    assert first[-1][1]["cache"] == "miss"
    with httpx.stream(
        "POST", f"{url}/v1/adapters/medical/generate", json=body, headers=_headers(), timeout=30
    ) as resp:
        again = list(_events(resp.iter_lines()))
    assert again[-1][1]["cache"] == "hit" and again[-1][1]["output"] == "Patient."
    assert len(sagemaker.streams) == 1, "the second answer came from the cache"


def test_buffered_requests_reach_the_handler_unchanged(url, sagemaker) -> None:
    r = httpx.post(
        f"{url}/v1/adapters/medical/generate",
        headers=_headers(),
        json={"inputs": f"pt 45yo m {time.time_ns()}"},
    )
    assert r.status_code == 200, r.text
    assert r.json()["output"] == "buffered answer"
    assert r.headers["content-type"] == "application/json"
    assert httpx.get(f"{url}/v1/adapters", headers=_headers()).json()["adapters"]


def test_a_buffered_refusal_keeps_its_headers(url, redis_client) -> None:
    _configure(redis_client, quota_requests_per_minute=1)
    try:
        caller = _headers(f"arn:aws:sts::123456789012:assumed-role/quota-{time.time_ns()}/s")
        body = {"inputs": "hello", "parameters": {"temperature": 0.5, "do_sample": True}}
        first = httpx.post(f"{url}/v1/adapters/public/generate", json=body, headers=caller)
        second = httpx.post(f"{url}/v1/adapters/public/generate", json=body, headers=caller)
    finally:
        service.configure(None)
    assert first.status_code == 200
    assert second.status_code == 429 and int(second.headers["retry-after"]) > 0


@pytest.mark.parametrize("context", ["two", "not json", "[1]"])
def test_a_forged_or_broken_request_context_is_refused(url, sagemaker, context) -> None:
    headers = _headers()
    if context == "two":
        raw = [("x-amzn-request-context", headers["x-amzn-request-context"])] * 2
        r = httpx.post(f"{url}/v1/adapters/medical/generate", json={"inputs": "x"}, headers=raw)
        assert r.status_code == 403
        return
    headers["x-amzn-request-context"] = context
    r = httpx.post(f"{url}/v1/adapters/medical/generate", json={"inputs": "x"}, headers=headers)
    assert r.status_code == 400
    assert not sagemaker.requests


def _stream(url: str, body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    with httpx.stream(
        "POST", f"{url}/v1/adapters/medical/generate", json=body, headers=_headers(), timeout=30
    ) as resp:
        return list(_events(resp.iter_lines()))


@pytest.mark.parametrize(
    "end",
    [
        {"error": "CUDA out of memory at /opt/program/runtime/engine.py", "status": 500},
        {},
        {"done": True},
        {"done": True, "generated_text": "Patient is", "finish_reason": "abort"},
    ],
    ids=["error-line", "cut-short", "done-without-text", "aborted"],
)
def test_a_stream_that_fails_ends_with_an_error_event_and_is_not_cached(
    url, sagemaker, end, monkeypatch
) -> None:
    import lambda_proxy.streaming as streaming

    counted: list[str] = []
    monkeypatch.setattr(streaming, "count_now", lambda name, *a, **k: counted.append(name))
    prompt = f"pt {time.time_ns()}"
    sagemaker.script("Patient is", end=end)
    events = _stream(url, {"inputs": prompt, "stream": True})
    kind, error = events[-1]
    assert kind == "error" and error["status"] == 502, events
    # API Gateway saw a 200: the router's own count is what the stream 5xx alarm watches.
    assert "StreamServerError" in counted and f"StreamError{error['status']}" in counted
    sagemaker.script("Patient is fine.")
    again = _stream(url, {"inputs": prompt, "stream": True})
    assert again[-1][1]["cache"] == "miss", "a failed stream's answer was cached"


def test_a_stream_past_its_deadline_ends_with_a_504_event(url, redis_client) -> None:
    fake = _configure(redis_client, stream_deadline_s=0.5)
    try:
        fake.script("x" * 300, delay=0.02)  # 100 pieces, 2 s
        events = _stream(url, {"inputs": f"pt {time.time_ns()}", "stream": True})
    finally:
        service.configure(None)
    assert events[-1][0] == "error" and events[-1][1]["status"] == 504
    assert fake.streams[-1].closed.wait(5)


def test_a_quiet_stream_sends_keep_alives(url, sagemaker, monkeypatch) -> None:
    import lambda_proxy.streaming as streaming

    monkeypatch.setattr(streaming, "KEEPALIVE_S", 0.05)
    sagemaker.script("Patient.", first_delay=0.5)  # the model is slow to start
    with httpx.stream(
        "POST",
        f"{url}/v1/adapters/medical/generate",
        headers=_headers(),
        json={"inputs": f"pt {time.time_ns()}", "stream": True},
    ) as resp:
        lines = list(resp.iter_lines())
    assert ": keep-alive" in lines and lines.index(": keep-alive") < lines.index("event: token")


def test_openai_chunks_end_with_done(url, sagemaker) -> None:
    sagemaker.script("Patient is well.")
    body = {
        "model": "medical",
        "stream": True,
        "stream_options": {"include_usage": True},
        "messages": [{"role": "user", "content": f"pt well {time.time_ns()}"}],
        "temperature": 0,
    }
    with httpx.stream(
        "POST", f"{url}/v1/chat/completions", json=body, headers=_headers(), timeout=30
    ) as resp:
        lines = [x[6:] for x in resp.iter_lines() if x.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    chunks = [json.loads(x) for x in lines[:-1]]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert text == "Patient is well."
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] > 0
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert len(sagemaker.streams) == 1, "the model streamed it (no cached replay)"


def test_a_failed_canary_stream_counts_toward_its_rollback_and_keys_keep_their_version(
    url, redis_client, monkeypatch
) -> None:
    """Streams route by session key like buffered answers, and a canary stream that fails
    after its 200 counts as the canary's failure: here one is enough to roll it back."""
    import copy
    import uuid

    import lambda_proxy.streaming as streaming

    counted: list[str] = []
    monkeypatch.setattr(streaming, "count_now", lambda name, *a, **k: counted.append(name))
    version = f"1.1.0-{uuid.uuid4().hex[:8]}"
    table = copy.deepcopy(TABLE)
    table["adapters"]["medical"]["canary"] = {
        "component": "lora-test-medical-canary",
        "version": version,
        "weight": 50,
        "max_error_rate": 0.05,
        "window_s": 60,
        "min_requests": 1,
    }
    fake = FakeSageMaker()
    s = RouterSettings(routing_table=table, max_new_tokens_cap=256, max_body_bytes=4096)
    service.configure(
        service.Dependencies(
            settings=s, cache=ResponseCache(redis_client, ttl_s=60), client=fake, stream_client=fake
        )
    )

    def stream(key: str) -> list[tuple[str, dict[str, Any]]]:
        body = {"inputs": f"pt {uuid.uuid4().hex}", "stream": True}
        with httpx.stream(
            "POST",
            f"{url}/v1/adapters/medical/generate",
            json=body,
            headers={**_headers(), "X-Session-Key": key},
            timeout=30,
        ) as resp:
            return list(_events(resp.iter_lines()))

    try:
        fake.script("Patient is fine.")
        assert stream("first")[-1][0] == "done"  # the first new key: stable
        fake.script("Patient is", end={})  # the second new key's stream is cut short
        assert stream("second")[-1][1]["status"] == 502
        assert [r["InferenceComponentName"] for r in fake.requests] == [
            "lora-test-medical",
            "lora-test-medical-canary",
        ]
        assert "CanaryRollback" in counted
        fake.script("Patient is fine.")
        kind, done = stream("second")[-1]  # rolled back: the stable version serves the key
        assert (kind, done["version"]) == ("done", "1.0.0")
        assert fake.requests[-1]["InferenceComponentName"] == "lora-test-medical"
    finally:
        service.configure(None)
