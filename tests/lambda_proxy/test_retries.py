"""A failed generation runs once: the official ``openai`` client, which retries every 5xx, is
told not to; a busy container stays retryable; a container's deadline is a 504; and the codes
a client sees are the router's own, never botocore's class names."""

from __future__ import annotations

import httpx
import openai
import pytest
from botocore.exceptions import ClientError, ReadTimeoutError
from starlette.testclient import TestClient

from lambda_proxy.web import app
from tests.lambda_proxy.conftest import call
from tests.lambda_proxy.doors import (
    CANARY,
    WHO,
    FakeSM,
    configure,
    container_error,
    context_header,
    ev,
    table,
)


def _openai_client(web: TestClient) -> openai.OpenAI:
    def relay(req: httpx.Request) -> httpx.Response:
        r = web.request(req.method, req.url.path, content=req.content, headers=context_header())
        return httpx.Response(r.status_code, headers=r.headers, content=r.content)

    return openai.OpenAI(
        base_url="http://router/v1",
        api_key="unused",
        max_retries=2,
        http_client=httpx.Client(transport=httpx.MockTransport(relay)),
    )


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (ReadTimeoutError(endpoint_url="https://runtime.sagemaker"), 504),
        (container_error(500), 502),
    ],
)
@pytest.mark.parametrize("stream", [False, True])
def test_the_openai_client_sends_a_failed_generation_once(r13, error, status, stream):
    fake = FakeSM(error=error)
    configure(r13, table(), fake)
    client = _openai_client(TestClient(app))
    with pytest.raises(openai.APIStatusError) as failed:
        client.chat.completions.create(
            model="m",
            max_tokens=8,
            temperature=0,
            stream=stream,
            messages=[{"role": "user", "content": "x"}],
        )
    assert failed.value.status_code == status
    assert failed.value.response.headers.get("x-should-retry") == "false"
    assert len(fake.calls) == 1, "the client sent the generation again"


def test_a_busy_container_stays_retryable(r13):
    configure(r13, table(), FakeSM(error=container_error(503)))
    r = TestClient(app).post(
        "/v1/chat/completions",
        json={"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "x"}]},
        headers=context_header(),
    )
    assert r.status_code == 503 and r.headers["retry-after"] == "5"
    assert "x-should-retry" not in r.headers


def test_a_container_deadline_in_a_stream_is_a_504_and_keeps_the_canary(r13):
    fake = FakeSM()
    fake.lines = [{"token": "x"}, {"error": "request timed out", "status": 504}]
    configure(r13, table(canary=CANARY), fake)
    web = TestClient(app)
    for i in range(6):
        r = web.post(
            "/v1/adapters/m/generate",
            json={"inputs": f"x{i}", "stream": True},
            headers=context_header(),
        )
        last = r.text.strip().splitlines()[-1]
        assert '"status": 504' in last and '"Timeout"' in last, last
    assert not r13.exists("lora:canary:v1:m:2:off")


def test_a_buffered_container_deadline_is_a_504(r13):
    configure(r13, table(), FakeSM(error=container_error(504)))
    status, body = call(ev("/v1/adapters/m/generate", {"inputs": "x"}, WHO))
    assert (status, body["code"]) == (504, "Timeout")


def test_error_codes_are_the_routers_own_not_botocore_classes(r13):
    from botocore.exceptions import EndpointConnectionError, NoCredentialsError

    for error in (EndpointConnectionError(endpoint_url="https://x"), NoCredentialsError()):
        configure(r13, table(), FakeSM(error=error))
        status, body = call(ev("/v1/adapters/m/generate", {"inputs": "x"}, WHO))
        assert status == 502 and body["code"] == "SageMakerUnreachable"
    denied = ClientError({"Error": {"Code": "AccessDeniedException"}}, "InvokeEndpoint")
    configure(r13, table(), FakeSM(error=denied))
    assert call(ev("/v1/adapters/m/generate", {"inputs": "x"}, WHO))[1]["code"] == "SageMakerError"
