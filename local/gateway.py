"""A local API Gateway (REST API, Lambda proxy integration) in front of the router, and the
playground's backend.

The router Lambda runs unchanged, in process: each HTTP request becomes the proxy event API
Gateway would send (resource, path parameters, request context with the caller's identity) and
``lambda_proxy.handler.handler`` answers it. Its boto3 client talks to the local SageMaker
endpoint through ``endpoint_url``; its cache is the Redis on localhost when one answers,
otherwise an in-process cache with the same interface.

Identity stands in for SigV4: every request is made as the assumed role
``arn:aws:sts::000000000000:assumed-role/TENANT/local`` (tenant ``demo`` unless the request sends
``X-Local-Tenant``). That header exists only here; the deployed API takes the caller from the
signature.

One router instance serves one request at a time, as one warm Lambda execution environment
does (Powertools' logger and metrics are per-process state).
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, JSONResponse, Response

PLAYGROUND = Path(__file__).with_name("playground")
LOCAL_ACCOUNT = "000000000000"
STAGE = "local"
TENANT_HEADER = "x-local-tenant"
_TENANT_RE = re.compile(r"^[A-Za-z0-9+=,.@_-]{1,64}$")

#: The deployed API's resources (infra/router.py), as (method, path pattern, resource).
RESOURCES = (
    ("GET", re.compile(r"^/health$"), "/health"),
    ("GET", re.compile(r"^/v1/adapters$"), "/v1/adapters"),
    ("POST", re.compile(r"^/v1/adapters/(?P<adapter>[^/]+)/generate$"),
     "/v1/adapters/{adapter}/generate"),
    # The OpenAI-compatible routes, as infra/router.py declares them.
    ("POST", re.compile(r"^/v1/chat/completions$"), "/v1/chat/completions"),
    ("POST", re.compile(r"^/v1/completions$"), "/v1/completions"),
    ("GET", re.compile(r"^/v1/models$"), "/v1/models"),
)  # fmt: skip


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


def redis_client(url: str | None):
    """A Redis client when ``url`` answers PING, else None."""
    if not url:
        return None
    import redis

    client = redis.Redis.from_url(url, socket_timeout=0.5, socket_connect_timeout=0.5)
    try:
        client.ping()
    except redis.RedisError:
        return None
    return client


@dataclass
class LambdaContext:
    """The attributes of Lambda's context object that Powertools reads."""

    aws_request_id: str
    function_name: str = "lora-local-router"
    function_version: str = "$LATEST"
    memory_limit_in_mb: int = 512
    invoked_function_arn: str = (
        f"arn:aws:lambda:us-east-1:{LOCAL_ACCOUNT}:function:lora-local-router:{STAGE}"
    )

    def get_remaining_time_in_millis(self) -> int:
        return 30_000


