"""The router: API Gateway REST (AWS_IAM) -> authorization -> cache -> SageMaker.

Routes: POST /v1/adapters/{adapter}/generate, GET /v1/adapters, GET /health. An adapter name
maps to an inference-component name only through the routing table generated at synth; nothing
in the body can name a component. Unknown adapters (404) and forbidden callers (403) never
reach SageMaker.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response, content_types
from aws_lambda_powertools.metrics import MetricUnit
from pydantic import ValidationError

from lambda_proxy.auth import Caller, allowed, caller_from_event
from lambda_proxy.cache import CacheUnavailableError, ResponseCache, cache_key
from lambda_proxy.canary import Canaries, Canary
from lambda_proxy.openai_api import router as openai_router
from lambda_proxy.quota import Limits, Quotas, prompt_tokens_estimate
from lambda_proxy.sagemaker import InvokeError, container_error, invoke, make_client
from lambda_proxy.schema import GenerateRequest
from lambda_proxy.settings import RouterSettings, settings

#: The router's metrics namespace and service (infra/observability.py alarms on these names).
NAMESPACE, SERVICE = "LoraFleet", "lora-router"
logger = Logger(service=SERVICE)
tracer = Tracer(service=SERVICE)
metrics = Metrics(namespace=NAMESPACE, service=SERVICE)
app = APIGatewayRestResolver()
app.include_router(openai_router)  # /v1/chat/completions, /v1/completions, /v1/models


@dataclass
class Dependencies:
    settings: RouterSettings
    cache: ResponseCache
    client: Any
    quotas: Quotas | None = None
    #: The client streams are read with: its read timeout is the stream's deadline, since a
    #: stream may wait longer than one buffered answer for its first token.
    stream_client: Any = None
    canaries: Canaries | None = None

    def __post_init__(self) -> None:
        if self.canaries is None:
            self.canaries = Canaries(self.cache.client)
        if self.stream_client is None:
            s = self.settings
            self.stream_client = make_client(s.sagemaker_endpoint_url, s.region,
                                             s.stream_deadline_s)  # fmt: skip
        if self.quotas is None:
            s = self.settings
            wide = None
            if s.quota_requests_per_minute is not None or s.quota_tokens_per_minute is not None:
                wide = Limits(s.quota_requests_per_minute, s.quota_tokens_per_minute)
            self.quotas = Quotas(self.cache.client, wide)


_deps: Dependencies | None = None


def configure(deps: Dependencies | None) -> None:
    """Replace the dependencies (tests, the local platform)."""
    global _deps
    _deps = deps


def deps() -> Dependencies:
    global _deps
    if _deps is None:
        s = settings()
        password = None
        if s.redis_secret_arn:
            from aws_lambda_powertools.utilities.parameters import get_secret

            password = str(get_secret(s.redis_secret_arn, max_age=3600))
        _deps = Dependencies(
            settings=s,
            cache=ResponseCache.from_url(s.redis_url, s.cache_ttl_s, password),
            client=make_client(s.sagemaker_endpoint_url, s.region, s.invoke_deadline_s),
        )
    return _deps


def _error(status: int, message: str, **extra: Any) -> Response:
    body = {"error": message, "status": status, "request_id": _request_id(), **extra}
    return Response(
        status_code=status, content_type=content_types.APPLICATION_JSON, body=json.dumps(body)
    )


def _request_id() -> str | None:
    event = getattr(app, "current_event", None)
    ctx = event.raw_event.get("requestContext") if event is not None else None
    rid = ctx.get("requestId") if isinstance(ctx, dict) else None
    return rid if isinstance(rid, str) else None


@app.get("/health")
def health() -> Response | dict[str, Any]:
    """Liveness for any authenticated caller; the endpoint and the adapter count only for the
    environment's operators (a tenant has no business knowing either)."""
    caller = _caller()
    if caller is None:
        return _error(403, "no authenticated caller in the request context")
    if not is_operator(caller):
        return {"status": "ok"}
    table = deps().settings.routing_table
    return {
        "status": "ok",
        "adapters": len(table.get("adapters", {})),
        "endpoint": table.get("endpoint"),
    }


def is_operator(caller: Caller) -> bool:
    return bool(caller.principals & set(deps().settings.routing_table.get("operators") or ()))


