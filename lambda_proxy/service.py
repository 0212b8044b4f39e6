"""The router's service: who may call, what a request becomes, and how it is served.

Plain functions over a ``Call`` (one request, whichever door it came through: the native API,
the OpenAI-compatible one, a stream). Each raises ``RouterError`` when it will not serve, with
the status and message a client sees; each door renders that error in its own format, in one
place (``handler``, ``openai_api``, ``streaming``). Nothing here reads a web framework's
current request, so a stream's checks need no shared state of Powertools' resolver.
"""

from __future__ import annotations

import json
import math
import random
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from pydantic import ValidationError

from contracts import errors
from contracts.errors import CONTAINER_STATUSES
from contracts.fairness import MIRROR, custom_attributes
from contracts.registry import SHADOW_STATUS
from contracts.routing import CanaryRoute, Route
from contracts.settings import RouterSettings
from lambda_proxy import registry, shadow, usage
from lambda_proxy.auth import Caller, allowed, caller_from_event, listed, voice
from lambda_proxy.cache import CacheUnavailableError, ResponseCache, SecretCredentials, cache_key
from lambda_proxy.canary import Canaries, Choice, Switch
from lambda_proxy.quota import Limits, Quotas, prompt_tokens_estimate
from lambda_proxy.sagemaker import InvokeError, container_error, invoke, make_client
from lambda_proxy.schema import GenerateRequest
from lambda_proxy.settings import settings
from lambda_proxy.telemetry import count_now, logger, metrics, tracer

#: How a metric is counted: into the buffered handler's metrics (the default), or at once
#: (``telemetry.count_now``) where no handler buffer belongs to the request.
Count = Callable[[str], None]


def _buffered(name: str) -> None:
    metrics.add_metric(name=name, unit=MetricUnit.Count, value=1)


class RouterError(Exception):
    """Why a request is not served: the status and message its client sees, and what each
    door's format can carry (a code, field details, OpenAI's ``param``, headers). Its code is a
    row of the error catalogue (``contracts.errors``), with the catalogue's status; only a
    ModelError carries the container's own."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str,
        details: list[dict[str, Any]] | None = None,
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        row = errors.spec(code)  # a code nobody catalogued is a bug, found here
        if status != row.status and not (code == "ModelError" and status in CONTAINER_STATUSES):
            raise ValueError(f"{code} is {row.status} in the error catalogue, not {status}")
        super().__init__(message)
        self.status, self.message, self.code = status, message, code
        # The catalogue's retry advice; a header given here (a quota's own wait) wins.
        self.details, self.headers = details, {**errors.headers(code, status), **(headers or {})}
        self.param = param if param is not None else (details[0]["field"] if details else None)


# -- the request -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    """One request as the service needs it: the IAM caller, the body, the headers and API
    Gateway's request id."""

    caller: Caller | None
    body: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    request_id: str | None = None

    @classmethod
    def of(cls, event: Mapping[str, Any], context: Any) -> Call:
        """From an API Gateway REST proxy event and the Lambda context. The function's own
        account stands in where the request context names none."""
        arn = getattr(context, "invoked_function_arn", "") or ""
        parts = arn.split(":")
        own = parts[4] if len(parts) > 4 and parts[4].isdigit() else None
        caller = caller_from_event(
            dict(event), own_account=own, trust_tenant_claim=deps().settings.trust_tenant_claim
        )
        ctx = event.get("requestContext")
        rid = ctx.get("requestId") if isinstance(ctx, dict) else None
        body = event.get("body")
        return cls(
            caller=caller,
            body=body if isinstance(body, str) else None,
            headers=event.get("headers") or {},
            request_id=rid if isinstance(rid, str) else None,
        )


#: The header that keeps a caller's requests on one version of an adapter during a canary.
SESSION_HEADER = "x-session-key"
MAX_SESSION_KEY = 256


def session_key(call: Call, fallback: str | None = None) -> str | None:
    """The request's session key: the ``X-Session-Key`` header, else ``fallback`` (an OpenAI
    request's ``user``); at most ``MAX_SESSION_KEY`` characters count."""
    value = next((v for k, v in call.headers.items() if k.lower() == SESSION_HEADER), None)
    value = value if isinstance(value, str) and value else fallback
    return value[:MAX_SESSION_KEY] if isinstance(value, str) and value else None


# -- dependencies ----------------------------------------------------------------------------


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
    #: Why an adapter is not served yet, where something knows (the local platform's trainer:
    #: ``(state, reason)`` for queued, training, evaluating, not publishable or failed); None
    #: when it is served. A deployed environment routes only published adapters.
    availability: Callable[[str], tuple[str, str] | None] | None = None
    #: Where shadow canaries' mirrors run, and their paired test's sums (``shadow``).
    mirrors: shadow.Mirrors | None = None
    pairs: shadow.Pairs | None = None
    #: Where a shadow canary's decisions are recorded (``registry``): the Model Registry on
    #: AWS; None where there is none (the local platform, tests that do not ask for it).
    registry: registry.Recorder | None = None
    #: The canaries whose recorded decision this process has read back (``read_back``).
    read_back: dict[str, ReadBack] = field(default_factory=dict)

    def __post_init__(self) -> None:
        s = self.settings
        if self.canaries is None:
            self.canaries = Canaries(self.cache.client)
        if self.mirrors is None:
            self.mirrors = shadow.Mirrors()
        if self.pairs is None:
            self.pairs = shadow.Pairs(self.cache.client)
        if self.stream_client is None:
            self.stream_client = make_client(
                s.sagemaker_endpoint_url, s.region, s.stream_deadline_s
            )
        if self.quotas is None:
            wide = None
            if s.quota_requests_per_minute is not None or s.quota_tokens_per_minute is not None:
                wide = Limits(s.quota_requests_per_minute, s.quota_tokens_per_minute)
            self.quotas = Quotas(self.cache.client, wide)


