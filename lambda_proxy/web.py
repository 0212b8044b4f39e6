"""The router as a web app: what the Lambda runs, so that answers can stream.

Python's managed Lambda runtimes do not stream a response by themselves (AWS documents
response streaming for Node.js, and for other languages a custom runtime or the Lambda Web
Adapter: docs.aws.amazon.com/lambda/latest/dg/configuration-response-streaming.html). So the
function runs AWS's Lambda Web Adapter (awslabs/aws-lambda-web-adapter) as its extension, in
``response_stream`` invoke mode, in front of this ASGI app (``run.sh``: uvicorn). The adapter
turns each API Gateway event into an HTTP request and writes the app's response back in the
format API Gateway's streaming Lambda proxy integration takes (a metadata JSON, eight null
bytes, the body), as it is produced.

The adapter puts the event's ``requestContext`` (the caller's IAM identity among it) in the
``x-amzn-request-context`` header, replacing any header of that name the client sent
(``req_headers.insert`` in its ``src/lib.rs``), and the Lambda context in
``x-amzn-lambda-context``. From them this app rebuilds the proxy event, and:

- a request with ``stream: true`` on a generating route is streamed as server-sent events
  (``lambda_proxy.streaming``);
- every other request goes to the Powertools handler (``lambda_proxy.handler.handler``)
  unchanged, with its logging, metrics and tracing.

The local gateway runs this same app, in process, behind its API Gateway stand-in.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import iterate_in_threadpool, run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

# Imported, and their clients built (``warm``), when the function starts, so that a
# provisioned environment has paid for them before its first request.
from contracts.api import route_of
from lambda_proxy import handler, service, streaming
from lambda_proxy.sagemaker import InvokeError
from lambda_proxy.service import Call, RouterError
from lambda_proxy.telemetry import logger, metrics

REQUEST_CONTEXT = "x-amzn-request-context"
LAMBDA_CONTEXT = "x-amzn-lambda-context"
#: Powertools' resolver keeps the current event, and its metrics their buffer, per process: one
#: request at a time uses the handler (as one Lambda execution environment does anyway), and a
#: stream's checks, which count into the same buffer.
HANDLER_LOCK = threading.Lock()


@dataclass
class LambdaContext:
    """The attributes of Lambda's context object that Powertools reads, from the adapter's
    ``x-amzn-lambda-context`` header (the Rust runtime's context, serialized)."""

    aws_request_id: str
    invoked_function_arn: str = ""
    function_name: str = "lora-router"
    function_version: str = "$LATEST"
    memory_limit_in_mb: int = 512
    deadline_ms: int = 0
    #: This invocation's X-Ray trace header (the Lambda's segment, not API Gateway's).
    xray_trace_id: str | None = None

    @classmethod
    def from_header(cls, raw: str | None) -> LambdaContext:
        try:
            data = json.loads(raw) if raw else {}
        except ValueError:
            data = {}
        data = data if isinstance(data, dict) else {}
        env = data.get("env_config") if isinstance(data.get("env_config"), dict) else {}
        return cls(
            aws_request_id=str(data.get("request_id") or f"local-{time.time_ns()}"),
            invoked_function_arn=str(data.get("invoked_function_arn") or ""),
            function_name=str(
                env.get("function_name")
                or os.environ.get("AWS_LAMBDA_FUNCTION_NAME", "lora-router")
            ),
            function_version=str(env.get("version") or "$LATEST"),
            memory_limit_in_mb=int(env.get("memory") or 512),
            deadline_ms=int(data.get("deadline") or 0),
            xray_trace_id=str(data["xray_trace_id"]) if data.get("xray_trace_id") else None,
        )

    def get_remaining_time_in_millis(self) -> int:
        if not self.deadline_ms:
            return 30_000
        return max(0, self.deadline_ms - int(time.time() * 1000))


def proxy_event(request: Request, context: dict[str, Any], body: str | None) -> dict[str, Any]:
    """The API Gateway REST proxy event this request came from (the adapter's reverse)."""
    headers = {
        k.title(): v
        for k, v in request.headers.items()
        if k not in (REQUEST_CONTEXT, LAMBDA_CONTEXT)
    }
    query = dict(request.query_params)
    return {
        "resource": context.get("resourcePath") or request.url.path,
        "path": request.url.path,
        "httpMethod": request.method,
        "headers": headers,
        "multiValueHeaders": {k: [v] for k, v in headers.items()},
        "queryStringParameters": query or None,
        "multiValueQueryStringParameters": {k: [v] for k, v in query.items()} or None,
        "pathParameters": None,
        "stageVariables": None,
        "requestContext": context,
        "body": body,
        "isBase64Encoded": False,
    }


def stream_kind(method: str, path: str, body: str | None) -> str | None:
    """``native``, ``chat`` or ``completion`` when this request asks for a stream (the route
    table's ``stream``)."""
    found = route_of(method, path)
    if found is None or found[0].stream is None or not body:
        return None
    kind = found[0].stream
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return None  # the handler answers a malformed body
    return kind if isinstance(data, dict) and data.get("stream") is True else None


async def ready(_request: Request) -> Response:
    """The adapter's readiness check (``AWS_LWA_READINESS_CHECK_PATH``); API Gateway routes only
    the API's own resources, so clients never reach it."""
    return JSONResponse({"status": "ready"})


async def dispatch(request: Request) -> Response:
    raw = request.headers.getlist(REQUEST_CONTEXT)
    if len(raw) != 1:
        return JSONResponse(
            {"error": "no API Gateway request context", "status": 403}, status_code=403
        )
    try:
        context = json.loads(raw[0])
    except ValueError:
        context = None
    if not isinstance(context, dict):
        return JSONResponse({"error": "malformed request context", "status": 400}, status_code=400)
    lambda_context = LambdaContext.from_header(request.headers.get(LAMBDA_CONTEXT))
    # What the Lambda runtime sets for each invocation, and X-Ray (Powertools' tracer) reads:
    # this invocation's own trace header, never the previous one's.
    if lambda_context.xray_trace_id:
        os.environ["_X_AMZN_TRACE_ID"] = lambda_context.xray_trace_id
    else:
        os.environ.pop("_X_AMZN_TRACE_ID", None)
    try:
        body = (await request.body()).decode() or None
    except UnicodeDecodeError:
        return JSONResponse({"error": "body is not UTF-8", "status": 400}, status_code=400)
    event = proxy_event(request, context, body)
    # Identity and size first: a body is parsed for its stream flag only when it comes from a
    # caller and fits the limit; anything else is the handler's to refuse, in its order.
    kind = None
    if _identified_within_limit(event, lambda_context, body):
        kind = stream_kind(request.method, request.url.path, body)
    if kind is not None:
        return await _stream(kind, event, lambda_context)
    result = await run_in_threadpool(_buffered, event, lambda_context)
    response = Response(result.get("body") or "", status_code=result["statusCode"])
    # Powertools' REST resolver answers with multiValueHeaders; a plain error with headers.
    for name, values in (result.get("multiValueHeaders") or {}).items():
        for value in values:
            response.headers.append(name, str(value))
    for name, value in (result.get("headers") or {}).items():
        response.headers[name] = str(value)
    return response


def _identified_within_limit(
    event: dict[str, Any], context: LambdaContext, body: str | None
) -> bool:
    """Whether the request has a caller and a body within the limit (bytes, as the handler
    counts them), checked before any JSON is parsed."""
    try:
        limit = service.deps().settings.max_body_bytes
        if body is not None and len(body.encode("utf-8", "surrogatepass")) > limit:
            return False
        return Call.of(event, context).caller is not None
    except Exception:  # a router that cannot start: the handler answers it, in its words
        return False


def in_process(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """A buffered request through the handler in this process: one at a time, as one Lambda
    execution environment serves them."""
    with HANDLER_LOCK:
        return handler.handler(event, context)


#: Where buffered requests run. On Lambda, this process is one execution environment and
#: Lambda runs more of them for concurrent requests; the local gateway, one process for every
#: request, sets a pool of environments of its own here (``local.environments``).
BUFFERED: Callable[[dict[str, Any], LambdaContext], dict[str, Any]] = in_process


def _buffered(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return BUFFERED(event, context)


async def _stream(kind: str, event: dict[str, Any], context: LambdaContext) -> Response:
    plan = await run_in_threadpool(_plan, kind, event, context)
    if not isinstance(plan, streaming.StreamPlan):
        status, headers, content = plan
        return Response(content, status_code=status, headers=headers)
    stream = streaming.Stream(plan)
    try:
        await run_in_threadpool(stream.open)
    except InvokeError as exc:
        status, headers, content = stream.refusal(exc)
        return Response(content, status_code=status, headers=headers)

    async def body():
        try:
            async for chunk in iterate_in_threadpool(stream.events()):
                yield chunk
        finally:
            stream.cancel()  # the client went away, or the stream ended: stop reading
            stream.finish()  # and its usage is written, whichever it was

    return StreamingResponse(
        body(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


def _plan(kind: str, event: dict[str, Any], context: LambdaContext) -> Any:
    """The stream's checks, or its refusal as ``(status, headers, body)``. The service reads
    the request from its ``Call``, not from the resolver; the lock is for the metrics the
    checks count, which go to the buffered handler's buffer and are flushed here, so that a
    stream leaves none to the next request."""
    t0 = time.perf_counter()
    with HANDLER_LOCK:
        call = Call.of(event, context)
        try:
            found = route_of(event["httpMethod"], event["path"])
            adapter = found[1].get("adapter") if found is not None else None
            return streaming.plan(kind, call, adapter, t0)
        except RouterError as exc:
            return streaming.refusal(kind, exc, call.request_id)
        finally:
            metrics.flush_metrics(raise_on_empty_metrics=False)


def warm() -> None:
    """Build the router's clients (and read the cache's secret) before the first request; a
    failure here is left for that request to report."""
    try:
        service.deps()
    except Exception as exc:  # a missing table or secret answers 500 on the first request
        logger.warning("router dependencies not ready at start", extra={"reason": str(exc)})


@contextlib.asynccontextmanager
async def lifespan(_app: Starlette):
    if os.environ.get("AWS_LAMBDA_FUNCTION_NAME"):  # on Lambda; the local gateway configures
        await run_in_threadpool(warm)
    yield


app = Starlette(
    routes=[
        Route("/_lwa/ready", ready, methods=["GET"]),
        Route("/{path:path}", dispatch, methods=["GET", "POST", "PUT", "DELETE", "PATCH"]),
    ],
    lifespan=lifespan,
)
