"""The local gateway's parts that the e2e tests do not isolate."""

from __future__ import annotations

import time

from starlette.requests import Request

from lambda_proxy.auth import caller_from_event
from lambda_proxy.handler import _shape_error
from lambda_proxy.web import proxy_event
from local.gateway import InProcessCache, request_context


def test_the_proxy_event_is_one_the_router_accepts_and_names_the_tenant() -> None:
    """What the gateway hands the router's web app, and the web app hands the handler."""
    path = "/v1/adapters/sales-json/generate"
    context = request_context("POST", path, "/v1/adapters/{adapter}/generate", "sales-ops")
    scope = {"type": "http", "method": "POST", "path": path, "query_string": b"",
             "headers": [(b"content-type", b"application/json")]}  # fmt: skip
    event = proxy_event(Request(scope), context, '{"inputs": "x"}')
    assert _shape_error(event) is None
    assert event["resource"] == "/v1/adapters/{adapter}/generate" and event["path"] == path
    caller = caller_from_event(event)
    assert caller is not None and caller.tenant == "000000000000:sales-ops"  # account-qualified
    assert "arn:aws:iam::000000000000:role/sales-ops" in caller.principals


def test_the_in_process_cache_expires_and_bounds_its_entries() -> None:
    cache = InProcessCache(max_entries=2)
    cache.set("lora:v1:a:1", "one", ex=60)
    cache.set("lora:v1:a:2", b"two", ex=0)
    time.sleep(0.01)
    assert cache.get("lora:v1:a:1") == b"one"
    assert cache.get("lora:v1:a:2") is None  # expired
    cache.set("lora:v1:b:1", "x", ex=60)
    cache.set("lora:v1:b:2", "y", ex=60)
    assert cache.get("lora:v1:a:1") is None  # least recently used, over the bound
    assert sorted(cache.scan_iter(match="lora:v1:b:*")) == ["lora:v1:b:1", "lora:v1:b:2"]
    assert cache.delete("lora:v1:b:1", "missing") == 1
