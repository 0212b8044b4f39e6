"""A local API Gateway (REST API, streaming Lambda proxy integration) in front of the router,
and the playground's backend.

The router runs as the deployed function runs it, in process: the function's web app
(``lambda_proxy.web``) receives each request the way the Lambda Web Adapter hands it over, with
the request context API Gateway would send (resource, the caller's identity) in the
``x-amzn-request-context`` header, replacing any the client sent. Streams flow through as they
are produced, and a client that goes away closes the stream all the way to the model server.
The router's boto3 client talks to the local SageMaker endpoint through ``endpoint_url``; its
cache is the Redis on localhost when one answers, otherwise an in-process cache with the same
interface.

Identity stands in for SigV4: every request is made as the assumed role
``arn:aws:sts::000000000000:assumed-role/TENANT/local`` (tenant ``demo`` unless the request sends
``X-Local-Tenant``). That header exists only here; the deployed API takes the caller from the
signature.

Buffered requests run as Lambda runs them: each in an execution environment serving one
request at a time, several environments at once (``local.environments``, with Redis; without
it the gateway is one environment and buffered requests pass the handler one at a time).
"""

from __future__ import annotations

import asyncio
import collections
import functools
import json
import os
import re
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, JSONResponse, Response

from contracts.api import route_of
from local.router import configure_router, redis_client, training_state

PLAYGROUND = Path(__file__).with_name("playground")
LOCAL_ACCOUNT = "000000000000"
STAGE = "local"
FUNCTION_ARN = f"arn:aws:lambda:us-east-1:{LOCAL_ACCOUNT}:function:lora-local-router:{STAGE}"
TENANT_HEADER = "x-local-tenant"
_TENANT_RE = re.compile(r"^[A-Za-z0-9+=,.@_-]{1,64}$")


class InProcessCache:
    """The two Redis calls the router's cache makes, for machines with no Redis.

    A dict with expiry; written by hand because only ``get`` and ``set(ex=)`` are needed and a
    Redis emulator package would be a dependency for two methods.
    """

    def __init__(self, max_entries: int = 10_000) -> None:
        self._data: collections.OrderedDict[str, tuple[float, bytes]] = collections.OrderedDict()
        self._lock = threading.Lock()
        self.max_entries = max_entries

    def get(self, key: str) -> bytes | None:
        with self._lock:
            item = self._data.get(key)
            if item is None:
                return None
            expires, value = item
            if expires < time.monotonic():
                del self._data[key]
                return None
            self._data.move_to_end(key)
            return value

    def set(self, key: str, value: str | bytes, ex: int) -> bool:
        data = value.encode() if isinstance(value, str) else value
        with self._lock:
            self._data[key] = (time.monotonic() + ex, data)
            self._data.move_to_end(key)
            while len(self._data) > self.max_entries:
                self._data.popitem(last=False)
        return True

    def scan_iter(self, match: str):
        prefix = match.rstrip("*")
        with self._lock:
            return [k for k in self._data if k.startswith(prefix)]

    def delete(self, *keys: str) -> int:
        with self._lock:
            return sum(self._data.pop(k, None) is not None for k in keys)


def request_context(method: str, path: str, resource: str, tenant: str) -> dict[str, Any]:
    """The ``requestContext`` API Gateway sends for a SigV4-signed call by role ``tenant``."""
    arn = f"arn:aws:sts::{LOCAL_ACCOUNT}:assumed-role/{tenant}/local"
    return {
        "resourcePath": resource,
        "httpMethod": method,
        "path": f"/{STAGE}{path}",
        "stage": STAGE,
        "requestId": str(uuid.uuid4()),
        "accountId": LOCAL_ACCOUNT,
        "apiId": "local",
        "protocol": "HTTP/1.1",
        "requestTimeEpoch": int(time.time() * 1000),
        "identity": {
            "userArn": arn,
            "caller": f"AROALOCAL:{tenant}",
            "accountId": LOCAL_ACCOUNT,
            "user": f"AROALOCAL:{tenant}",
            "sourceIp": "127.0.0.1",
        },
    }


