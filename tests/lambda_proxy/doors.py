"""What the door tests share: a SageMaker runtime double that records each call, a table
with one adapter, and API Gateway's request as the function sees it."""

from __future__ import annotations

import io
import json
from typing import Any

import redis
from botocore.exceptions import ClientError
from botocore.response import StreamingBody

from contracts.settings import RouterSettings
from lambda_proxy import service
from lambda_proxy.cache import ResponseCache
from tests.lambda_proxy.conftest import event

ACCOUNT = "123456789012"
SSO_ROLE = f"arn:aws:iam::{ACCOUNT}:role/aws-reserved/sso.amazonaws.com/AWSReservedSSO_OnCall_abc1"
SSO_SESSION = f"arn:aws:sts::{ACCOUNT}:assumed-role/AWSReservedSSO_OnCall_abc1/alice@example.com"
WHO = f"arn:aws:sts::{ACCOUNT}:assumed-role/t/s"


class FakeSM:
    """A SageMaker runtime client that records each call and answers or raises."""

    def __init__(self, answer: dict[str, Any] | None = None, error: Exception | None = None):
        self.calls: list[dict[str, Any]] = []
        self.answer, self.error = answer, error
        self.lines: list[dict[str, Any]] | None = None

    def invoke_endpoint(self, **kw: Any) -> dict[str, Any]:
        self.calls.append(kw)
        if self.error is not None:
            raise self.error
        raw = json.dumps(self.answer).encode()
        return {"Body": StreamingBody(io.BytesIO(raw), len(raw))}

    def invoke_endpoint_with_response_stream(self, **kw: Any) -> dict[str, Any]:
        self.calls.append(kw)
        if self.error is not None:
            raise self.error
        lines = self.lines or []

        class Events:
            def __iter__(self):
                for line in lines:
                    yield {"PayloadPart": {"Bytes": json.dumps(line).encode() + b"\n"}}

            def close(self) -> None:
                pass

        return {"Body": Events()}


def answer(name: str = "m", version: str = "1", **over: Any) -> dict[str, Any]:
    return {
        "generated_text": "ok",
        "finish_reason": "stop",
        "adapter": f"c-{name}",
        "artifact": {"name": name, "version": version, "sha256": None},
        "usage": {"input_tokens": 3, "output_tokens": 1},
        **over,
    }


def table(**route: Any) -> dict[str, Any]:
    adapter = {"component": "c-m", "version": "1", "tenants": ["*"], **route}
    return {"endpoint": "e", "base_component": "b", "adapters": {"m": adapter}}


def configure(r13: redis.Redis, routes: dict[str, Any], fake: FakeSM, **settings: Any) -> None:
    r13.flushdb()
    service.configure(
        service.Dependencies(
            RouterSettings(routing_table=routes, **settings),
            ResponseCache(r13, 3600),
            fake,
            stream_client=fake,
        )
    )


def ev(path: str, body: Any, arn: str | None, method: str = "POST") -> dict[str, Any]:
    e = event(method, path, body, arn)
    e["requestContext"]["accountId"] = ACCOUNT
    return e


def context_header(arn: str | None = WHO) -> dict[str, str]:
    identity = {"userArn": arn} if arn else {}
    ctx = {"requestId": "r", "accountId": ACCOUNT, "identity": identity}
    return {"content-type": "application/json", "x-amzn-request-context": json.dumps(ctx)}


def container_error(status: int) -> ClientError:
    """A ModelError carrying the container's own status (``OriginalStatusCode``)."""
    return ClientError(
        {
            "Error": {"Code": "ModelError", "Message": "boom"},
            "OriginalStatusCode": status,
            "ResponseMetadata": {"HTTPStatusCode": 424},
        },
        "InvokeEndpoint",
    )


CANARY = {
    "component": "c-m-canary",
    "version": "2",
    "weight": 100,
    "max_error_rate": 0.25,
    "window_s": 300,
    "min_requests": 4,
}