_deps: Dependencies | None = None


def configure(dependencies: Dependencies | None) -> None:
    """Replace the dependencies (tests, the local platform)."""
    global _deps
    _deps = dependencies


def deps() -> Dependencies:
    global _deps
    if _deps is None:
        s = settings()
        credentials = SecretCredentials(s.redis_secret_arn) if s.redis_secret_arn else None
        _deps = Dependencies(
            settings=s,
            cache=ResponseCache.from_url(s.redis_url, s.cache_ttl_s, credentials),
            client=make_client(s.sagemaker_endpoint_url, s.region, s.invoke_deadline_s),
            registry=registry.Recorder(s.region),
        )
    return _deps


# -- who may call ----------------------------------------------------------------------------


def caller_of(call: Call) -> Caller:
    if call.caller is None:
        _buffered("Forbidden")
        raise RouterError(403, errors.spec("AccessDenied").message, code="AccessDenied")
    return call.caller


def is_operator(caller: Caller) -> bool:
    return listed(caller, deps().settings.routing_table.operators)


def health(call: Call) -> dict[str, Any]:
    """Liveness for any authenticated caller; the endpoint and the adapter count only for the
    environment's operators (a tenant has no business knowing either)."""
    if not is_operator(caller_of(call)):
        return {"status": "ok"}
    table = deps().settings.routing_table
    return {"status": "ok", "adapters": len(table.adapters), "endpoint": table.endpoint}


def visible_adapters(call: Call) -> list[dict[str, Any]]:
    """The adapters this caller may use (operators: every adapter)."""
    caller = caller_of(call)
    routes = deps().settings.routing_table.adapters
    operator = is_operator(caller)
    return [
        {
            "name": name,
            "version": r.version,
            "task": r.task,
            "description": r.description,
            # serving, or why not (queued, training, evaluating, not publishable, failed)
            "state": (adapter_state(name) or ("serving", ""))[0],
        }
        for name, r in sorted(routes.items())
        if operator or allowed(caller, r)
    ]


def authorize(call: Call, adapter: str) -> tuple[Caller, Route]:
    """Identity first, and one answer for "no such adapter" and "not yours": names cannot be
    listed by probing, with or without credentials."""
    caller = caller_of(call)
    route = deps().settings.routing_table.adapters.get(adapter)
    if route is None or not (allowed(caller, route) or is_operator(caller)):
        _buffered("UnknownAdapter" if route is None else "Forbidden")
        raise RouterError(404, f"unknown adapter {adapter[:64]!r}", code="UnknownAdapter")
    if (why := not_served(adapter)) is not None:
        raise why
    return caller, route


#: What a client sees for an adapter that is not served, by its state: the router's words.
NOT_SERVED = {
    "queued": "is queued for training",
    "training": "is being trained",
    "evaluating": "is being evaluated against its gate",
}


def adapter_state(adapter: str) -> tuple[str, str] | None:
    """``(state, reason)`` of an adapter that is not served, or None."""
    check = deps().availability
    return check(adapter) if check is not None else None


def not_served(adapter: str) -> RouterError | None:
    """Why an adapter the caller may use is not served, in fixed words: not trained yet (503,
    retry later), not publishable with its gate's reason, or its training failed (409: a retry
    cannot help). No internals: a failure's own text stays in the trainer's log."""
    state = adapter_state(adapter)
    if state is None:
        return None
    kind, reason = state
    name = adapter[:64]
    if kind in NOT_SERVED:
        return RouterError(
            503,
            f"adapter {name!r} {NOT_SERVED[kind]}; it is served once it passes its gate",
            code="AdapterNotReady",
        )
    if kind == "not publishable":
        return RouterError(
            409,
            f"adapter {name!r} is not served: it did not pass its evaluation gate "
            f"({reason[:300] or 'see python -m local status'}); on the local platform, "
            "make up ARGS=--serve-unpublishable serves it anyway",
            code="AdapterNotPublishable",
        )
    return RouterError(
        409,
        f"adapter {name!r} is not served: its training failed (python -m local status and "
        ".local/logs/trainer.log say why); the next make up trains it again",
        code="AdapterTrainingFailed",
    )


# -- what a request becomes ------------------------------------------------------------------


def _invalid(field_name: str, message: str) -> RouterError:
    return RouterError(
        400,
        "invalid request",
        code="InvalidRequest",
        details=[{"field": field_name, "message": message}],
    )