class LocalGateway:
    def __init__(
        self,
        *,
        routing_table: Path,
        endpoint_url: str,
        runtime_url: str,
        redis_url: str | None,
        catalog_file: Path | None = None,
        tenant: str = "demo",
        region: str = "us-east-1",
        state_dir: Path | None = None,
        environments: int = 1,
    ) -> None:
        self.routing_table = routing_table
        self.state_dir = state_dir
        if state_dir is not None:
            # The router's usage records, kept for `python -m local usage` (local.usage).
            from lambda_proxy import usage as router_usage
            from local.usage import keeper

            router_usage.SINKS.append(keeper(state_dir))
        self.catalog_file = catalog_file
        self.endpoint_url = endpoint_url
        self.runtime_url = runtime_url.rstrip("/")
        self.tenant = tenant
        self.region = region
        self.redis = redis_client(redis_url)
        self.redis_url = redis_url if self.redis is not None else None
        self.cache_mode = f"redis ({redis_url})" if self.redis is not None else "in-process"
        self.store = self.redis if self.redis is not None else InProcessCache()
        self.lock = threading.Lock()  # the trace buffer
        self.trace: collections.deque[dict[str, Any]] = collections.deque(maxlen=500)
        self._seq = 0
        # The router signs its calls; the local endpoint does not check signatures.
        os.environ.setdefault("AWS_ACCESS_KEY_ID", "local")
        os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "local")
        os.environ.setdefault("POWERTOOLS_TRACE_DISABLED", "true")
        os.environ.setdefault("POWERTOOLS_SERVICE_NAME", "lora-router")
        #: Buffered requests in parallel, each in an execution environment of its own
        #: (local.environments); they share state only through Redis, as on Lambda.
        self.environments = None
        self.reload()
        if environments > 1 and self.redis is not None:
            from lambda_proxy import web
            from local.environments import Environments

            self.environments = Environments(self._setting(), environments)
            web.BUFFERED = self.environments

    def reload(self) -> dict[str, Any]:
        """Read the routing table again (after the catalog changed) and rebuild the router."""
        from lambda_proxy.web import HANDLER_LOCK

        with HANDLER_LOCK:
            self.table, self.client = configure_router(
                self.store,
                routing_table=self.routing_table,
                endpoint_url=self.endpoint_url,
                region=self.region,
                availability=self.training_state,
            )
        if self.environments is not None:
            self.environments.restart(self._setting())
        return {"adapters": len(self.table.adapters)}

    def _setting(self):
        from local.environments import Setting

        assert self.redis_url is not None
        return Setting(
            routing_table=str(self.routing_table),
            endpoint_url=self.endpoint_url,
            region=self.region,
            redis_url=self.redis_url,
            state_dir=str(self.state_dir) if self.state_dir is not None else None,
            environ=tuple(sorted(os.environ.items())),
        )

    def training_state(self, adapter: str) -> tuple[str, str] | None:
        return training_state(self.state_dir, adapter)

    def close(self) -> None:
        """Stop the environments; buffered requests run in this process again."""
        if self.environments is not None:
            from lambda_proxy import web

            self.environments.close()
            self.environments = None
            web.BUFFERED = web.in_process

    def flush(self, adapters: list[str]) -> int:
        """Drop cached answers of adapters whose artifact changed under the same version.

        Published adapters get a new version for new weights, which changes the cache key; the
        local platform retrains in place, so it clears those adapters' keys itself.
        """
        from lambda_proxy.cache import adapter_prefix

        n = 0
        for name in adapters:
            keys = list(self.store.scan_iter(match=adapter_prefix(name) + "*"))
            if keys:
                n += self.store.delete(*keys)
        return n

    def event(self, name: str, **fields: Any) -> None:
        with self.lock:
            self._seq += 1
            self.trace.append(
                {
                    "seq": self._seq,
                    "ts": round(time.time(), 3),
                    "event": name,
                    "origin": "router",
                    **fields,
                }
            )

    def invoke_base(self, tenant: str, data: Any) -> dict[str, Any]:
        """The base model's answer to the same request, through the same SageMaker client,
        after the router's checks for ``tenant`` (``RouterError`` when they refuse)."""
        from lambda_proxy.auth import caller_from_event
        from lambda_proxy.sagemaker import invoke
        from lambda_proxy.service import prepare_base
        from lambda_proxy.web import HANDLER_LOCK

        context = request_context("POST", "/local/base/generate", "/local/base/generate", tenant)
        caller = caller_from_event({"requestContext": context})
        assert caller is not None  # a context this gateway built names its caller
        with HANDLER_LOCK:  # the handler's metrics buffer is per process
            payload = prepare_base(caller, data)
        t0 = time.perf_counter()
        result = invoke(self.client, self.table.endpoint, self.table.base_component, payload)
        return {
            "output": result.get("generated_text"),
            "usage": result.get("usage"),
            "finish_reason": result.get("finish_reason"),
            "timings_ms": {
                "total": round((time.perf_counter() - t0) * 1000, 3),
                "engine": result.get("timings_ms"),
            },
        }


