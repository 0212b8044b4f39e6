"""What a failure looks like to a tenant: a fixed message per status (SageMaker's and the
container's own words are logged, never answered), a container's 4xx kept as a 4xx, only
complete answers cached and only when they came from the pinned weights, and a stream that
cannot open answered as a JSON error with its status."""

from __future__ import annotations

import copy
import json
import time
import uuid
from typing import Any

import httpx
import openai
import pytest
from botocore.exceptions import ClientError

from contracts.settings import RouterSettings
from lambda_proxy import handler as h
from lambda_proxy import service, telemetry
from lambda_proxy.cache import ResponseCache
from lambda_proxy.sagemaker import make_client
from lambda_proxy.web import app
from tests.fakes import HttpEndpoint, served
from tests.lambda_proxy.conftest import (
    ALLOWED_ROLE,
    LEAK,
    TABLE,
    Context,
    call,
    event,
    model_answer,
)

#: What SageMaker's ModelError message looks like in a real account (names changed).
HOSTILE = (
    'Received client error (413) from primary with message "prompt too long". See '
    "https://us-east-1.console.aws.amazon.com/cloudwatch/home?region=us-east-1#logEventViewer:"
    "group=/aws/sagemaker/InferenceComponents/lora-prod-medical in account 123456789012 for "
    "more information. User: arn:aws:sts::123456789012:assumed-role/lora-prod-router/fn "
    'Traceback (most recent call last): File "/opt/program/runtime/server.py", line 88'
)


def _body() -> dict[str, Any]:
    return {"inputs": f"pt c/o sob {uuid.uuid4().hex}", "parameters": {"max_new_tokens": 8}}


@pytest.mark.parametrize(
    ("code", "http", "fields", "status"),
    [
        ("ModelError", 424, {"OriginalStatusCode": 413, "OriginalMessage": HOSTILE}, 413),
        ("ModelError", 424, {"OriginalStatusCode": 400, "OriginalMessage": HOSTILE}, 400),
        ("ModelError", 424, {"OriginalStatusCode": 500, "OriginalMessage": HOSTILE}, 502),
        # Busy: passed through, with Retry-After, so a client backs off.
        ("ModelError", 424, {"OriginalStatusCode": 503, "OriginalMessage": HOSTILE}, 503),
        # An adapter the container could not load is the deployment's fault: a 5xx.
        ("ModelError", 424, {"OriginalStatusCode": 424, "OriginalMessage": HOSTILE}, 502),
        ("ModelError", 424, {"OriginalStatusCode": 404, "OriginalMessage": HOSTILE}, 502),
        ("ModelError", 424, {"LogStreamArn": "arn:aws:logs:us-east-1:123456789012:x"}, 502),
        ("ValidationError", 400, {}, 400),
        ("ModelNotReadyException", 429, {}, 503),
        ("InternalFailure", 500, {}, 502),
    ],
)
def test_sagemakers_words_are_logged_and_a_container_4xx_keeps_its_status(
    router, caplog, code, http, fields, status
) -> None:
    stub, _ = router
    stub.add_client_error(
        "invoke_endpoint",
        service_error_code=code,
        service_message=HOSTILE,
        http_status_code=http,
        modeled_fields=fields,
    )
    got, out = call(event(body=_body()))
    assert got == status, out
    assert not LEAK.search(json.dumps(out)) and "prompt too long" not in out["error"]
    if status in (429, 503):
        assert out["request_id"]
    # The detail is in the router's log, under the request id, for whoever reads the logs.
    logged = [r for r in caplog.records if r.getMessage() == "invoke failed"]
    assert logged and logged[-1].request_id == out["request_id"]
    assert "123456789012" in logged[-1].detail


def test_a_component_not_ready_says_when_to_retry(router) -> None:
    stub, _ = router
    stub.add_client_error(
        "invoke_endpoint",
        service_error_code="ModelNotReadyException",
        service_message=HOSTILE,
        http_status_code=429,
    )
    out = h.handler(event(body=_body()), Context())
    assert out["statusCode"] == 503
    headers = out.get("headers") or {k: v[0] for k, v in out["multiValueHeaders"].items()}
    assert int(headers["Retry-After"]) >= 1


def _container_413(_calls: int, _body: bytes) -> tuple[int, dict[str, str], bytes]:
    """SageMaker runtime's answer when the container said 413: a ModelError (424)."""
    body = {
        "Message": HOSTILE,
        "OriginalStatusCode": 413,
        "OriginalMessage": HOSTILE,
        "LogStreamArn": "arn:aws:logs:us-east-1:123456789012:x",
    }
    return 424, {"x-amzn-ErrorType": "ModelError"}, json.dumps(body).encode()


@pytest.fixture
def served_router(redis_client):
    """The router's web app on uvicorn, in front of an endpoint whose container says 413."""
    endpoint = HttpEndpoint(_container_413)
    client = make_client(endpoint.url, "us-east-1", 10)
    settings = RouterSettings(routing_table=TABLE, max_new_tokens_cap=256)
    cache = ResponseCache(redis_client, 60)
    service.configure(service.Dependencies(settings, cache, client, stream_client=client))
    with served(app) as url:
        yield url, endpoint
    endpoint.close()
    service.configure(None)


def _context_headers() -> dict[str, str]:
    context = {
        "requestId": f"r-{time.time_ns()}",
        "identity": {"userArn": ALLOWED_ROLE},
        "accountId": "123456789012",
        "stage": "v1",
    }
    return {"x-amzn-request-context": json.dumps(context)}