def read_json(call: Call) -> Any:
    """The request body as JSON, within the size limit."""
    raw = call.body or ""
    limit = deps().settings.max_body_bytes
    try:
        size = len(raw.encode())
    except UnicodeEncodeError:  # an event whose body string holds a lone surrogate
        raise _invalid("body", "not valid Unicode") from None
    if size > limit:
        raise RouterError(413, f"body over the limit of {limit} bytes", code="RequestTooLarge")
    try:
        return json.loads(raw) if raw else None
    except RecursionError:
        raise _invalid("body", "JSON nested too deeply") from None
    except ValueError:
        raise _invalid("body", "not JSON") from None


def validate(data: Any) -> GenerateRequest:
    """The native request, within the environment's caps."""
    s = deps().settings
    try:
        return GenerateRequest.model_validate(
            data,
            context={
                "max_new_tokens_cap": s.max_new_tokens_cap,
                "max_stop_sequences": s.max_stop_sequences,
            },
        )
    except RecursionError:
        raise _invalid("body", "JSON nested too deeply") from None
    except ValidationError as exc:
        details = [
            {"field": ".".join(map(str, e["loc"])) or "body", "message": e["msg"]}
            for e in exc.errors(include_url=False, include_input=False)
        ]
        raise RouterError(400, "invalid request", code="InvalidRequest", details=details) from None
    except (ValueError, TypeError) as exc:
        raise _invalid("body", str(exc)) from None


def check_native(call: Call, adapter: str) -> tuple[Caller, Route, GenerateRequest]:
    """The native route's checks, in their order (identity first, so an unknown adapter and
    a forbidden one look the same): the caller, its route and the validated request."""
    caller, route = authorize(call, adapter)
    return caller, route, validate(read_json(call))


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
    canary: CanaryRoute | None = None
    #: For a canary's request, the stable version's: what serves it when the canary's component
    #: is not there (``CANARY_ABSENT``).
    fallback: Prepared | None = None
    #: Who sent it (the tenant, else the caller's ARN): the fair queue's sender.
    who: str = ""
    #: Who it is as evidence about a canary (``auth.voice``): the 5xx rule and the paired test
    #: count voices, not roles.
    voice: str = ""
    #: A shadow canary's copy of this request, mirrored to it after stable answers (``mirror``).
    mirror: Prepared | None = None
    #: This is such a copy: the engine queues it as a sender of its own (``SHADOW_SENDER``).
    shadow: bool = False
    #: The prompt's token estimate the quota charged (``charge``): an abandoned stream's
    #: usage carries it as its input, since no answer reported the real count.
    prompt_tokens: int = 0


def charge(
    who: str, adapter: str, req: GenerateRequest, per_adapter: Limits | None, overhead: int = 0
) -> int:
    """The quota check; raises when the request is not admitted, else returns the prompt's
    token estimate it charged. The token cost is what the
    request may generate plus an estimate of its prompt's tokens: an upper bound per
    character class, each message's template, and ``overhead``, what the container adds (the
    adapter's system instruction, when the request brings none)."""
    messages = [m.content for m in req.messages or []]
    if any(m.role == "system" for m in req.messages or []):
        overhead = 0
    estimate = prompt_tokens_estimate(req.inputs, messages, overhead)
    cost = req.parameters.max_new_tokens + estimate
    quota = deps().quotas.check(who, adapter, cost, per_adapter)  # type: ignore[union-attr]
    if not quota.enforced:
        # Redis is away: the in-process fallback bucket decided instead.
        _buffered("QuotaUnavailable")
    if quota.never:
        _buffered("QuotaCostOverLimit")
        raise RouterError(
            400,
            f"this request may use {cost} tokens (max_new_tokens "
            f"{req.parameters.max_new_tokens} plus about {estimate} prompt tokens, an "
            f"estimate), more than the limit of {quota.limit} allows; ask for fewer new tokens "
            "or send a shorter prompt",
            code="CostOverLimit",
        )
    if not quota.allowed:
        _buffered("QuotaExceeded")
        raise RouterError(
            429,
            f"quota exceeded ({quota.limit}); retry in {quota.retry_after_s} s",
            code="QuotaExceeded",
            headers={"Retry-After": str(quota.retry_after_s)},
        )
    return estimate


def payload_of(req: GenerateRequest) -> dict[str, Any]:
    """What the container receives for a request."""
    payload: dict[str, Any] = {"parameters": req.parameters.model_dump(exclude_none=True)}
    if req.inputs is not None:
        payload["inputs"] = req.inputs
    else:
        payload["messages"] = [m.model_dump() for m in req.messages or []]
    return payload


def canary_route(route: Route, canary: CanaryRoute) -> Route:
    """The canary version's route: its component, version and digests."""
    return route.model_copy(
        update={
            "component": canary.component,
            "version": canary.version,
            "sha256": canary.sha256,
            "weights_sha256": canary.weights_sha256,
        }
    )


def _version(
    adapter: str, who: str, route: Route, session: str | None
) -> tuple[Route, CanaryRoute | None, Choice]:
    """The route of the version that serves this request: the canary's for its share of
    session keys while it is not rolled back (and, in shadow mode, once it is promoted), else
    the stable one's; and the choice that decided it."""
    canary = route.canary
    if canary is None:
        return route, None, Choice.STABLE
    recorded = deps().registry is not None and canary.registry_group is not None
    canaries = deps().canaries
    assert canaries is not None
    choice = canaries.route(adapter, canary, who, session, recorded)
    if choice is Choice.UNREAD:
        if read_back(adapter, canary):
            choice = canaries.route(adapter, canary, who, session, recorded)
        if choice is Choice.UNREAD:  # the read is under way: nothing decided, stable serves
            choice = Choice.STABLE
    if choice is not Choice.CANARY:
        return route, None, choice
    return canary_route(route, canary), canary, choice


