"""InvokeEndpoint with InferenceComponentName, retries that never repeat a generation, and
errors mapped for clients.

An error's client text is fixed per status and code: SageMaker's and the container's own
messages carry the router role's ARN, the account, component names, the endpoint URL, a log
stream link and tracebacks, which a tenant (of any account) must not see. They travel in
``InvokeError.detail``, which the router logs under the request id and never answers with.

A generation must run once. botocore retries a read timeout (and 5xx), which for a slow
generation means the GPU runs it two or three times while the client waits for API Gateway's own
timeout. So botocore does not retry here (``max_attempts: 1``); the read timeout is the whole
deadline; and this module retries only what proves the request never reached the container: a
connection that could not be made, or SageMaker's throttling (its 429 comes before any
container sees the request). The whole call ends within the router's deadline, which is shorter
than the Lambda's timeout, so a client gets a clear 504 instead of a Lambda or gateway timeout.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import boto3
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    ReadTimeoutError,
)

from contracts import errors

T = TypeVar("T")

#: Error codes the client sends again itself: they prove the container never saw the request.
RETRYABLE_CODES = errors.RETRYABLE
MAX_ATTEMPTS = 3
CONNECT_TIMEOUT_S = 2.0

#: Client text per SageMaker error code (the detail is logged, never answered), from the
#: router's error catalogue (``contracts.errors``).
_ERRORS: dict[str, tuple[int, str]] = {
    code: (errors.spec(code).status, errors.spec(code).message) for code in errors.SAGEMAKER_CODES
}


#: Client text for the container's own statuses that describe the request or a moment of load
#: (a ModelError's ``OriginalStatusCode``), which pass through with their status: a client must
#: not retry a request the container will always refuse (the official ``openai`` client retries
#: every 5xx, and each try is charged to the quota), and should back off when it is busy. Any
#: other status (a 404 or 424 for an adapter the container could not load is a deployment
#: fault, not the caller's) is a 502, which the router's 5xx alarm sees.
_CONTAINER_STATUSES: dict[int, str] = {
    status: text for status, (text, _) in errors.CONTAINER_STATUSES.items()
}


#: The router's own codes for failures that are not SageMaker's named errors: a client sees
#: these, never botocore's class names (which would tell a tenant about the router's
#: credentials or network). The class name goes to the log, in ``detail``.
UNREACHABLE = "SageMakerUnreachable"  # no connection was made: nothing was sent
CONNECTION_LOST = "ConnectionLost"  # the connection dropped after the request was sent
SAGEMAKER_ERROR = "SageMakerError"  # an error code this router does not map
TIMEOUT = "Timeout"

#: Failures that prove no generation started, so a client may send the request again: no
#: connection, SageMaker's throttling, a component not ready, SageMaker unavailable.
NOT_STARTED = errors.NOT_STARTED


@dataclass
class InvokeError(Exception):
    status: int
    #: Safe to show any caller: fixed per status and code.
    message: str
    code: str
    #: What SageMaker or the container said: for the router's log only.
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"

    @property
    def may_have_generated(self) -> bool:
        """Whether the container may have run (or may still run) the generation: a server
        error that is not one of ``NOT_STARTED`` nor a 503 (SageMaker's or the container's
        "busy", answered before any generation). A client must not send such a request again
        on its own (each try is a generation and a quota charge)."""
        return self.status >= 500 and self.status != 503 and self.code not in NOT_STARTED


def container_error(status: int, detail: str = "") -> InvokeError:
    """A container's own error (a ModelError, or an error line in its stream), as the client
    sees it: the statuses above keep theirs, the container's deadline (504) is the router's
    timeout (a deadline is neither a container fault nor a canary's), anything else is a
    502."""
    if status in _CONTAINER_STATUSES:
        return InvokeError(status, _CONTAINER_STATUSES[status], "ModelError", detail)
    if status == 504:
        return InvokeError(504, _DEADLINE, TIMEOUT, f"the container's deadline: {detail}")
    return InvokeError(502, _ERRORS["ModelError"][1], "ModelError", f"status {status}: {detail}")


_DEADLINE = errors.spec(TIMEOUT).message


def make_client(endpoint_url: str | None, region: str | None, deadline_s: float) -> Any:
    config = Config(
        # One attempt in all (botocore counts retries in max_attempts, every try in
        # total_max_attempts).
        retries={"mode": "standard", "total_max_attempts": 1},
        connect_timeout=CONNECT_TIMEOUT_S,
        read_timeout=max(1.0, deadline_s),
        tcp_keepalive=True,
    )
    return boto3.client(
        "sagemaker-runtime", endpoint_url=endpoint_url, region_name=region, config=config
    )


def invoke(
    client: Any,
    endpoint: str,
    component: str,
    payload: dict[str, Any],
    deadline_s: float = 60.0,
    attributes: str | None = None,
) -> dict[str, Any]:
    """One generation; retried only when it provably did not start, within the deadline.
    ``attributes`` is InvokeEndpoint's ``CustomAttributes`` (``contracts.fairness``)."""
    body = json.dumps(payload).encode()
    extra = {"CustomAttributes": attributes} if attributes else {}
    return _retrying(lambda: _invoke_once(client, endpoint, component, body, extra), deadline_s)


def _retrying(call: Callable[[], T], deadline_s: float) -> T:
    """``call()``, tried again (with backoff) only while it raises ``_NotStarted``, at most
    MAX_ATTEMPTS times and never past the deadline; then the client's own error."""
    deadline = time.monotonic() + deadline_s
    for attempt in range(1, MAX_ATTEMPTS + 1):
        try:
            return call()
        except _NotStarted as exc:
            backoff = 0.1 * 2**attempt
            if attempt == MAX_ATTEMPTS or time.monotonic() + backoff + 1.0 > deadline:
                raise exc.error from None
            time.sleep(backoff)
    raise AssertionError("unreachable")


class _NotStarted(Exception):  # noqa: N818 - a signal to retry, carrying the client's error
    def __init__(self, error: InvokeError) -> None:
        self.error = error


def _invoke_once(
    client: Any, endpoint: str, component: str, body: bytes, extra: dict[str, str]
) -> dict[str, Any]:
    with _errors():
        resp = client.invoke_endpoint(
            EndpointName=endpoint,
            InferenceComponentName=component,
            ContentType="application/json",
            Accept="application/json",
            Body=body,
            **extra,
        )
    raw = resp["Body"].read()
    try:
        return json.loads(raw)
    except (ValueError, TypeError) as exc:
        raise InvokeError(502, "the model returned a non-JSON answer", "BadModelOutput") from exc


def open_stream(
    client: Any,
    endpoint: str,
    component: str,
    payload: dict[str, Any],
    deadline_s: float = 60.0,
    attributes: str | None = None,
) -> Any:
    """``InvokeEndpointWithResponseStream``: the response's event stream, retried (like
    ``invoke``) only while it provably did not start. Read it with ``stream_lines``."""
    body = json.dumps({**payload, "stream": True}).encode()
    extra = {"CustomAttributes": attributes} if attributes else {}

    def start() -> Any:
        with _errors():
            resp = client.invoke_endpoint_with_response_stream(
                EndpointName=endpoint,
                InferenceComponentName=component,
                ContentType="application/json",
                Accept="application/jsonlines",
                Body=body,
                **extra,
            )
        return resp["Body"]

    return _retrying(start, deadline_s)


def stream_lines(events: Any) -> Iterator[dict[str, Any]]:
    """The container's JSON lines from an event stream. ``PayloadPart`` chunks carry bytes
    with no regard for line ends, so lines are joined across chunks; a ``ModelStreamError`` or
    ``InternalStreamFailure`` event ends the stream with an ``InvokeError``."""
    pending = b""
    with _errors():
        for event in events:
            if "PayloadPart" in event:
                pending += event["PayloadPart"].get("Bytes", b"")
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield _line(line)
                continue
            for code in ("ModelStreamError", "InternalStreamFailure"):
                if code in event:
                    detail = event[code].get("Message") or code
                    raise InvokeError(502, "the model stream failed", code, str(detail))
    if pending.strip():
        yield _line(pending)


def _line(raw: bytes) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except (ValueError, TypeError) as exc:
        raise InvokeError(502, "the model streamed a non-JSON line", "BadModelOutput") from exc
    if not isinstance(value, dict):
        raise InvokeError(502, "the model streamed a line that is not an object", "BadModelOutput")
    return value


@contextmanager
def _errors() -> Iterator[None]:
    """botocore's errors as the router's: ``_NotStarted`` when the request provably never
    reached the container (retry), ``InvokeError`` otherwise."""
    try:
        yield
    except ClientError as exc:
        err = exc.response.get("Error", {})
        code = err.get("Code", "Unknown")
        status, message = _ERRORS.get(code, (502, "SageMaker returned an error"))
        detail = str(exc.response.get("OriginalMessage") or err.get("Message") or "")
        if code not in _ERRORS:
            detail, code = f"{code}: {detail}", SAGEMAKER_ERROR
        if code == "ModelError":
            # botocore's sagemaker-runtime model: ModelError carries the container's own
            # status as ``OriginalStatusCode`` (parsed onto the response's top level).
            original = exc.response.get("OriginalStatusCode")
            error = container_error(int(original) if isinstance(original, int) else 502, detail)
        else:
            error = InvokeError(status, message, code, detail)
        if code in RETRYABLE_CODES:
            raise _NotStarted(error) from exc
        raise error from exc
    except (ConnectTimeoutError, EndpointConnectionError) as exc:
        # No connection, so no request: safe to try again.
        raise _NotStarted(
            InvokeError(502, "cannot reach SageMaker", UNREACHABLE, f"{type(exc).__name__}: {exc}")
        ) from exc
    except ReadTimeoutError as exc:
        # The request may be generating: never sent again.
        raise InvokeError(504, _DEADLINE, TIMEOUT) from exc
    except NoCredentialsError as exc:  # nothing was signed, so nothing was sent
        raise InvokeError(
            502, "cannot reach SageMaker", UNREACHABLE, f"{type(exc).__name__}: {exc}"
        ) from exc
    except BotoCoreError as exc:  # a connection or stream cut off after the request went
        raise InvokeError(
            502, "cannot reach SageMaker", CONNECTION_LOST, f"{type(exc).__name__}: {exc}"
        ) from exc