def test_a_container_413_through_the_openai_client_is_one_invocation_and_a_413(
    served_router,
) -> None:
    url, endpoint = served_router
    client = openai.OpenAI(
        base_url=f"{url}/v1", api_key="unused", max_retries=2, default_headers=_context_headers()
    )
    with pytest.raises(openai.APIStatusError) as raised:
        client.chat.completions.create(
            model="medical", max_tokens=8, messages=[{"role": "user", "content": "pt c/o sob"}]
        )
    assert raised.value.status_code == 413
    assert endpoint.calls == 1  # the client did not retry, so the quota was charged once
    assert not LEAK.search(raised.value.response.text)


def test_a_stream_that_cannot_open_is_a_json_error_with_its_status(served_router) -> None:
    url, endpoint = served_router
    body = {**_body(), "stream": True}
    r = httpx.post(f"{url}/v1/adapters/medical/generate", json=body, headers=_context_headers())
    assert r.status_code == 413 and r.headers["content-type"].startswith("application/json")
    assert r.json()["code"] == "ModelError" and endpoint.calls == 1
    chat = {"model": "medical", "stream": True, "messages": [{"role": "user", "content": "x"}]}
    r = httpx.post(f"{url}/v1/chat/completions", json=chat, headers=_context_headers())
    assert r.status_code == 413 and r.json()["error"]["type"] == "invalid_request_error"


class NotReady:
    """A SageMaker client whose stream does not open: the component is still loading."""

    def invoke_endpoint_with_response_stream(self, **_: Any) -> dict[str, Any]:
        raise ClientError(
            {
                "Error": {"Code": "ModelNotReadyException", "Message": HOSTILE},
                "ResponseMetadata": {"HTTPStatusCode": 429},
            },
            "InvokeEndpointWithResponseStream",
        )


def test_a_stream_whose_component_is_not_ready_answers_503_with_retry_after(served_router) -> None:
    url, _ = served_router
    service.deps().stream_client = NotReady()
    body = {**_body(), "stream": True}
    r = httpx.post(f"{url}/v1/adapters/medical/generate", json=body, headers=_context_headers())
    assert r.status_code == 503 and int(r.headers["retry-after"]) >= 1
    assert "text/event-stream" not in r.headers["content-type"]


class Answers:
    """A SageMaker client that answers each call with the next scripted body."""

    def __init__(self, *bodies: Any) -> None:
        self.bodies = list(bodies)
        self.calls = 0

    def invoke_endpoint(self, **_: Any) -> dict[str, Any]:
        self.calls += 1
        raw = json.dumps(self.bodies.pop(0)).encode()
        import io

        from botocore.response import StreamingBody

        return {"Body": StreamingBody(io.BytesIO(raw), len(raw))}


def _configure(redis_client, client: Any, table: dict[str, Any] | None = None) -> None:
    settings = RouterSettings(routing_table=table or TABLE, max_new_tokens_cap=256)
    service.configure(service.Dependencies(settings, ResponseCache(redis_client, 60), client))


@pytest.mark.parametrize(
    "shape",
    [
        {},
        {"error": "CUDA out of memory at /opt/program/runtime/engine.py"},
        [1, 2],
        "text",
        {"generated_text": "half", "finish_reason": "abort"},
        {"generated_text": None, "finish_reason": "stop"},
    ],
)
def test_a_200_that_is_not_an_answer_is_a_502_and_never_cached(redis_client, shape) -> None:
    fake = Answers(shape, shape)
    _configure(redis_client, fake)
    body = _body()
    for _ in range(2):
        status, out = call(event(body=body))
        assert status == 502 and out["code"] in ("BadModelOutput", "ModelError"), out
    assert fake.calls == 2  # the first was not cached
    service.configure(None)


def test_an_answer_is_cached_only_from_the_weights_the_catalog_pins(redis_client) -> None:
    table = copy.deepcopy(TABLE)
    table["adapters"]["medical"].update(sha256="a" * 64, weights_sha256="b" * 64)
    right = {"name": "medical", "version": "1.0.0", "sha256": "b" * 64}
    wrong = {**right, "sha256": "c" * 64}
    answers = [json.loads(model_answer(artifact=a)["Body"].read()) for a in (wrong, None, right)]
    fake = Answers(*answers)
    _configure(redis_client, fake, table)
    body = _body()
    # Other weights under the same name and version, then the base model: neither is cached.
    assert call(event(body=body))[1]["cache"] == "miss"
    assert call(event(body=body))[1]["cache"] == "miss"
    assert call(event(body=body))[1]["cache"] == "miss"  # the pinned weights: cached
    assert call(event(body=body))[1]["cache"] == "hit" and fake.calls == 3
    # New weights pinned under the same version: the old answer is not served.
    table["adapters"]["medical"].update(sha256="d" * 64, weights_sha256="e" * 64)
    fake.bodies.append(
        json.loads(model_answer(artifact={**right, "sha256": "e" * 64})["Body"].read())
    )
    _configure(redis_client, fake, table)
    assert call(event(body=body))[1]["cache"] == "miss" and fake.calls == 4
    service.configure(None)


def test_a_streams_artifact_mismatch_is_counted_on_its_own_not_in_the_next_requests_metrics(
    redis_client, monkeypatch
) -> None:
    from lambda_proxy import streaming

    counted: list[str] = []
    monkeypatch.setattr(streaming, "count_now", lambda name, *a, **k: counted.append(name))
    _configure(redis_client, Answers())
    prep = service.Prepared("public", "2.0.0", "c", {}, f"k-{uuid.uuid4().hex}", True)
    stale = {
        "generated_text": "x",
        "finish_reason": "stop",
        "artifact": {"name": "public", "version": "1.9.9"},
    }
    service.remember(prep, "miss", stale, count=streaming.count_now)
    assert counted == ["ArtifactMismatch"]
    assert "ArtifactMismatch" not in telemetry.metrics.metric_set
    service.configure(None)