def proxy_event(method: str, path: str, resource: str, params: dict[str, str],
                headers: dict[str, str], query: dict[str, str], body: str | None,
                tenant: str) -> dict[str, Any]:  # fmt: skip
    """The event API Gateway's Lambda proxy integration sends for this request."""
    request_id = str(uuid.uuid4())
    arn = f"arn:aws:sts::{LOCAL_ACCOUNT}:assumed-role/{tenant}/local"
    return {
        "resource": resource,
        "path": path,
        "httpMethod": method,
        "headers": headers,
        "multiValueHeaders": {k: [v] for k, v in headers.items()},
        "queryStringParameters": query or None,
        "multiValueQueryStringParameters": {k: [v] for k, v in query.items()} or None,
        "pathParameters": params or None,
        "stageVariables": None,
        "requestContext": {
            "resourcePath": resource,
            "httpMethod": method,
            "path": f"/{STAGE}{path}",
            "stage": STAGE,
            "requestId": request_id,
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
        },
        "body": body,
        "isBase64Encoded": False,
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
    ) -> None:
        self.routing_table = routing_table
        self.catalog_file = catalog_file
        self.endpoint_url = endpoint_url
        self.runtime_url = runtime_url.rstrip("/")
        self.tenant = tenant
        self.region = region
        self.redis = redis_client(redis_url)
        self.cache_mode = f"redis ({redis_url})" if self.redis is not None else "in-process"
        self.store = self.redis if self.redis is not None else InProcessCache()
        self.lock = threading.Lock()  # the trace buffer
        self.router_lock = threading.Lock()  # one execution environment: one request at a time
        self.trace: collections.deque[dict[str, Any]] = collections.deque(maxlen=500)
        self._seq = 0
        # The router signs its calls; the local endpoint does not check signatures.
        os.environ.setdefault("AWS_ACCESS_KEY_ID", "local")
        os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "local")
        os.environ.setdefault("POWERTOOLS_TRACE_DISABLED", "true")
        os.environ.setdefault("POWERTOOLS_SERVICE_NAME", "lora-router")
        self.reload()

    def reload(self) -> dict[str, Any]:
        """Read the routing table again (after the catalog changed) and rebuild the router."""
        from lambda_proxy.cache import ResponseCache
        from lambda_proxy.handler import Dependencies, configure
        from lambda_proxy.sagemaker import make_client
        from lambda_proxy.settings import settings

        # The function's own configuration path: the same variables infra sets on the Lambda
        # (limits come from the environment file through the platform's process environment).
        os.environ["ROUTING_TABLE_FILE"] = str(self.routing_table)
        os.environ["SAGEMAKER_ENDPOINT_URL"] = self.endpoint_url
        os.environ["AWS_REGION"] = self.region
        settings.cache_clear()
        s = settings()
        table = s.routing_table
        with self.router_lock:
            self.table = table
            self.client = make_client(s.sagemaker_endpoint_url, s.region, s.invoke_deadline_s)
            configure(Dependencies(s, ResponseCache(self.store, s.cache_ttl_s), self.client))
        return {"adapters": len(table.get("adapters", {}))}

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
            self.trace.append({"seq": self._seq, "ts": round(time.time(), 3), "event": name,
                               "origin": "router", **fields})  # fmt: skip

    def call_router(self, event: dict[str, Any]) -> dict[str, Any]:
        from lambda_proxy.handler import handler

        with self.router_lock:
            return handler(event, LambdaContext(event["requestContext"]["requestId"]))

    def invoke_base(self, payload: dict[str, Any]) -> dict[str, Any]:
        """The base model's answer to the same request, through the same SageMaker client."""
        from lambda_proxy.sagemaker import invoke

        t0 = time.perf_counter()
        result = invoke(self.client, self.table["endpoint"], self.table["base_component"], payload)
        return {"output": result.get("generated_text"), "usage": result.get("usage"),
                "finish_reason": result.get("finish_reason"),
                "timings_ms": {"total": round((time.perf_counter() - t0) * 1000, 3),
                               "engine": result.get("timings_ms")}}  # fmt: skip


def _catalog_view(gateway: LocalGateway) -> dict[str, Any]:
    """What the playground shows of each adapter: its task, LoRA settings and sample queries."""
    from config import TASK_PROFILES, load_catalog

    entries = {}
    if gateway.catalog_file is not None:
        entries = {a.name: a for a in load_catalog(gateway.catalog_file).adapters}
    adapters, tasks = [], {}
    for name, route in sorted(gateway.table.get("adapters", {}).items()):
        entry = entries.get(name)
        profile = entry.profile() if entry is not None else TASK_PROFILES[route["task"]]
        adapters.append({
            "name": name, "version": route.get("version"), "task": route.get("task"),
            "description": route.get("description", ""), "component": route.get("component"),
            "rank": profile.rank, "alpha": profile.alpha, "targets": profile.targets,
            "dropout": profile.dropout,
        })  # fmt: skip
        tasks.setdefault(route["task"], {"instruction": profile.instruction, "samples": []})
    for task, info in tasks.items():
        info["samples"] = _samples(task)
    return {"adapters": adapters, "tasks": tasks, "base": gateway.table.get("base_component")}


@functools.cache
def _samples(task: str, n: int = 5) -> list[str]:
    """A few held-out inputs of the task (generated once per process: the page asks often)."""
    try:
        from training import datasets
    except ImportError:  # a gateway without the training extra shows no samples
        return []
    try:
        split = datasets.load(task)
    except KeyError:
        return []
    return [r.raw for r in split.held_out[:n]]


