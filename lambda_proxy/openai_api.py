"""An OpenAI-compatible API beside the native one: what most clients already speak.

``POST /v1/chat/completions`` and ``POST /v1/completions`` take the adapter as ``model``;
``GET /v1/models`` lists the adapters this caller may use. Authorization, quotas and caching are
the service's (``service.serve``): these routes only translate the request and the answer,
and render errors as OpenAI's error object (``{"error": {"message", "type", "param",
"code"}}``). Parameters OpenAI defines that this platform cannot honour (``n`` above 1,
``logprobs``, tools) are refused with a 400 naming them, never silently ignored. Streams
(``stream: true``, chunks ending ``data: [DONE]``) are served by ``lambda_proxy.streaming``
through the function's web app, with the checks below.
"""

from __future__ import annotations

import functools
import json
import time
import uuid
from collections.abc import Callable
from typing import Any, Literal

from aws_lambda_powertools.event_handler import Response, content_types
from aws_lambda_powertools.event_handler.api_gateway import Router
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from contracts import errors
from contracts.api import door_routes
from contracts.requests import Text
from contracts.routing import Route
from lambda_proxy import service
from lambda_proxy.auth import Caller
from lambda_proxy.schema import GenerateRequest
from lambda_proxy.service import Call, RouterError

router = Router()


class JsonSchemaFormat(BaseModel):
    """OpenAI's ``response_format.json_schema``: the schema under ``schema``."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    name: str = Field(min_length=1, max_length=64)
    description: str | None = None
    schema_: dict[str, Any] = Field(alias="schema")
    strict: bool | None = None


class ResponseFormat(BaseModel):
    """``{"type": "text"}``, ``{"type": "json_object"}`` (any JSON object) or
    ``{"type": "json_schema", "json_schema": {...}}``; decoded with vLLM's structured outputs."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None

    def schema_for_decoding(self) -> dict[str, Any] | None:
        if self.type == "json_schema":
            if self.json_schema is None:
                raise ValueError("response_format.json_schema is required for type json_schema")
            return self.json_schema.schema_
        return {"type": "object"} if self.type == "json_object" else None


class _OpenAIRequest(BaseModel):
    # Clients send many optional fields; the ones below are understood, the rest refused.
    model_config = ConfigDict(extra="forbid")
    model: str = Field(min_length=1, max_length=128)
    max_tokens: int | None = Field(default=None, ge=1, strict=True)
    max_completion_tokens: int | None = Field(default=None, ge=1, strict=True)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    stop: str | list[str] | None = None
    seed: int | None = Field(default=None, ge=0, lt=2**31)
    stream: bool = Field(default=False, strict=True)
    stream_options: dict[str, bool] | None = None
    n: int = Field(default=1, ge=1, le=1)
    #: OpenAI's end-user id; the router's canary session key (``service.session_key``).
    user: Text | None = Field(default=None, max_length=256)
    frequency_penalty: float | None = Field(default=None, ge=0.0, le=0.0)
    presence_penalty: float | None = Field(default=None, ge=0.0, le=0.0)
    response_format: ResponseFormat | None = None


class ChatRequest(_OpenAIRequest):
    messages: list[dict[str, Any]] = Field(min_length=1, max_length=64)


class CompletionRequest(_OpenAIRequest):
    prompt: str = Field(min_length=1)


def error_type(status: int) -> str:
    return errors.openai_type(status)


def error_body(exc: RouterError) -> dict[str, Any]:
    """A refusal as OpenAI's error object (a stream's refusal uses it too). A 400 with field
    details names them in the message, as OpenAI's own validation errors do."""
    message = exc.message
    if exc.details and exc.status == 400:
        message = f"{exc.message}: " + "; ".join(
            f"{d['field']}: {d['message']}" for d in exc.details
        )
    return {
        "error": {
            "message": message,
            "type": error_type(exc.status),
            "param": exc.param,
            "code": exc.code,
        }
    }


def door(route: Callable[[], Response]) -> Callable[[], Response]:
    """Every OpenAI route's refusal, rendered here as OpenAI's error object."""

    @functools.wraps(route)
    def answered() -> Response:
        try:
            return route()
        except RouterError as exc:
            return Response(
                status_code=exc.status,
                content_type=content_types.APPLICATION_JSON,
                body=json.dumps(error_body(exc)),
                headers=dict(exc.headers),
            )

    return answered


def _call() -> Call:
    return Call.of(router.current_event.raw_event, router.lambda_context)


def parse(call: Call, kind: type[_OpenAIRequest]) -> _OpenAIRequest:
    """The OpenAI request in the body, with the fields this platform cannot honour refused.
    The caller is checked first: a request without identity is a 403 whatever its body."""
    service.caller_of(call)
    data = service.read_json(call)
    try:
        req = kind.model_validate(data)
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        param = ".".join(map(str, first["loc"])) or None
        raise RouterError(
            400, f"{param}: {first['msg']}", code="InvalidRequest", param=param
        ) from None
    unknown = sorted(set(req.stream_options or {}) - {"include_usage"})
    if unknown:
        raise RouterError(
            400,
            f"stream_options: unknown options {unknown}",
            code="InvalidRequest",
            param="stream_options",
        )
    both = req.max_tokens is not None and req.max_completion_tokens is not None
    if both and req.max_tokens != req.max_completion_tokens:
        raise RouterError(
            400,
            "max_tokens and max_completion_tokens disagree; send one of them",
            code="InvalidRequest",
            param="max_completion_tokens",
        )
    return req