def _catalog_view(gateway: LocalGateway) -> dict[str, Any]:
    """What the playground shows of each adapter: its task, LoRA settings and sample queries."""
    from config import TASK_PROFILES, load_catalog

    entries = {}
    if gateway.catalog_file is not None:
        entries = {a.name: a for a in load_catalog(gateway.catalog_file).adapters}
    adapters, tasks = [], {}
    for name, route in sorted(gateway.table.adapters.items()):
        entry = entries.get(name)
        profile = entry.profile() if entry is not None else TASK_PROFILES.get(route.task)
        if profile is None:  # a task of the entry's own, whose entry this gateway cannot read
            continue
        adapters.append(
            {
                "name": name,
                "version": route.version,
                "task": route.task,
                "description": route.description,
                "component": route.component,
                "rank": profile.rank,
                "alpha": profile.alpha,
                "targets": profile.targets,
                "dropout": profile.dropout,
                "canary": None
                if route.canary is None
                else {
                    "version": route.canary.version,
                    "mode": "shadow" if route.canary.shadow is not None else "split",
                },
            }
        )
        if route.task not in tasks:
            tasks[route.task] = {
                "instruction": profile.instruction,
                "samples": _samples(route.task, entry),
            }
    return {"adapters": adapters, "tasks": tasks, "base": gateway.table.base_component}


def _samples(task: str, entry: Any, n: int = 5) -> list[str]:
    """A few inputs never seen in training: the task's natural inputs (typed the way users
    type, ``training.datasets.natural``), then the test part of the entry's own dataset when it
    names a file in the repository, else of its generator."""
    source = entry.dataset_file if entry is not None else None
    if source is not None and "://" not in source:
        return _typed(task, source) + _file_samples(source, entry.dataset_seed, task, n)
    return _generated_samples(task, n)


def _typed(task: str, dataset: str | None = None) -> list[str]:
    try:
        from training.datasets.natural import natural
    except ImportError:  # a gateway without the training extra shows no samples
        return []
    return [r.raw for r in natural(task, dataset)]


@functools.cache
def _generated_samples(task: str, n: int) -> list[str]:
    """(Generated once per process: the page asks often.)"""
    try:
        from training import datasets
    except ImportError:  # a gateway without the training extra shows no samples
        return []
    typed = _typed(task)
    try:
        split = datasets.load(task)
    except KeyError:
        return typed[:n]
    return (typed + [r.raw for r in split.test])[: max(n, len(typed) + 2)]


@functools.cache
def _file_samples(source: str, seed: int, task: str, n: int) -> list[str]:
    from config.dataset_files import DatasetFileError, read_rows, resolve_path
    from config.loader import CATALOG_PATH, REPO_ROOT

    try:
        from training.datasets.user import split_rows

        rows = read_rows(resolve_path(source, CATALOG_PATH.parent, REPO_ROOT))
        return [r.raw for r in split_rows(task, rows, seed).test[:n]]
    except (ImportError, DatasetFileError, ValueError):
        return []


