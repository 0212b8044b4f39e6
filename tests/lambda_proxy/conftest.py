"""Router fixtures: events as API Gateway sends them, a stubbed SageMaker client, real Redis."""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import re
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import pytest
import redis
from botocore.config import Config
from botocore.response import StreamingBody
from botocore.stub import ANY, Stubber

os.environ.setdefault("POWERTOOLS_TRACE_DISABLED", "true")
os.environ.setdefault("POWERTOOLS_METRICS_NAMESPACE", "LoraFleetTest")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")  # never real: nothing leaves this machine
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")

from contracts.settings import RouterSettings
from lambda_proxy import handler as h
from lambda_proxy import service
from lambda_proxy.cache import ResponseCache
from tests.fakes import free_port

ALLOWED_ROLE = "arn:aws:sts::123456789012:assumed-role/clinic-north/session-1"
OTHER_ROLE = "arn:aws:sts::123456789012:assumed-role/intruder/session-9"
TABLE = {
    "endpoint": "lora-test-endpoint",
    "base_component": "lora-test-base",
    "base_revision": "rev-1",
    "adapters": {
        "medical": {
            "component": "lora-test-medical",
            "version": "1.0.0",
            "task": "medical_shorthand",
            "tenants": ["clinic-north"],
            "principals": [],
        },
        "public": {
            "component": "lora-test-public",
            "version": "2.0.0",
            "task": "style_transfer",
            "tenants": ["*"],
            "principals": [],
        },
        "by-arn": {
            "component": "lora-test-by-arn",
            "version": "1",
            "task": "sales_json",
            "tenants": [],
            "principals": ["arn:aws:iam::123456789012:role/intruder"],
        },
    },
}


@dataclass
class Context:
    function_name: str = "router"
    memory_limit_in_mb: int = 512
    invoked_function_arn: str = "arn:aws:lambda:us-east-1:123456789012:function:router"
    aws_request_id: str = "req-1"


def event(
    method: str = "POST",
    path: str = "/v1/adapters/medical/generate",
    body: Any = None,
    arn: str | None = ALLOWED_ROLE,
) -> dict[str, Any]:
    return {
        "resource": "/{proxy+}",
        "path": path,
        "httpMethod": method,
        "headers": {"Content-Type": "application/json"},
        "queryStringParameters": None,
        "pathParameters": None,
        "body": body if body is None or isinstance(body, str) else json.dumps(body),
        "isBase64Encoded": False,
        "requestContext": {
            "requestId": f"rid-{uuid.uuid4().hex[:8]}",
            "identity": {"userArn": arn} if arn else {},
            "stage": "v1",
            "path": path,
            "httpMethod": method,
        },
    }


