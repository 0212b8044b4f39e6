"""The router's native door: API Gateway REST (AWS_IAM) events, through Powertools' resolver.

Routes: the native door's of ``contracts.api.ROUTES`` (generate, the adapters, health); the
OpenAI door's (``openai_api``) are included. An adapter name maps to an inference-component
name only through the routing table generated at synth; nothing in the body can name one. The
service (``lambda_proxy.service``) decides; this module turns an event into a ``Call`` and a
``RouterError`` into the native error body, in ``refused`` and nowhere else.
"""

from __future__ import annotations

import json
import time
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response, content_types
from aws_lambda_powertools.metrics import MetricUnit

from contracts.api import door_routes
from lambda_proxy import service
from lambda_proxy.openai_api import router as openai_router
from lambda_proxy.service import Call, RouterError
from lambda_proxy.telemetry import logger, metrics, tracer

app = APIGatewayRestResolver()
app.include_router(openai_router)  # /v1/chat/completions, /v1/completions, /v1/models


def error_body(exc: RouterError, request_id: str | None) -> dict[str, Any]:
    """A refusal in the native API's shape (a stream's refusal uses it too)."""
    body: dict[str, Any] = {"error": exc.message, "status": exc.status, "request_id": request_id}
    if exc.code:
        body["code"] = exc.code
    if exc.details:
        body["details"] = exc.details
    return body


@app.exception_handler(RouterError)
def refused(exc: RouterError) -> Response:
    """Every native route's refusal, rendered here."""
    call = _call()
    return Response(
        status_code=exc.status,
        content_type=content_types.APPLICATION_JSON,
        body=json.dumps(error_body(exc, call.request_id)),
        headers=dict(exc.headers),
    )


def _call() -> Call:
    return Call.of(app.current_event.raw_event, app.lambda_context)


def _json(body: dict[str, Any]) -> Response:
    return Response(
        status_code=200, content_type=content_types.APPLICATION_JSON, body=json.dumps(body)
    )


def health() -> Response:
    return _json(service.health(_call()))


def list_adapters() -> Response:
    return _json({"adapters": service.visible_adapters(_call())})


def generate(adapter: str) -> Response:
    t0 = time.perf_counter()
    call = _call()
    caller, route, req = service.check_native(call, adapter)
    if req.stream:
        # Streams are answered by the function's web app (lambda_proxy.web), which sees the
        # flag before this handler; an event that reaches here cannot be streamed back.
        raise RouterError(
            400,
            "stream: true needs the streaming router (lambda_proxy.web)",
            code="StreamingUnavailable",
        )
    return _json(service.serve(call, adapter, caller, route, req, t0))


for _route in door_routes("native"):
    app.route(_route.powertools_path, method=_route.method)(globals()[_route.name])


def _shape_error(event: Any) -> str | None:
    """What is wrong with an event that is not an API Gateway REST proxy event, if anything."""
    if not isinstance(event, dict):
        return "event is not an object"
    for key in ("httpMethod", "path"):
        if not isinstance(event.get(key), str):
            return f"event.{key} missing or not a string"
    for key in (
        "headers",
        "queryStringParameters",
        "pathParameters",
        "multiValueHeaders",
        "multiValueQueryStringParameters",
    ):
        value = event.get(key)
        if value is not None and (
            not isinstance(value, dict) or not all(isinstance(k, str) for k in value)
        ):
            return f"event.{key} is not an object of strings"
    if event.get("body") is not None and not isinstance(event["body"], str):
        return "event.body is not a string"
    if not isinstance(event.get("requestContext"), dict):
        return "event.requestContext missing"
    if event.get("isBase64Encoded") not in (None, False):
        return "base64-encoded bodies are not accepted"
    return None


def _plain_error(status: int, message: str) -> dict[str, Any]:
    return {
        "statusCode": status,
        "headers": {"Content-Type": "application/json"},
        "body": json.dumps({"error": message, "status": status}),
        "isBase64Encoded": False,
    }


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
@metrics.log_metrics
def handler(event: Any, context: Any) -> dict[str, Any]:
    problem = _shape_error(event)
    if problem is not None:
        metrics.add_metric(name="MalformedEvent", unit=MetricUnit.Count, value=1)
        return _plain_error(400, problem)
    try:
        return app.resolve(event, context)
    except Exception:  # the last line of defence: a bug answers 500, never a crash
        logger.exception("unhandled error")
        return _plain_error(500, "internal error")