def prepare(
    call: Call,
    adapter: str,
    caller: Caller,
    route: Route,
    req: GenerateRequest,
    session: str | None = None,
) -> Prepared:
    """The quota check, the version that serves, the SageMaker payload and the cache key: the
    part of serving that the buffered and the streamed answers share. ``session``: the
    OpenAI ``user``, a session key when no ``X-Session-Key`` header names one."""
    table = deps().settings.routing_table
    who = caller.tenant or caller.arn
    estimate = charge(who, adapter, req, Limits.of(route.quota), route.prompt_overhead)
    served, canary, choice = _version(adapter, who, route, session_key(call, session))
    revision = table.base_revision or ""
    prep = _prepared(adapter, who, served, req, revision, canary)
    prep.who, prep.voice, prep.prompt_tokens = who, voice(caller, route), estimate
    if canary is not None:
        prep.fallback = _prepared(adapter, who, route, req, revision)
        prep.fallback.who, prep.fallback.voice = who, prep.voice
    shadowed = route.canary
    if (
        choice is Choice.SHADOW
        and shadowed is not None
        and not req.stream
        # Too short an answer scores the same whatever the model (``shadow``).
        and req.parameters.max_new_tokens >= shadow.MIN_MIRROR_TOKENS
        # A share, not a secret: which requests are mirrored needs no cryptographic draw.
        and random.random() < (shadowed.shadow or 0.0)  # noqa: S311
    ):
        # Not charged to the caller's quota (``charge`` ran once, for stable's answer).
        prep.mirror = _prepared(
            adapter, who, canary_route(route, shadowed), req, revision, shadowed
        )
        prep.mirror.who, prep.mirror.voice = who, prep.voice
        prep.mirror.shadow = True
    return prep


#: How long a request waits for its process's first read of a canary's recorded decision.
READ_BACK_WAIT_S = 1.0
#: A recorded status -> the switch it sets.
RECORDED_SWITCH: dict[str, Switch] = {"rolled-back": "off", "promoted": "split", "held": "held"}


#: After a failed read, the cache is marked read for this long, then a request reads again.
READ_BACK_RETRY_S = 60


@dataclass
class ReadBack:
    """One canary version's read-back in this process: ``done`` once it ended."""

    done: threading.Event = field(default_factory=threading.Event)


def read_back(adapter: str, canary: CanaryRoute) -> bool:
    """Read the decision the Model Registry records for this canary version into the cache,
    where the cache has no mark of it (``Choice.UNREAD``: it started empty, or lost its keys):
    the cache (Redis, with no replica in dev) is not where a decision lives, the registry is.
    One read at a time per process, on its own thread; the request that starts it waits for it
    at most ``READ_BACK_WAIT_S``, others do not wait. True when the read is done (the cache is
    marked: for good after a read, ``READ_BACK_RETRY_S`` after a failed one)."""
    d = deps()
    base = Canaries.base(adapter, canary)
    with _READ_BACK_LOCK:
        state = d.read_back.get(base)
        if state is not None and not state.done.is_set():
            return False  # under way
        state = d.read_back[base] = ReadBack()
        threading.Thread(target=_read_back, args=(d, adapter, canary, state), daemon=True).start()
    return state.done.wait(READ_BACK_WAIT_S)


_READ_BACK_LOCK = threading.Lock()


def _read_back(d: Dependencies, adapter: str, canary: CanaryRoute, state: ReadBack) -> None:
    extra = {"adapter": adapter, "canary_version": canary.version, "group": canary.registry_group}
    canaries = d.canaries
    assert canaries is not None
    assert d.registry is not None
    assert canary.registry_group is not None
    try:
        status = d.registry.decided(canary.registry_group, canary.version)
    except Exception as exc:  # the registry away: the cache's switches stand; try again later
        count_now("RegistryReadFailed")
        logger.warning(
            "canary decision not read back from the Model Registry",
            extra={**extra, "error": f"{type(exc).__name__}: {exc}"[:500]},
        )
        canaries.mark_read(adapter, canary, READ_BACK_RETRY_S)
        state.done.set()
        return
    switch = RECORDED_SWITCH.get(status or "")
    if switch is not None:
        canaries.restore(
            adapter,
            canary,
            switch,
            json.dumps({"action": status, "reason": "recorded in the Model Registry"}),
        )
        logger.info(
            "canary decision read back from the Model Registry", extra={**extra, "status": status}
        )
    canaries.mark_read(adapter, canary)
    state.done.set()