def _caller() -> Caller | None:
    """The IAM caller; this function's own account stands in where the context has none."""
    ctx = getattr(app, "lambda_context", None)
    fn_arn = getattr(ctx, "invoked_function_arn", "") or ""
    parts = fn_arn.split(":")
    own = parts[4] if len(parts) > 4 and parts[4].isdigit() else None
    return caller_from_event(app.current_event.raw_event, own_account=own,
                             trust_tenant_claim=deps().settings.trust_tenant_claim)  # fmt: skip


@app.get("/v1/adapters")
def list_adapters() -> Response | dict[str, Any]:
    caller = _caller()
    if caller is None:
        return _error(403, "no authenticated caller in the request context")
    return {"adapters": visible_adapters(caller)}


def visible_adapters(caller: Caller) -> list[dict[str, Any]]:
    """The adapters this caller may use (operators: every adapter)."""
    routes = deps().settings.routing_table.get("adapters", {})
    operator = is_operator(caller)
    return [
        {"name": name, "version": r.get("version"), "task": r.get("task"),
         "description": r.get("description", "")}
        for name, r in sorted(routes.items())
        if operator or allowed(caller, r)
    ]  # fmt: skip


@dataclass
class Failure:
    """Why a request was not served, in terms both APIs render (native and OpenAI's)."""

    status: int
    message: str
    code: str | None = None
    details: list[dict[str, Any]] | None = None
    headers: dict[str, str] | None = None

    def native(self) -> Response:
        extra: dict[str, Any] = {}
        if self.code:
            extra["code"] = self.code
        if self.details:
            extra["details"] = self.details
        response = _error(self.status, self.message, **extra)
        response.headers.update(self.headers or {})
        return response


def _authorize(adapter: str) -> tuple[Caller, dict[str, Any]] | Failure:
    """Identity first, and one answer for "no such adapter" and "not yours": names cannot be
    listed by probing, with or without credentials."""
    table = deps().settings.routing_table
    caller = _caller()
    if caller is None:
        metrics.add_metric(name="Forbidden", unit=MetricUnit.Count, value=1)
        return Failure(403, "no authenticated caller in the request context")
    route = table.get("adapters", {}).get(adapter)
    if route is None or not (allowed(caller, route) or is_operator(caller)):
        name = "UnknownAdapter" if route is None else "Forbidden"
        metrics.add_metric(name=name, unit=MetricUnit.Count, value=1)
        return Failure(404, f"unknown adapter {adapter[:64]!r}", code="UnknownAdapter")
    return caller, route


def _body() -> Any | Failure:
    """The request body as JSON, within the size limit."""
    raw = app.current_event.body or ""
    limit = deps().settings.max_body_bytes
    try:
        size = len(raw.encode())
    except UnicodeEncodeError:  # an event whose body string holds a lone surrogate
        return Failure(400, "invalid request",
                       details=[{"field": "body", "message": "not valid Unicode"}])  # fmt: skip
    if size > limit:
        return Failure(413, f"body over the limit of {limit} bytes")
    try:
        return json.loads(raw) if raw else None
    except RecursionError:
        return _too_deep()
    except ValueError:
        return Failure(400, "invalid request", details=[{"field": "body", "message": "not JSON"}])


def _too_deep() -> Failure:
    return Failure(400, "invalid request",
                   details=[{"field": "body", "message": "JSON nested too deeply"}])  # fmt: skip


def _validate(data: Any) -> GenerateRequest | Failure:
    s = deps().settings
    try:
        return GenerateRequest.model_validate(
            data,
            context={"max_new_tokens_cap": s.max_new_tokens_cap,
                     "max_stop_sequences": s.max_stop_sequences},
        )  # fmt: skip
    except RecursionError:
        return _too_deep()
    except (ValueError, TypeError) as exc:  # ValidationError is a ValueError
        details = (
            [{"field": ".".join(map(str, e["loc"])) or "body", "message": e["msg"]}
             for e in exc.errors(include_url=False, include_input=False)]
            if isinstance(exc, ValidationError) else [{"field": "body", "message": str(exc)}]
        )  # fmt: skip
        return Failure(400, "invalid request", details=details)


def check_native(adapter: str) -> tuple[tuple[Caller, dict[str, Any]], GenerateRequest] | Failure:
    """The native route's checks, in their order (identity first, so an unknown adapter and
    a forbidden one look the same): the caller's authorization and the validated request."""
    auth = _authorize(adapter)
    if isinstance(auth, Failure):
        return auth
    data = _body()
    if isinstance(data, Failure):
        return data
    req = _validate(data)
    if isinstance(req, Failure):
        return req
    return auth, req