def prompt_of(req: _OpenAIRequest) -> dict[str, Any]:
    """The native prompt: ``messages`` for a chat, ``inputs`` for a completion."""
    if isinstance(req, CompletionRequest):
        return {"inputs": req.prompt}
    messages = []
    for i, m in enumerate(req.messages):  # type: ignore[attr-defined]
        if extra := sorted(set(m) - {"role", "content"}):
            raise RouterError(
                400,
                f"messages.{i}: fields this platform does not honour: "
                f"{', '.join(map(str, extra))[:200]}",
                code="InvalidRequest",
                param=f"messages.{i}",
            )
        role, content = m.get("role"), m.get("content")
        if role not in ("system", "user", "assistant") or not isinstance(content, str):
            raise RouterError(
                400,
                f"messages.{i}: role must be system, user or assistant and content a string",
                code="InvalidRequest",
                param=f"messages.{i}",
            )
        messages.append({"role": role, "content": content})
    return {"messages": messages}


def _native(req: _OpenAIRequest, prompt: dict[str, Any]) -> dict[str, Any]:
    """The native request for an OpenAI one. OpenAI's default temperature is 1 (sampled)."""
    temperature = 1.0 if req.temperature is None else req.temperature
    params: dict[str, Any] = {"temperature": temperature, "do_sample": temperature > 0}
    if (tokens := req.max_completion_tokens or req.max_tokens) is not None:
        params["max_new_tokens"] = tokens
    if req.top_p is not None:
        params["top_p"] = req.top_p
    if req.stop is not None:
        params["stop"] = [req.stop] if isinstance(req.stop, str) else req.stop
    if req.seed is not None:
        params["seed"] = req.seed
    if req.response_format is not None:
        try:
            schema = req.response_format.schema_for_decoding()
        except ValueError as exc:
            raise RouterError(
                400, str(exc), code="InvalidRequest", param="response_format"
            ) from None
        if schema is not None:
            params["json_schema"] = schema
    return {**prompt, "parameters": params}


def authorize(
    call: Call, req: _OpenAIRequest, prompt: dict[str, Any]
) -> tuple[Caller, Route, GenerateRequest]:
    """The caller and route for ``model``, and the native request: the native checks."""
    try:
        caller, route = service.authorize(call, req.model)
    except RouterError as exc:
        if exc.status != 404:
            raise
        # The native 404, in OpenAI's words for an unknown model.
        raise RouterError(
            404,
            f"The model {req.model[:64]!r} does not exist or you do not have access to it.",
            param="model",
            code="model_not_found",
        ) from None
    return caller, route, service.validate(_native(req, prompt))


def _run(call: Call, req: _OpenAIRequest, prompt: dict[str, Any]) -> dict[str, Any]:
    t0 = time.perf_counter()
    if req.stream:
        # The function's web app (lambda_proxy.web) streams before this handler sees a request.
        raise RouterError(
            400,
            "stream: true needs the streaming router (lambda_proxy.web)",
            code="StreamingUnavailable",
            param="stream",
        )
    caller, route, native = authorize(call, req, prompt)
    return service.serve(
        call, req.model, caller, route, native, t0, session=req.user, kind="openai"
    )


def finish(reason: str | None) -> str:
    return "length" if reason == "length" else "stop"


def usage(out: dict[str, Any]) -> dict[str, int]:
    """OpenAI's usage object; a cached answer written before answers were checked may carry a
    ``usage`` of another shape, which counts as zero rather than failing the request."""
    u = service.clean_usage(out.get("usage"))
    prompt, completion = u["input_tokens"], u["output_tokens"]
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def _completion(
    prefix: str, kind: str, model: str, out: dict[str, Any], choice: dict[str, Any]
) -> Response:
    """The OpenAI answer object around one choice, from the native answer."""
    return _ok(
        {
            "id": f"{prefix}-{out.get('request_id') or uuid.uuid4().hex}",
            "object": kind,
            "created": int(time.time()),
            "model": model,
            "choices": [choice],
            "usage": usage(out),
            "system_fingerprint": f"{model}@{out.get('version')}",
        }
    )


def _ok(body: dict[str, Any]) -> Response:
    return Response(
        status_code=200, content_type=content_types.APPLICATION_JSON, body=json.dumps(body)
    )


@door
def chat_completions() -> Response:
    call = _call()
    req = parse(call, ChatRequest)
    out = _run(call, req, prompt_of(req))
    choice = {
        "index": 0,
        "message": {"role": "assistant", "content": out["output"]},
        "finish_reason": finish(out.get("finish_reason")),
        "logprobs": None,
    }
    return _completion("chatcmpl", "chat.completion", req.model, out, choice)


@door
def completions() -> Response:
    call = _call()
    req = parse(call, CompletionRequest)
    out = _run(call, req, prompt_of(req))
    choice = {
        "index": 0,
        "text": out["output"],
        "logprobs": None,
        "finish_reason": finish(out.get("finish_reason")),
    }
    return _completion("cmpl", "text_completion", req.model, out, choice)


@door
def models() -> Response:
    adapters = service.visible_adapters(_call())
    # ``state`` beside OpenAI's fields (its clients ignore a field they do not know): serving,
    # or why not yet.
    data = [
        {
            "id": a["name"],
            "object": "model",
            "created": 0,
            "owned_by": "lora-fleet",
            "state": a["state"],
        }
        for a in adapters
    ]
    return _ok({"object": "list", "data": data})


for _route in door_routes("openai"):
    router.route(_route.powertools_path, method=_route.method)(globals()[_route.name])