def _prepared(
    adapter: str,
    who: str,
    route: Route,
    req: GenerateRequest,
    base_revision: str,
    canary: CanaryRoute | None = None,
) -> Prepared:
    """One version's payload and cache key."""
    payload = payload_of(req)
    # The catalog's default schema for this adapter (sales-json's record), unless the request
    # names its own; before the cache key, so the key holds the schema that was decoded to.
    if req.parameters.json_schema is None and route.json_schema is not None:
        payload["parameters"]["json_schema"] = route.json_schema
    version = route.version
    # Whose answers a cached answer may be shown to: the caller's tenant alone (the default: an
    # identical prompt from another tenant must not reveal what this one asked), everyone
    # (``shared``), or nobody (``off``).
    mode = route.cache
    scope = "*" if mode == "shared" else who
    weights = route.weights_sha256
    pins = f"{route.sha256 or ''}/{weights or ''}"
    key = cache_key(adapter, version, base_revision, payload, scope, pins)
    return Prepared(
        adapter,
        version,
        route.component,
        payload,
        key,
        cacheable=req.parameters.deterministic and mode != "off",
        weights_sha256=weights,
        canary=canary,
    )


def prepare_base(caller: Caller, data: Any) -> dict[str, Any]:
    """A request for the base model itself, which no deployed route reaches: the local
    playground's side-by-side answer. It passes the adapter routes' checks (the request schema
    with the environment's caps, and the caller's tenant-wide quota) and becomes the payload."""
    req = validate(data)
    if req.stream:
        raise RouterError(
            400, "the base model's answer is not streamed", code="StreamingUnavailable"
        )
    charge(caller.tenant or caller.arn, "base", req, None)
    return payload_of(req)


# -- serving ---------------------------------------------------------------------------------


def lookup(prep: Prepared) -> tuple[dict[str, Any] | None, str]:
    """A cached answer, and the cache status: hit, miss, or bypass (not cacheable, or the
    cache is down: a cache failure never fails a request)."""
    if not prep.cacheable:
        return None, "bypass"
    try:
        hit = deps().cache.get(prep.key)
    except CacheUnavailableError as exc:
        logger.warning("cache bypassed", extra={"reason": str(exc)})
        _buffered("CacheError")
        return None, "bypass"
    _buffered("CacheHit" if hit is not None else "CacheMiss")
    return hit, "hit" if hit is not None else "miss"


def remember(prep: Prepared, status: str, result: dict[str, Any], count: Count = _buffered) -> None:
    """Cache a fresh answer when it is what the route names (see ``_served_as_routed``)."""
    if status == "miss" and _served_as_routed(prep, result, count):
        deps().cache.put(prep.key, result)


def serve(
    call: Call,
    adapter: str,
    caller: Caller,
    route: Route,
    req: GenerateRequest,
    t0: float,
    session: str | None = None,
    kind: str = "native",
) -> dict[str, Any]:
    """Quota, cache, SageMaker: the native answer. Both APIs come through here (``kind``:
    ``native`` or ``openai``), and each outcome is one usage record (``lambda_proxy.usage``)."""
    try:
        prep = prepare(call, adapter, caller, route, req, session)
        done = _answer(call, prep, t0)
    except RouterError as exc:
        ms = (time.perf_counter() - t0) * 1000
        usage.record(
            usage.of_failure(caller, route, adapter, kind, exc.status, ms, call.request_id)
        )
        raise
    usage.record(usage.of_answer(caller, route, adapter, done, kind))
    # A cache hit is an input stable answered before: the canary has had it (or a copy of it
    # dropped), and one input is one piece of evidence however often it is sent.
    if prep.mirror is not None and done.get("cache") != "hit":
        if served_as(prep, done.get("artifact")) and isinstance(done.get("output"), str):
            mirror(prep.mirror, done["output"])
        else:  # stable's answer came from another artifact: it is not stable's to compare
            _buffered("ShadowArtifactMismatch")
    return done


# -- shadow canaries -------------------------------------------------------------------------


def mirror(prep: Prepared, stable_answer: str) -> None:
    """Send a shadow canary its copy of a request stable has answered, in the background
    (``shadow``): dropped, and counted, when the process's mirrors are at their cap."""
    if deps().mirrors.submit(lambda: _mirrored(prep, stable_answer)):  # type: ignore[union-attr]
        _buffered("ShadowMirrored")
    else:
        _buffered("ShadowDropped")


def _mirrored(prep: Prepared, stable_answer: str) -> None:
    """One mirror: the canary's answer, its signals beside stable's, the pair added to the
    test, and the decision of a look acted on. Outside any handler's buffer, so its metrics
    are flushed at once; nothing it meets may escape its thread."""
    canary = prep.canary
    assert canary is not None
    try:
        try:
            result = _invoke(prep)
        except InvokeError as exc:
            count_now("ShadowFailed")
            if exc.code not in CANARY_ABSENT:
                count_canary(prep, exc, count_now)
            logger.warning(
                "shadow mirror failed",
                extra={"adapter": prep.adapter, "canary_version": prep.version, "code": exc.code},
            )
            if not unanswered(exc):
                return
            # The canary did not answer what stable answered: a pair in which it said nothing,
            # or a canary failing 40% of inputs with a 4xx would be judged on the rest only.
            answered = ""
        else:
            count_canary(prep, None, count_now)
            if not served_as(prep, result.get("artifact")):
                # Another version answered under the canary's component (a release halfway):
                # its answers are not this version's to be judged on.
                count_now("ShadowArtifactMismatch")
                return
            answered = result["generated_text"]
        schema = prep.payload["parameters"].get("json_schema")
        stable, mirrored = shadow.pair(canary, prep.payload, stable_answer, answered, schema)
        if not stable:
            count_now("ShadowUninformative")
            return
        base = deps().canaries.base(prep.adapter, canary)  # type: ignore[union-attr]
        tally = deps().pairs.add(  # type: ignore[union-attr]
            base,
            stable,
            mirrored,
            prep.voice,
            key=shadow.input_key(prep.payload),
            every=canary.min_pairs,
            min_callers=canary.min_callers,
        )
        if tally is None:
            count_now("ShadowUnpaired")
        decision = shadow.decide(canary, tally) if tally is not None else None
        if decision is not None:
            settle(prep.adapter, canary, decision)
    except Exception:  # a mirror's failure must never reach the router's thread pool
        count_now("ShadowFailed")
        logger.exception("shadow mirror failed", extra={"adapter": prep.adapter})