def canaries(gateway: LocalGateway) -> dict[str, Any]:
    """Each routed canary's state (``lambda_proxy.shadow.state``), beside its stable version:
    the playground's canary panel. The state lives in Redis, shared by every execution
    environment; the in-process cache has none to read."""
    from lambda_proxy.canary import Canaries
    from lambda_proxy.shadow import state

    routed = {n: r for n, r in gateway.table.adapters.items() if r.canary is not None}
    if gateway.redis is None:
        return {
            "adapters": {},
            "note": "canary state is kept in Redis; none answered at start-up",
        }
    return {
        "adapters": {
            name: {"stable_version": r.version, **state(gateway.redis, Canaries.base(name, c), c)}
            for name, r in routed.items()
            if (c := r.canary) is not None
        }
    }


def availability(gateway: LocalGateway, registered: list[dict[str, Any]]) -> dict[str, Any]:
    """Per catalog adapter: online (its component is registered in the container), or what the
    background trainer says of it (queued, training with its step, evaluating, not
    publishable, failed)."""
    from local.trainer import read_status

    online = {a.get("name") for a in registered}
    training = read_status(gateway.state_dir).get("adapters", {}) if gateway.state_dir else {}
    out: dict[str, Any] = {}
    for name, route in gateway.table.adapters.items():
        if route.component in online:
            out[name] = {"state": "online"}
            if (training.get(name) or {}).get("publishable") is False:
                out[name]["publishable"] = False  # served with --serve-unpublishable
        else:
            out[name] = training.get(name) or {"state": "offline"}
    return out


def _json_view(app: FastAPI, path: str, view: Any, gateway: LocalGateway) -> None:
    """``GET path``: what ``view(gateway)`` returns, computed off the event loop."""

    async def route() -> Response:
        return JSONResponse(await asyncio.to_thread(view, gateway))

    app.add_api_route(path, route, methods=["GET"], name=path)