@app.post("/v1/adapters/<adapter>/generate")
def generate(adapter: str) -> Response:
    t0 = time.perf_counter()
    checked = check_native(adapter)
    if isinstance(checked, Failure):
        return checked.native()
    auth, req = checked
    if req.stream:
        # Streams are answered by the function's web app (lambda_proxy.web), which sees the
        # flag before this handler; an event that reaches here cannot be streamed back.
        return Failure(400, "stream: true needs the streaming router (lambda_proxy.web)",
                       code="StreamingUnavailable").native()  # fmt: skip
    out = serve(adapter, *auth, req, t0)
    if isinstance(out, Failure):
        return out.native()
    return Response(status_code=200, content_type=content_types.APPLICATION_JSON,
                    body=json.dumps(out))  # fmt: skip


@dataclass
class Prepared:
    """A request that passed its quota: what goes to SageMaker and its cache key."""

    adapter: str
    version: str
    component: str
    payload: dict[str, Any]
    key: str
    cacheable: bool
    #: The weights' sha256 the catalog pins (None before the adapter is published).
    weights_sha256: str | None = None
    #: The canary this request was sent to (None: the stable version serves it).
    canary: Canary | None = None
    #: For a canary's request, the stable version's: what serves it when the canary's component
    #: is not there (``CANARY_ABSENT``).
    fallback: Prepared | None = None


def _charge(
    who: str, adapter: str, req: GenerateRequest, per_adapter: Limits | None
) -> Failure | None:
    """The quota check: None when admitted, else why not. The token cost is what the request
    may generate plus an estimate of its prompt's tokens."""
    estimate = prompt_tokens_estimate(
        req.inputs if req.inputs is not None else "".join(m.content for m in req.messages or [])
    )
    cost = req.parameters.max_new_tokens + estimate
    quota = deps().quotas.check(who, adapter, cost, per_adapter)  # type: ignore[union-attr]
    if not quota.enforced:
        # Redis is away: the in-process fallback bucket decided instead.
        metrics.add_metric(name="QuotaUnavailable", unit=MetricUnit.Count, value=1)
    if quota.never:
        metrics.add_metric(name="QuotaCostOverLimit", unit=MetricUnit.Count, value=1)
        return Failure(400, f"this request may use {cost} tokens (max_new_tokens "
                            f"{req.parameters.max_new_tokens} plus about {estimate} prompt "
                            f"tokens, an estimate), more than the limit of {quota.limit} allows; "
                            "ask for fewer new tokens or send a shorter prompt",
                       code="CostOverLimit")  # fmt: skip
    if not quota.allowed:
        metrics.add_metric(name="QuotaExceeded", unit=MetricUnit.Count, value=1)
        return Failure(429, f"quota exceeded ({quota.limit}); retry in {quota.retry_after_s} s",
                       code="QuotaExceeded",
                       headers={"Retry-After": str(quota.retry_after_s)})  # fmt: skip
    return None


def _payload(req: GenerateRequest) -> dict[str, Any]:
    payload: dict[str, Any] = {"parameters": req.parameters.model_dump(exclude_none=True)}
    if req.inputs is not None:
        payload["inputs"] = req.inputs
    else:
        payload["messages"] = [m.model_dump() for m in req.messages or []]
    return payload


#: The header that keeps a caller's requests on one version of an adapter during a canary.
SESSION_HEADER = "x-session-key"
MAX_SESSION_KEY = 256


def session_key(fallback: str | None = None) -> str | None:
    """The request's session key: the ``X-Session-Key`` header, else ``fallback`` (an OpenAI
    request's ``user``); at most ``MAX_SESSION_KEY`` characters count."""
    event = getattr(app, "current_event", None)
    headers = (event.raw_event.get("headers") if event is not None else None) or {}
    value = next((v for k, v in headers.items() if k.lower() == SESSION_HEADER), None)
    value = value if isinstance(value, str) and value else fallback
    return value[:MAX_SESSION_KEY] if isinstance(value, str) and value else None