#: A mirror's failures that are the canary's own answer: its container's error (a 5xx, or a
#: 4xx it gave to an input stable answered) or an answer that is not one.
CANARY_ANSWERS = errors.CANARY_FAULTS  # of these, a mirror (never streamed) meets two
#: Container statuses that say nothing of the version: busy (429, 503) or a slow read (408).
_SHARED_STATUSES = frozenset({408, 429, 503})


def unanswered(exc: InvokeError) -> bool:
    """Whether a mirror's failure is the canary not answering a request stable answered: only
    its container's own outcomes (``CANARY_ANSWERS``). Not the router's deadline (mirrors queue
    as one low-priority sender, ``SHADOW_SENDER``, so they are the requests that miss it),
    SageMaker's own failures (``InternalFailure``, ``InternalDependencyException``, an unmapped
    code), a dropped connection, the component being gone, a request never started, or
    capacity both versions share: such a mirror is dropped and counted (``ShadowFailed``),
    never paired as the canary saying nothing."""
    return exc.code in CANARY_ANSWERS and exc.status not in _SHARED_STATUSES


def settle(adapter: str, canary: CanaryRoute, decision: shadow.Decision) -> None:
    """Act on a look of the paired test: roll the canary back, promote it (or record a held
    promotion), or log the look. A decision is counted and logged by the one call that set
    its switch."""
    evidence = decision.evidence()
    extra = {"adapter": adapter, "canary_version": canary.version, "evidence": evidence}
    if decision.action == "continue":
        logger.info("shadow canary look: no decision", extra=extra)
        return
    if decision.action == "rollback":
        text = json.dumps(evidence)
        stored = deps().canaries.settle(adapter, canary, "off", text)  # type: ignore[union-attr]
        if stored is None:
            unstored(extra)
        if stored:
            count_now("CanaryRollback")
            count_now("CanaryQualityRollback")
            logger.error(
                "canary rolled back on quality: every request now goes to the stable version",
                extra={**extra, "reason": decision.reason},
            )
            record(adapter, canary, decision, "rollback")
        return
    switch = "split" if canary.promote == "split" else "held"
    stored = deps().canaries.settle(adapter, canary, switch, json.dumps(evidence))  # type: ignore[union-attr]
    if stored is None:
        unstored(extra)
    if stored:
        count_now("CanaryPromoted")
        logger.warning(
            f"shadow canary promoted ({canary.promote}): "
            + (
                f"it now serves {canary.weight}% of session keys"
                if switch == "split"
                else "it stays a shadow, as the catalog holds it"
            ),
            extra={**extra, "reason": decision.reason},
        )
        record(adapter, canary, decision, "promote" if switch == "split" else "held")


def unstored(extra: dict[str, Any]) -> None:
    """A decision Redis did not take: not counted, logged or recorded now. This process acts on
    a rollback at once (its own switch); the next look with Redis, here or in another execution
    environment, decides again on the same pairs and is the one counted."""
    count_now("CanaryDecisionUnstored")
    logger.warning("shadow canary decision not stored: Redis did not answer", extra=extra)


def record(adapter: str, canary: CanaryRoute, decision: shadow.Decision | str, kind: str) -> None:
    """Write a decision (the paired test's, or the 5xx rule's reason) into the canary version's
    Model Registry record (``registry``), once, by the call that set its switch: the record is
    where the decision outlives the cache (``read_back``). A failure is logged and counted
    (``RegistryRecordFailed``): the decision stands, and its evidence is in the logs and the
    switch."""
    recorder, group = deps().registry, canary.registry_group
    if recorder is None or group is None:
        return
    status = SHADOW_STATUS[kind]
    extra = {"adapter": adapter, "canary_version": canary.version, "group": group}
    try:
        arn = recorder.record(group, canary.version, decision, status)
    except registry.DecisionConflictError as exc:  # a rollback is final; a promotion stays
        count_now("RegistryRecordConflict")
        logger.warning("shadow canary decision not recorded", extra={**extra, "reason": str(exc)})
        return
    except Exception as exc:  # the registry's failure must not undo or hide the decision
        count_now("RegistryRecordFailed")
        logger.warning(
            "shadow canary decision not recorded in the Model Registry",
            extra={**extra, "error": f"{type(exc).__name__}: {exc}"[:500]},
        )
        return
    if arn is None:
        count_now("RegistryRecordSkipped")
        logger.warning("shadow canary decision: the version has no model package", extra=extra)
    else:
        logger.info(
            "shadow canary decision recorded in the Model Registry",
            extra={**extra, "model_package": arn, "status": status},
        )