def create_app(gateway: LocalGateway) -> ApiGateway:
    app = FastAPI(title="local API gateway", docs_url=None, redoc_url=None)
    runtime = httpx.AsyncClient(base_url=gateway.runtime_url, timeout=10.0)

    @app.get("/")
    async def index() -> Response:
        return FileResponse(PLAYGROUND / "index.html")

    @app.get("/playground/{name}")
    async def static(name: str) -> Response:
        path = PLAYGROUND / name
        if name not in {p.name for p in PLAYGROUND.iterdir()}:
            return JSONResponse({"error": "not found"}, status_code=404)
        return FileResponse(path)

    @app.get("/docs/{path:path}")
    async def docs(path: str) -> Response:
        """The docs site (``local.docs``: built on the first request, rebuilt when stale), by
        its own paths (``router/`` is ``router/index.html``); a path that leaves the site, or a
        site that cannot be built, is a 404 that says why."""
        from local import docs as site

        why = await asyncio.to_thread(site.ensure_site, site.DOCS_SITE)
        root = site.DOCS_SITE.resolve()
        target = (root / path).resolve()
        if target.is_dir():
            target = target / "index.html"
        if why is not None or not target.is_relative_to(root) or not target.is_file():
            reason = why or "no such page"
            return JSONResponse(
                {"error": f"no docs page {path!r} ({reason}); `make docs` serves the site"},
                status_code=404,
            )
        return FileResponse(target)

    for path, view in (("/local/catalog", _catalog_view), ("/local/canaries", canaries)):
        _json_view(app, path, view, gateway)

    @app.post("/local/base/generate")
    async def base_generate(request: Request) -> Response:
        """The base model's answer beside an adapter's, through the router's own checks: the
        caller's identity (``X-Local-Tenant``), the request schema with the environment's
        caps, and the tenant's quota."""
        from lambda_proxy.sagemaker import InvokeError
        from lambda_proxy.service import RouterError

        tenant = request.headers.get(TENANT_HEADER, gateway.tenant)
        if not _TENANT_RE.match(tenant):
            return JSONResponse({"error": "invalid X-Local-Tenant"}, status_code=400)
        try:
            data = json.loads(await request.body() or b"null")
        except (ValueError, RecursionError):
            return JSONResponse({"error": "body is not JSON"}, status_code=400)
        try:
            return JSONResponse(await asyncio.to_thread(gateway.invoke_base, tenant, data))
        except InvokeError as exc:
            return JSONResponse({"error": exc.message, "code": exc.code}, status_code=exc.status)
        except RouterError as f:
            body = {"error": f.message, "status": f.status, "code": f.code, "details": f.details}
            return JSONResponse(body, status_code=f.status, headers=f.headers)

    @app.get("/local/usage")
    async def usage_rows() -> Response:
        """Per tenant and adapter, what ``python -m local usage`` prints: the playground's usage
        panel."""
        from dataclasses import asdict

        from contracts.usage import aggregate
        from local.usage import read

        records = await asyncio.to_thread(read, gateway.state_dir) if gateway.state_dir else []
        return JSONResponse({"rows": [asdict(r) for r in aggregate(records)]})

    @app.get("/local/status")
    async def status() -> Response:
        try:
            adapters = (await runtime.get("/adapters")).json()
        except (httpx.HTTPError, ValueError) as exc:
            return JSONResponse({"runtime": f"unreachable: {exc}"}, status_code=503)
        return JSONResponse(
            {
                "base": adapters.get("base"),
                "tiers": adapters.get("tiers"),
                "memory": adapters.get("memory"),
                "max_loras": adapters.get("max_loras"),
                "max_cpu_loras": adapters.get("max_cpu_loras"),
                "adapters": adapters.get("adapters"),
                "cache": gateway.cache_mode,
                "endpoint": gateway.table.endpoint,
                "availability": availability(gateway, adapters.get("adapters") or []),
            }
        )

    @app.get("/local/trace")
    async def trace(since_runtime: int = 0, since_router: int = 0) -> Response:
        try:
            events = (await runtime.get("/trace", params={"since": since_runtime})).json()
        except (httpx.HTTPError, ValueError):
            events = {"events": []}
        with gateway.lock:
            router = [e for e in gateway.trace if e["seq"] > since_router]
        return JSONResponse({"runtime": events.get("events", []), "router": router})

    @app.post("/_local/reload")
    async def reload(request: Request) -> Response:
        raw = await request.body()
        flush = (json.loads(raw) or {}).get("flush", []) if raw.strip() else []
        result = await asyncio.to_thread(gateway.reload)
        result["flushed"] = await asyncio.to_thread(gateway.flush, flush)
        return JSONResponse(result)

    @app.on_event("shutdown")
    async def _close() -> None:
        await runtime.aclose()
        gateway.close()

    return ApiGateway(gateway, app)