def _version(
    adapter: str, who: str, route: dict[str, Any], session: str | None
) -> tuple[dict[str, Any], Canary | None]:
    """The route of the version that serves this request: the canary's (its component, version
    and digests) for its share of session keys while it is not rolled back, else the stable
    one's."""
    canary = Canary.of(route.get("canary"))
    if canary is None or not deps().canaries.choose(adapter, canary, who, session):  # type: ignore[union-attr]
        return route, None
    pins = {"sha256": canary.sha256, "weights_sha256": canary.weights_sha256}
    return {**route, "component": canary.component, "version": canary.version, **pins}, canary


def prepare(
    adapter: str,
    caller: Caller,
    route: dict[str, Any],
    req: GenerateRequest,
    session: str | None = None,
) -> Prepared | Failure:
    """The quota check, the version that serves, the SageMaker payload and the cache key: the
    part of serving that the buffered and the streamed answers share. ``session``: the
    OpenAI ``user``, a session key when no ``X-Session-Key`` header names one."""
    table = deps().settings.routing_table
    who = caller.tenant or caller.arn
    refused = _charge(who, adapter, req, Limits.of(route.get("quota")))
    if refused is not None:
        return refused
    served, canary = _version(adapter, who, route, session_key(session))
    revision = str(table.get("base_revision", ""))
    prep = _prepared(adapter, who, served, req, revision, canary)
    if canary is not None:
        prep.fallback = _prepared(adapter, who, route, req, revision)
    return prep


def _prepared(
    adapter: str,
    who: str,
    route: dict[str, Any],
    req: GenerateRequest,
    base_revision: str,
    canary: Canary | None = None,
) -> Prepared:
    """One version's payload and cache key."""
    payload = _payload(req)
    # The catalog's default schema for this adapter (sales-json's record), unless the request
    # names its own; before the cache key, so the key holds the schema that was decoded to.
    if req.parameters.json_schema is None and isinstance(route.get("json_schema"), dict):
        payload["parameters"]["json_schema"] = route["json_schema"]
    version = str(route.get("version", ""))
    # Whose answers a cached answer may be shown to: the caller's tenant alone (the default: an
    # identical prompt from another tenant must not reveal what this one asked), everyone
    # (``shared``), or nobody (``off``).
    mode = route.get("cache", "tenant")
    scope = "*" if mode == "shared" else who
    weights = route.get("weights_sha256")
    pins = f"{route.get('sha256') or ''}/{weights or ''}"
    key = cache_key(adapter, version, base_revision, payload, scope, pins)
    return Prepared(
        adapter,
        version,
        route["component"],
        payload,
        key,
        cacheable=req.parameters.deterministic and mode != "off",
        weights_sha256=weights if isinstance(weights, str) else None,
        canary=canary,
    )


def prepare_base(caller: Caller, data: Any) -> dict[str, Any] | Failure:
    """A request for the base model itself, which no deployed route reaches: the local
    playground's side-by-side answer. It passes the adapter routes' checks (the request schema
    with the environment's caps, and the caller's tenant-wide quota) and becomes the payload."""
    req = _validate(data)
    if isinstance(req, Failure):
        return req
    if req.stream:
        return Failure(400, "the base model's answer is not streamed")
    refused = _charge(caller.tenant or caller.arn, "base", req, None)
    return refused if refused is not None else _payload(req)


def lookup(prep: Prepared) -> tuple[dict[str, Any] | None, str]:
    """A cached answer, and the cache status: hit, miss, or bypass (not cacheable, or the
    cache is down: a cache failure never fails a request)."""
    if not prep.cacheable:
        return None, "bypass"
    try:
        hit = deps().cache.get(prep.key)
    except CacheUnavailableError as exc:
        logger.warning("cache bypassed", extra={"reason": str(exc)})
        metrics.add_metric(name="CacheError", unit=MetricUnit.Count, value=1)
        return None, "bypass"
    metrics.add_metric(name="CacheHit" if hit is not None else "CacheMiss",
                       unit=MetricUnit.Count, value=1)  # fmt: skip
    return hit, "hit" if hit is not None else "miss"


def remember(prep: Prepared, status: str, result: dict[str, Any], count: Any = None) -> None:
    """Cache a fresh answer when it is what the route names (see ``_served_as_routed``).
    ``count(name)``: how a metric is counted (a stream, outside the handler's lock, passes its
    own; the handler's buffer belongs to the request being handled)."""
    if status == "miss" and _served_as_routed(prep, result, count):
        deps().cache.put(prep.key, result)