def _answer(call: Call, prep: Prepared, t0: float) -> dict[str, Any]:
    """A prepared request's answer: from the cache, or from SageMaker (the stable version's
    when the canary's component is not there)."""
    adapter = prep.adapter
    hit, cache_status = lookup(prep)
    if hit is not None:
        return answer(adapter, prep.version, hit, "hit", t0, 0.0, call.request_id)
    t_model = time.perf_counter()
    try:
        result = _invoke(prep)
    except InvokeError as exc:
        if prep.fallback is None or exc.code not in CANARY_ABSENT:
            count_canary(prep, exc)
            raise invoke_failure(adapter, exc, call.request_id) from None
        prep = prep.fallback  # the canary's component is gone or not made yet: stable answers
        hit, cache_status = lookup(prep)
        if hit is not None:
            return answer(adapter, prep.version, hit, "hit", t0, 0.0, call.request_id)
        try:
            result = _invoke(prep)
        except InvokeError as again:
            raise invoke_failure(adapter, again, call.request_id) from None
    count_canary(prep, None)
    model_ms = (time.perf_counter() - t_model) * 1000
    metrics.add_metric(name="ModelLatency", unit=MetricUnit.Milliseconds, value=model_ms)
    remember(prep, cache_status, result)
    return answer(adapter, prep.version, result, cache_status, t0, model_ms, call.request_id)


#: What SageMaker answers for an inference component that is not on the endpoint: a release
#: that adds or removes a canary deploys its component and the router's table apart, so for a
#: moment the router may name a canary component that is not (or no longer) there.
CANARY_ABSENT = errors.CANARY_ABSENT
#: Who a mirror is, to the engine's fair queue: one sender for every mirror, started after every
#: caller's request and never in a caller's place (``contracts.fairness.MIRROR``).
SHADOW_SENDER = MIRROR


def _invoke(prep: Prepared) -> dict[str, Any]:
    s = deps().settings
    with tracer.provider.in_subsegment("invoke_endpoint") as sub:
        sub.put_annotation(key="adapter", value=prep.adapter)
        return complete_answer(
            invoke(
                deps().client,
                s.routing_table.endpoint,
                prep.component,
                prep.payload,
                deadline_s=s.invoke_deadline_s,
                attributes=custom_attributes(SHADOW_SENDER if prep.shadow else prep.who)
                if prep.who
                else None,
            )
        )


#: The errors that are a canary version's own fault: its container failed (a 5xx it answered,
#: an answer that is not one, a stream it broke). Not SageMaker's own failures or throttling,
#: a container busy or not ready (503: capacity the stable version shares), nor a deadline
#: (504: a tenant's long generation times out on either version), nor any 4xx (the request's).
CANARY_FAULTS = errors.CANARY_FAULTS


def canary_fault(exc: InvokeError | None) -> bool:
    return (
        exc is not None and exc.code in CANARY_FAULTS and exc.status >= 500 and (exc.status != 503)
    )


def count_canary(prep: Prepared, exc: InvokeError | None, count: Count = _buffered) -> None:
    """Count a canary's answer (``exc``: how it failed, None for an answer) toward its
    rollback; a failure counts when it is the version's own (``CANARY_FAULTS``). The request
    whose count switches the canary off counts ``CanaryRollback`` and logs why (the alarm on
    that metric tells the adapter's owner)."""
    if prep.canary is None:
        return
    outcome = deps().canaries.record(  # type: ignore[union-attr]
        prep.adapter, prep.canary, canary_fault(exc), caller=prep.voice
    )
    if not outcome.rolled_back:
        return
    count("CanaryRollback")
    logger.error(
        "canary rolled back: every request now goes to the stable version",
        extra={
            "adapter": prep.adapter,
            "canary_version": prep.canary.version,
            "reason": outcome.reason,
            "max_error_rate": prep.canary.max_error_rate,
            "min_callers": prep.canary.min_callers,
        },
    )
    record(prep.adapter, prep.canary, outcome.reason, "rollback")


#: Why a generation ended, when it ended as an answer (the runtime's words, and TGI's).
ANSWERED = frozenset({"stop", "length", "stop_sequence", "eos_token"})
#: When a client may try again after a throttle or a component that is not ready, in seconds.


def complete_answer(result: Any) -> dict[str, Any]:
    """The container's answer when it is one: an object with its text and a finish reason of
    stop, length or stop sequence. Anything else (``{}``, an error object, an array) is a 502,
    never an answer and never cached."""
    if not isinstance(result, dict):
        raise InvokeError(
            502,
            "the model returned an answer that is not a JSON object",
            "BadModelOutput",
            type(result).__name__,
        )
    if "error" in result:
        status = result.get("status")
        raise container_error(
            status if isinstance(status, int) else 502, str(result["error"])[:500]
        )
    if (
        not isinstance(result.get("generated_text"), str)
        or result.get("finish_reason") not in ANSWERED
    ):
        raise InvokeError(
            502,
            "the model returned an incomplete answer (no text or no finish reason)",
            "BadModelOutput",
            str(sorted(result))[:200],
        )
    return contract_fields(result)