class ApiGateway:
    """The API's resources in front of the router's web app; everything else (the playground,
    ``/local/...``) goes to ``rest``.

    A request for a resource the API does not declare gets API Gateway's own answer (403
    "Missing Authentication Token"). One it declares reaches the web app with the request
    context a SigV4 call by ``X-Local-Tenant`` (default ``demo``) would carry, the way the
    Lambda Web Adapter passes it.
    """

    def __init__(self, gateway: LocalGateway, rest: Any) -> None:
        from lambda_proxy.web import app as router

        self.gateway, self.rest, self.router = gateway, rest, router

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        path = scope.get("path", "")
        if scope["type"] == "http" and (refusal := _foreign_request(scope)) is not None:
            await refusal(scope, receive, send)
            return
        if scope["type"] != "http" or not (path.startswith("/v1/") or path == "/health"):
            await self.rest(scope, receive, send)
            return
        method = scope["method"]
        match = route_of(method, path)  # the deployed API's resources (contracts.api)
        if match is None:
            refusal = JSONResponse({"message": "Missing Authentication Token"}, status_code=403)
            await refusal(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        tenant = headers.get(TENANT_HEADER, self.gateway.tenant)
        if not _TENANT_RE.match(tenant):
            refusal = JSONResponse({"message": "invalid X-Local-Tenant"}, status_code=400)
            await refusal(scope, receive, send)
            return
        route, params = match
        context = request_context(method, path, route.path, tenant)
        dropped = {
            "authorization",
            TENANT_HEADER,
            "x-amzn-request-context",
            "x-amzn-lambda-context",
        }
        forwarded = [
            (k, v) for k, v in scope["headers"] if k.decode("latin-1").lower() not in dropped
        ]
        lambda_context = {"request_id": context["requestId"], "invoked_function_arn": FUNCTION_ARN}
        forwarded += [
            (b"x-amzn-request-context", json.dumps(context).encode()),
            (b"x-amzn-lambda-context", json.dumps(lambda_context).encode()),
        ]
        t0 = time.perf_counter()
        observed: dict[str, Any] = {"status": None, "body": b"", "stream": False}

        async def watch(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                observed["status"] = message["status"]
                head = dict(message.get("headers", []))
                observed["stream"] = head.get(b"content-type", b"").startswith(b"text/event")
                rid = (b"x-amzn-requestid", context["requestId"].encode())
                message["headers"] = [*message.get("headers", []), rid]
            elif message["type"] == "http.response.body" and len(observed["body"]) < 65536:
                observed["body"] += message.get("body", b"")
            await send(message)

        await self.router({**scope, "headers": forwarded}, receive, watch)
        if route.name == "generate":
            self.gateway.event(
                "router_request",
                adapter=params["adapter"],
                status=observed["status"],
                cache=_cache_status(observed),
                latency_ms=round((time.perf_counter() - t0) * 1000, 1),
            )


#: The names a request to this loopback gateway may carry in ``Host``.
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "[::1]"})


def _foreign_request(scope: dict[str, Any]) -> JSONResponse | None:
    """A request another web page could make: the gateway answers on loopback with an identity
    of its own (no SigV4), so any page the developer opens could call it. A page that rebinds
    its own name to 127.0.0.1 reaches it with its own name in ``Host``, so every request must
    name a loopback host. A browser sends a cross-origin ``text/plain`` or form post without a
    preflight; it cannot send a JSON one without CORS approval, which this gateway never gives.
    So a write must be JSON, and one that names a foreign origin (``Origin``, or
    ``Sec-Fetch-Site``) is refused."""
    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
    host = headers.get("host", "")
    if host.rsplit(":", 1)[0] not in LOOPBACK_HOSTS and host not in LOOPBACK_HOSTS:
        return JSONResponse(
            {"error": f"this gateway answers only on loopback, not {host[:64]!r}", "status": 403},
            status_code=403,
        )
    if scope["method"] not in ("POST", "PUT", "PATCH", "DELETE"):
        return None
    origin = headers.get("origin")
    if headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none") or (
        origin is not None and origin.split("://", 1)[-1] != host
    ):
        return JSONResponse(
            {"error": "cross-origin requests are refused", "status": 403}, status_code=403
        )
    media = headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if scope["method"] != "DELETE" and media != "application/json":
        return JSONResponse(
            {"error": "the body must be sent as application/json", "status": 415}, status_code=415
        )
    return None


def _cache_status(observed: dict[str, Any]) -> str | None:
    """The router's cache status from its answer: the JSON body, or a stream's done event."""
    body = observed["body"]
    if observed["stream"]:
        done = body.rsplit(b"event: done\ndata: ", 1)
        body = done[1].split(b"\n", 1)[0] if len(done) == 2 else b""
    try:
        answer = json.loads(body or b"{}")
    except ValueError:
        return None
    return answer.get("cache") if isinstance(answer, dict) else None