def serve(
    adapter: str,
    caller: Caller,
    route: dict[str, Any],
    req: GenerateRequest,
    t0: float,
    session: str | None = None,
) -> dict[str, Any] | Failure:
    """Quota, cache, SageMaker: the native answer, or why not. Both APIs come through here."""
    prep = prepare(adapter, caller, route, req, session)
    if isinstance(prep, Failure):
        return prep
    hit, cache_status = lookup(prep)
    if hit is not None:
        return answer(adapter, prep.version, hit, "hit", t0, model_ms=0.0)
    t_model = time.perf_counter()
    try:
        result = _invoke(prep)
    except InvokeError as exc:
        if prep.fallback is None or exc.code not in CANARY_ABSENT:
            count_canary(prep, exc)
            return invoke_failure(adapter, exc)
        prep = prep.fallback  # the canary's component is gone or not made yet: stable answers
        hit, cache_status = lookup(prep)
        if hit is not None:
            return answer(adapter, prep.version, hit, "hit", t0, model_ms=0.0)
        try:
            result = _invoke(prep)
        except InvokeError as again:
            return invoke_failure(adapter, again)
    count_canary(prep, None)
    model_ms = (time.perf_counter() - t_model) * 1000
    metrics.add_metric(name="ModelLatency", unit=MetricUnit.Milliseconds, value=model_ms)
    remember(prep, cache_status, result)
    return answer(adapter, prep.version, result, cache_status, t0, model_ms)


#: What SageMaker answers for an inference component that is not on the endpoint: a release
#: that adds or removes a canary deploys its component and the router's table apart, so for a
#: moment the router may name a canary component that is not (or no longer) there.
CANARY_ABSENT = frozenset({"ValidationError"})


def _invoke(prep: Prepared) -> dict[str, Any]:
    s = deps().settings
    with tracer.provider.in_subsegment("invoke_endpoint") as sub:
        sub.put_annotation(key="adapter", value=prep.adapter)
        return complete_answer(
            invoke(
                deps().client,
                s.routing_table["endpoint"],
                prep.component,
                prep.payload,
                deadline_s=s.invoke_deadline_s,
            )
        )


#: The errors that are a canary version's own fault: its container failed (a 5xx it answered,
#: an answer that is not one, a stream it broke). Not SageMaker's own failures or throttling,
#: a container busy or not ready (503: capacity the stable version shares), nor a deadline
#: (504: a tenant's long generation times out on either version), nor any 4xx (the request's).
CANARY_FAULTS = frozenset({"ModelError", "BadModelOutput", "ModelStreamError", "StreamError"})


def canary_fault(exc: InvokeError | None) -> bool:
    return (
        exc is not None and exc.code in CANARY_FAULTS and exc.status >= 500 and (exc.status != 503)
    )


def count_canary(prep: Prepared, exc: InvokeError | None, count: Any = None) -> None:
    """Count a canary's answer (``exc``: how it failed, None for an answer) toward its
    rollback; a failure counts when it is the version's own (``CANARY_FAULTS``). The request
    whose count switches the canary off counts ``CanaryRollback`` and logs why (the alarm on
    that metric tells the adapter's owner). ``count``: as in ``remember``."""
    if prep.canary is None:
        return
    failed = canary_fault(exc)
    outcome = deps().canaries.record(prep.adapter, prep.canary, failed)  # type: ignore[union-attr]
    if not outcome.rolled_back:
        return
    if count is not None:
        count("CanaryRollback")
    else:
        metrics.add_metric(name="CanaryRollback", unit=MetricUnit.Count, value=1)
    logger.error(
        "canary rolled back: every request now goes to the stable version",
        extra={
            "adapter": prep.adapter,
            "canary_version": prep.canary.version,
            "reason": outcome.reason,
            "max_error_rate": prep.canary.max_error_rate,
        },
    )


#: Why a generation ended, when it ended as an answer (the runtime's words, and TGI's).
ANSWERED = frozenset({"stop", "length", "stop_sequence", "eos_token"})
#: When a client may try again after a throttle or a component that is not ready, in seconds.
RETRY_AFTER_S = {429: 1, 503: 5}