def contract_fields(result: dict[str, Any]) -> dict[str, Any]:
    """Only the fields the container contract names, each of its type: what a caller sees and
    what the cache keeps for 72 hours. A container (or a later runtime) that puts more in an
    answer (an S3 URI, a host name, debug text) reaches no caller, and a field of the wrong type
    (a ``usage`` of ``null``) cannot break a door that reads it."""
    served = result.get("adapter")
    return {
        "generated_text": result.get("generated_text"),
        "finish_reason": result.get("finish_reason"),
        "adapter": served if isinstance(served, str) and len(served) <= 128 else None,
        "artifact": clean_artifact(result.get("artifact")),
        "usage": clean_usage(result.get("usage")),
        "timings_ms": _numbers(result.get("timings_ms")),
    }


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def clean_usage(usage: Any) -> dict[str, int]:
    """``usage`` as two non-negative integers (0 where the container gave none)."""
    u = usage if isinstance(usage, dict) else {}
    return {
        "input_tokens": _count(u.get("input_tokens")),
        "output_tokens": _count(u.get("output_tokens")),
    }


_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def clean_artifact(artifact: Any) -> dict[str, Any] | None:
    """The served artifact's identity: its manifest name and version, its weights' sha256, and
    ``merged`` for a merged model; None when the container names none (the base model)."""
    if not isinstance(artifact, dict):
        return None
    out: dict[str, Any] = {}
    for key, limit in (("name", 128), ("version", 64)):
        value = artifact.get(key)
        out[key] = value if isinstance(value, str) and len(value) <= limit else None
    sha = artifact.get("sha256")
    out["sha256"] = sha if isinstance(sha, str) and _SHA256.match(sha) else None
    if artifact.get("merged") is True:
        out["merged"] = True
    return out


def _numbers(timings: Any) -> dict[str, float] | None:
    """The engine's timings: at most 16 short names with finite numbers."""
    if not isinstance(timings, dict):
        return None
    out = {}
    for k, v in list(timings.items())[:16]:
        number = isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
        if isinstance(k, str) and len(k) <= 32 and number:
            out[k] = v
    return out


def invoke_failure(
    adapter: str, exc: InvokeError, request_id: str | None, count: Count = _buffered
) -> RouterError:
    """A failed invocation as the client sees it: the fixed message, and ``Retry-After`` where
    a retry can succeed. What SageMaker or the container said is logged here, under the request
    id, and goes nowhere else."""
    count(f"Error{exc.status}")
    logger.warning(
        "invoke failed",
        extra={
            "adapter": adapter,
            "code": exc.code,
            "status": exc.status,
            "detail": exc.detail,
            "request_id": request_id,
        },
    )
    return RouterError(exc.status, exc.message, code=exc.code)


SHOULD_RETRY = errors.SHOULD_RETRY


def retry_headers(exc: InvokeError) -> dict[str, str]:
    """Whether and when a client may try again, as the error catalogue says for the code and
    status: ``Retry-After`` where a retry can succeed (throttling, busy, not ready),
    ``x-should-retry: false`` where the generation may have run (a timeout, a container error,
    a lost connection), so a client's automatic retry never runs it twice."""
    return errors.headers(exc.code, exc.status)


def served_as(prep: Prepared, artifact: Any) -> bool:
    """Whether ``artifact`` (an answer's) is the one ``prep`` routes to: the route's name and
    version, and its weights' sha256 where the catalog pins them."""
    if not isinstance(artifact, dict):
        return False
    same = (artifact.get("name"), artifact.get("version")) == (prep.adapter, prep.version)
    if same and prep.weights_sha256 is not None:
        same = artifact.get("sha256") == prep.weights_sha256
    return same


def _served_as_routed(prep: Prepared, result: dict[str, Any], count: Count) -> bool:
    """Whether the artifact the container reports is the one the key names: the route's name
    and version, and its weights' sha256 where the catalog pins them. During a rollout a
    container may still serve the previous version, and a component may answer from the base
    model (``artifact: null``); neither answer may be cached under the adapter's key."""
    artifact = result.get("artifact")
    if served_as(prep, artifact):
        return True
    count("ArtifactMismatch")
    logger.warning(
        "served artifact differs from the route; answer not cached",
        extra={
            "adapter": prep.adapter,
            "routed": prep.version,
            "weights": prep.weights_sha256,
            "served": artifact,
        },
    )
    return False


def answer(
    adapter: str,
    version: str,
    result: dict[str, Any],
    cache: str,
    t0: float,
    model_ms: float,
    request_id: str | None,
) -> dict[str, Any]:
    """The native answer body."""
    total = (time.perf_counter() - t0) * 1000
    return {
        "output": result.get("generated_text"),
        "adapter": adapter,
        "version": version,
        "cache": cache,
        "request_id": request_id,
        "finish_reason": result.get("finish_reason"),
        # The adapter identifier the container reports serving (SageMaker passes the adapter
        # component's name): a client or smoke check can see which component answered.
        "served_by": result.get("adapter") if isinstance(result.get("adapter"), str) else None,
        # The artifact the container reports serving (manifest name, version, weights sha256).
        "artifact": clean_artifact(result.get("artifact")),
        "usage": clean_usage(result.get("usage")),
        "timings_ms": {
            "router": round(total - model_ms, 3),
            "model": round(model_ms, 3),
            "total": round(total, 3),
            "engine": _numbers(result.get("timings_ms")),
        },
    }
