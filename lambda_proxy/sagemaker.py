"""InvokeEndpoint with InferenceComponentName, adaptive retries, and errors mapped for clients.

Retries (botocore's adaptive mode: throttling and 5xx) and timeouts are sized so that the whole
call ends before the router's deadline, which is shorter than the Lambda's timeout: a client
gets a clear 504 instead of a Lambda timeout.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, ConnectTimeoutError, ReadTimeoutError

_ERRORS: dict[str, tuple[int, str]] = {
    "ModelError": (502, "the model container returned an error"),
    "ValidationError": (400, "the request was rejected by SageMaker"),
    "ModelNotReadyException": (503, "the adapter is not ready yet; retry shortly"),
    "ThrottlingException": (429, "too many requests; slow down"),
    "ServiceUnavailable": (503, "SageMaker is temporarily unavailable"),
    "InternalFailure": (502, "SageMaker failed to process the request"),
    "InternalDependencyException": (502, "SageMaker failed to process the request"),
    "ModelStreamError": (502, "the model stream failed"),
}


@dataclass
class InvokeError(Exception):
    status: int
    message: str
    code: str

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


def make_client(endpoint_url: str | None, region: str | None, deadline_s: float) -> Any:
    config = Config(
        retries={"mode": "adaptive", "max_attempts": 3},
        connect_timeout=2,
        read_timeout=max(1.0, deadline_s / 2),
        tcp_keepalive=True,
    )
    return boto3.client(
        "sagemaker-runtime", endpoint_url=endpoint_url, region_name=region, config=config
    )


def invoke(client: Any, endpoint: str, component: str, payload: dict[str, Any]) -> dict[str, Any]:
    try:
        resp = client.invoke_endpoint(
            EndpointName=endpoint,
            InferenceComponentName=component,
            ContentType="application/json",
            Accept="application/json",
            Body=json.dumps(payload).encode(),
        )
    except ClientError as exc:
        err = exc.response.get("Error", {})
        code = err.get("Code", "Unknown")
        status, message = _ERRORS.get(code, (502, "SageMaker returned an error"))
        detail = err.get("Message") or ""
        if code == "ModelError":
            original = exc.response.get("OriginalMessage") or detail
            message = f"{message}: {original}"
        elif detail:
            message = f"{message}: {detail}"
        raise InvokeError(status, message, code) from exc
    except (ReadTimeoutError, ConnectTimeoutError) as exc:
        raise InvokeError(504, "the model did not answer within the deadline", "Timeout") from exc
    except BotoCoreError as exc:  # no credentials, endpoint unreachable, ...
        raise InvokeError(502, f"cannot reach SageMaker: {exc}", type(exc).__name__) from exc
    body = resp["Body"].read()
    try:
        return json.loads(body)
    except (ValueError, TypeError) as exc:
        raise InvokeError(502, "the model returned a non-JSON answer", "BadModelOutput") from exc