def create_app(gateway: LocalGateway) -> FastAPI:
    app = FastAPI(title="local API gateway", docs_url=None, redoc_url=None)
    runtime = httpx.AsyncClient(base_url=gateway.runtime_url, timeout=10.0)

    async def api(request: Request, path: str) -> Response:
        path = "/" + path
        method = request.method
        match = next(
            ((m, res) for verb, pattern, res in RESOURCES
             if verb == method and (m := pattern.match(path))), None,
        )  # fmt: skip
        if match is None:
            # What API Gateway answers for a route it does not have.
            return JSONResponse({"message": "Missing Authentication Token"}, status_code=403)
        tenant = request.headers.get(TENANT_HEADER, gateway.tenant)
        if not _TENANT_RE.match(tenant):
            return JSONResponse({"message": "invalid X-Local-Tenant"}, status_code=400)
        raw = await request.body()
        try:
            body = raw.decode() if raw else None
        except UnicodeDecodeError:
            return JSONResponse({"message": "body is not UTF-8"}, status_code=400)
        m, resource = match
        headers = {k.title(): v for k, v in request.headers.items()
                   if k.lower() not in ("authorization", TENANT_HEADER)}  # fmt: skip
        event = proxy_event(method, path, resource, m.groupdict(), headers,
                            dict(request.query_params), body, tenant)  # fmt: skip
        t0 = time.perf_counter()
        result = await asyncio.to_thread(gateway.call_router, event)
        ms = round((time.perf_counter() - t0) * 1000, 1)
        if resource.endswith("/generate"):
            try:
                answer = json.loads(result.get("body") or "{}")
            except ValueError:
                answer = {}
            gateway.event("router_request", adapter=m["adapter"], status=result["statusCode"],
                          cache=answer.get("cache"), latency_ms=ms)  # fmt: skip
        return Response(
            result.get("body") or "",
            status_code=result["statusCode"],
            headers={**(result.get("headers") or {}),
                     "x-amzn-RequestId": event["requestContext"]["requestId"]},
        )  # fmt: skip

    @app.api_route("/v1/{path:path}", methods=["GET", "POST", "PUT", "DELETE", "PATCH"])
    async def v1(request: Request, path: str) -> Response:
        return await api(request, "v1/" + path)

    @app.get("/health")
    async def health(request: Request) -> Response:
        return await api(request, "health")

    @app.get("/")
    async def index() -> Response:
        return FileResponse(PLAYGROUND / "index.html")

    @app.get("/playground/{name}")
    async def static(name: str) -> Response:
        path = PLAYGROUND / name
        if name not in {p.name for p in PLAYGROUND.iterdir()}:
            return JSONResponse({"error": "not found"}, status_code=404)
        return FileResponse(path)

    @app.get("/local/catalog")
    async def catalog() -> Response:
        return JSONResponse(await asyncio.to_thread(_catalog_view, gateway))

    @app.post("/local/base/generate")
    async def base_generate(request: Request) -> Response:
        from lambda_proxy.sagemaker import InvokeError

        try:
            payload = await request.json()
        except ValueError:
            return JSONResponse({"error": "body is not JSON"}, status_code=400)
        if not isinstance(payload, dict):
            return JSONResponse({"error": "body must be a JSON object"}, status_code=400)
        payload = {k: v for k, v in payload.items() if k in ("inputs", "messages", "parameters")}
        try:
            return JSONResponse(await asyncio.to_thread(gateway.invoke_base, payload))
        except InvokeError as exc:
            return JSONResponse({"error": exc.message, "code": exc.code},
                                status_code=exc.status)  # fmt: skip

    @app.get("/local/status")
    async def status() -> Response:
        try:
            adapters = (await runtime.get("/adapters")).json()
        except (httpx.HTTPError, ValueError) as exc:
            return JSONResponse({"runtime": f"unreachable: {exc}"}, status_code=503)
        return JSONResponse({
            "base": adapters.get("base"), "tiers": adapters.get("tiers"),
            "memory": adapters.get("memory"), "max_loras": adapters.get("max_loras"),
            "max_cpu_loras": adapters.get("max_cpu_loras"), "adapters": adapters.get("adapters"),
            "cache": gateway.cache_mode, "endpoint": gateway.table.get("endpoint"),
        })  # fmt: skip

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

    return app