def call(ev: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    out = h.handler(ev, Context())
    return out["statusCode"], json.loads(out["body"])


#: What the medical adapter's container reports serving (the router caches only such answers).
MEDICAL_ARTIFACT = {"name": "medical", "version": "1.0.0", "sha256": "0" * 64}


def model_answer(
    text: str = "Patient has shortness of breath.",
    artifact: dict[str, Any] | None = MEDICAL_ARTIFACT,
) -> dict[str, Any]:
    body = json.dumps(
        {
            "generated_text": text,
            "finish_reason": "stop",
            "artifact": artifact,
            "usage": {"input_tokens": 5, "output_tokens": 6},
        }
    ).encode()
    return {"Body": StreamingBody(io.BytesIO(body), len(body)), "ContentType": "application/json"}


def invoke_params(
    component: str = "lora-test-medical", *, body: Any = ANY, attributes: Any = ANY
) -> dict[str, Any]:
    """The InvokeEndpoint parameters the router sends for ``component`` (a Stubber's
    expectation); ``attributes`` is its CustomAttributes (``contracts.fairness``)."""
    return {
        "EndpointName": "lora-test-endpoint",
        "InferenceComponentName": component,
        "ContentType": "application/json",
        "Accept": "application/json",
        "CustomAttributes": attributes,
        "Body": body,
    }


@pytest.fixture
def sagemaker():
    client = boto3.client(
        "sagemaker-runtime",
        region_name="us-east-1",
        config=Config(retries={"mode": "standard", "max_attempts": 1}),
        aws_access_key_id="test",
        aws_secret_access_key="test",
    )
    with Stubber(client) as stub:
        yield client, stub
        stub.assert_no_pending_responses()


@pytest.fixture
def redis_client():
    client = redis.Redis(host="127.0.0.1", port=6379, db=0)
    client.ping()
    return client


@pytest.fixture
def router(sagemaker, redis_client):
    client, stub = sagemaker
    cache = ResponseCache(redis_client, ttl_s=72 * 3600)
    settings = RouterSettings(
        routing_table=TABLE, max_new_tokens_cap=256, max_stop_sequences=2, max_body_bytes=4096
    )
    service.configure(service.Dependencies(settings=settings, cache=cache, client=client))
    yield stub, cache
    service.configure(None)


def routed(cache: Any, client: Any, **changes: dict[str, Any]) -> dict[str, Any]:
    """Configure the router with TABLE, each adapter named in ``changes`` updated by its dict;
    returns the table."""
    table = copy.deepcopy(TABLE)
    for name, fields in changes.items():
        table["adapters"][name].update(fields)
    service.configure(service.Dependencies(RouterSettings(routing_table=table), cache, client))
    return table


@contextlib.contextmanager
def redis_server(where: Any) -> Iterator[tuple[subprocess.Popen, redis.Redis]]:
    """A Redis of our own on a free port (its files in ``where``), answering before it is
    handed out; killed after."""
    port = free_port()
    proc = subprocess.Popen(
        [
            "redis-server",
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(where),
        ],
        stdout=subprocess.DEVNULL,
    )
    client = redis.Redis(
        host="127.0.0.1", port=port, socket_timeout=0.25, socket_connect_timeout=0.25
    )
    for _ in range(100):
        try:
            client.ping()
            break
        except redis.RedisError:
            time.sleep(0.05)
    try:
        yield proc, client
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture
def own_redis(tmp_path):
    """A Redis of our own that a test may kill mid-run."""
    with redis_server(tmp_path) as server:
        yield server


#: What no error body may carry: an ARN, an account id, a URL, a file path or a traceback.
LEAK = re.compile(r"arn:aws|\b\d{12}\b|https?://|(?:/[\w.-]+){3,}|\.py\b|Traceback|File \"")


@pytest.fixture(autouse=True)
def error_bodies(request, monkeypatch):
    """Every error body the router answers in a test (buffered, stream refusals, stream error
    events) is scanned for internals; the fuzz module checks its own invariants (its adapter
    names are random text, which a 404 quotes back)."""
    from lambda_proxy import streaming

    seen: list[str] = []
    if request.module.__name__.endswith("test_fuzz"):
        yield seen
        return
    real_handler = h.handler

    def scanned_handler(ev: Any, context: Any) -> dict[str, Any]:
        out = real_handler(ev, context)
        if out.get("statusCode", 200) >= 400:
            seen.append(str(out.get("body") or ""))
        return out

    real_error = streaming._Format.error
    real_refusal = getattr(streaming.Stream, "refusal", None)

    def scanned_error(self: Any, exc: Any):
        for chunk in real_error(self, exc):
            seen.append(chunk.decode())
            yield chunk

    def scanned_refusal(self: Any, exc: Any) -> tuple[int, dict[str, str], bytes]:
        out = real_refusal(self, exc)  # type: ignore[misc]
        seen.append(out[2].decode())
        return out

    real_stream_refusal = streaming.refusal

    def scanned_stream_refusal(*args: Any) -> tuple[int, dict[str, str], bytes]:
        out = real_stream_refusal(*args)
        seen.append(out[2].decode())
        return out

    monkeypatch.setattr(streaming, "refusal", scanned_stream_refusal)
    monkeypatch.setattr(h, "handler", scanned_handler)
    monkeypatch.setattr(streaming._Format, "error", scanned_error)
    if hasattr(streaming.Stream, "refusal"):
        monkeypatch.setattr(streaming.Stream, "refusal", scanned_refusal)
    yield seen
    leaks = [b for b in seen if LEAK.search(b)]
    assert not leaks, f"error bodies carry internals: {leaks[:3]}"


@pytest.fixture
def r13():
    """Redis database 13, empty before and after; the router unconfigured after."""
    client = redis.Redis(host="127.0.0.1", port=6379, db=13)
    client.flushdb()
    yield client
    client.flushdb()
    service.configure(None)