def complete_answer(result: Any) -> dict[str, Any]:
    """The container's answer when it is one: an object with its text and a finish reason of
    stop, length or stop sequence. Anything else (``{}``, an error object, an array) is a 502,
    never an answer and never cached."""
    if not isinstance(result, dict):
        raise InvokeError(502, "the model returned an answer that is not a JSON object",
                          "BadModelOutput", type(result).__name__)  # fmt: skip
    if "error" in result:
        status = result.get("status")
        raise container_error(
            status if isinstance(status, int) else 502, str(result["error"])[:500]
        )
    if (
        not isinstance(result.get("generated_text"), str)
        or result.get("finish_reason") not in ANSWERED
    ):
        raise InvokeError(502, "the model returned an incomplete answer (no text or no finish "
                               "reason)", "BadModelOutput", str(sorted(result))[:200])  # fmt: skip
    return result


def invoke_failure(adapter: str, exc: InvokeError, request_id: str | None = None) -> Failure:
    """A failed invocation as the client sees it: the fixed message, and ``Retry-After`` where
    a retry can succeed. What SageMaker or the container said is logged here, under the request
    id, and goes nowhere else."""
    metrics.add_metric(name=f"Error{exc.status}", unit=MetricUnit.Count, value=1)
    logger.warning("invoke failed", extra={"adapter": adapter, "code": exc.code,
                                           "status": exc.status, "detail": exc.detail,
                                           "request_id": request_id or _request_id()})  # fmt: skip
    return client_failure(exc)


def client_failure(exc: InvokeError) -> Failure:
    """The fixed message, and ``Retry-After`` where a retry can succeed."""
    retry = RETRY_AFTER_S.get(exc.status)
    return Failure(exc.status, exc.message, code=exc.code,
                   headers={"Retry-After": str(retry)} if retry else None)  # fmt: skip


def _served_as_routed(prep: Prepared, result: dict[str, Any], count: Any = None) -> bool:
    """Whether the artifact the container reports is the one the key names: the route's name
    and version, and its weights' sha256 where the catalog pins them. During a rollout a
    container may still serve the previous version, and a component may answer from the base
    model (``artifact: null``); neither answer may be cached under the adapter's key."""
    artifact = result.get("artifact")
    if isinstance(artifact, dict):
        same = (artifact.get("name"), artifact.get("version")) == (prep.adapter, prep.version)
        if same and prep.weights_sha256 is not None:
            same = artifact.get("sha256") == prep.weights_sha256
        if same:
            return True
    if count is not None:
        count("ArtifactMismatch")
    else:
        metrics.add_metric(name="ArtifactMismatch", unit=MetricUnit.Count, value=1)
    logger.warning("served artifact differs from the route; answer not cached",
                   extra={"adapter": prep.adapter, "routed": prep.version,
                          "weights": prep.weights_sha256, "served": artifact})  # fmt: skip
    return False


def answer(adapter: str, version: str, result: dict[str, Any], cache: str, t0: float,
           model_ms: float, request_id: str | None = None) -> dict[str, Any]:  # fmt: skip
    """The native answer body. ``request_id``: a stream's own (it is answered on another
    thread, after the resolver's current event has moved on); else the current event's."""
    total = (time.perf_counter() - t0) * 1000
    body = {
        "output": result.get("generated_text"),
        "adapter": adapter,
        "version": version,
        "cache": cache,
        "request_id": request_id or _request_id(),
        "finish_reason": result.get("finish_reason"),
        # The adapter identifier the container reports serving (SageMaker passes the adapter
        # component's name): a client or smoke check can see which component answered.
        "served_by": result.get("adapter"),
        # The artifact the container reports serving (manifest name, version, weights sha256).
        "artifact": result.get("artifact"),
        "usage": result.get("usage"),
        "timings_ms": {"router": round(total - model_ms, 3), "model": round(model_ms, 3),
                       "total": round(total, 3), "engine": result.get("timings_ms")},
    }  # fmt: skip
    return body


def _shape_error(event: Any) -> str | None:
    """What is wrong with an event that is not an API Gateway REST proxy event, if anything."""
    if not isinstance(event, dict):
        return "event is not an object"
    for key in ("httpMethod", "path"):
        if not isinstance(event.get(key), str):
            return f"event.{key} missing or not a string"
    for key in ("headers", "queryStringParameters", "pathParameters", "multiValueHeaders",
                "multiValueQueryStringParameters"):  # fmt: skip
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
