"""The local gateway's parts that the e2e tests do not isolate."""

from __future__ import annotations

import json
import os
import time
import uuid

import pytest
from starlette.requests import Request
from starlette.testclient import TestClient

from lambda_proxy.auth import caller_from_event
from lambda_proxy.handler import _shape_error
from lambda_proxy.settings import settings
from lambda_proxy.web import proxy_event
from local.gateway import InProcessCache, LocalGateway, create_app, request_context
from tests.fakes import HttpEndpoint


def test_the_proxy_event_is_one_the_router_accepts_and_names_the_tenant() -> None:
    """What the gateway hands the router's web app, and the web app hands the handler."""
    path = "/v1/adapters/sales-json/generate"
    context = request_context("POST", path, "/v1/adapters/{adapter}/generate", "sales-ops")
    scope = {
        "type": "http",
        "method": "POST",
        "path": path,
        "query_string": b"",
        "headers": [(b"content-type", b"application/json")],
    }
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


def _base_answer(_calls: int, _body: bytes) -> tuple[int, dict[str, str], bytes]:
    """InvokeEndpoint's answer as the base component gives it."""
    body = {"generated_text": "base says", "finish_reason": "stop", "artifact": None, "usage": {}}
    return 200, {}, json.dumps(body).encode()


@pytest.fixture
def gateway(tmp_path, monkeypatch):
    from lambda_proxy import service

    for name in (
        "ROUTING_TABLE_FILE",
        "SAGEMAKER_ENDPOINT_URL",
        "AWS_REGION",
        "MAX_NEW_TOKENS_CAP",
    ):
        monkeypatch.setenv(name, os.environ.get(name, ""))
    monkeypatch.setenv("MAX_NEW_TOKENS_CAP", "64")
    table = tmp_path / "routing_table.json"
    table.write_text(
        json.dumps({"endpoint": "local-endpoint", "base_component": "local-base", "adapters": {}})
    )
    endpoint = HttpEndpoint(_base_answer)
    gw = LocalGateway(
        routing_table=table, endpoint_url=endpoint.url, runtime_url=endpoint.url, redis_url=None
    )
    with TestClient(create_app(gw), base_url="http://127.0.0.1:8000") as client:
        yield client, endpoint
    endpoint.close()
    service.configure(None)
    settings.cache_clear()


def test_the_base_answer_passes_the_routers_checks(gateway) -> None:
    client, endpoint = gateway
    ok = client.post("/local/base/generate", json={"inputs": "hi"})
    assert ok.status_code == 200 and ok.json()["output"] == "base says"
    sent = json.loads(endpoint.bodies[-1])
    assert sent["parameters"]["max_new_tokens"] <= 64  # the cap applies
    for body in (
        {"inputs": "hi", "parameters": {"max_new_tokens": 100_000}},
        {"inputs": "hi", "parameters": {"nope": 1}},
        {"prompt": "hi"},
    ):
        r = client.post("/local/base/generate", json=body)
        assert r.status_code == 400, r.text
    assert endpoint.calls == 1  # none of them reached the base
    r = client.post(
        "/local/base/generate", json={"inputs": "hi"}, headers={"X-Local-Tenant": "not a name"}
    )
    assert r.status_code == 400


@pytest.mark.parametrize(
    "path", ["/local/base/generate", "/_local/reload", "/v1/adapters/x/generate"]
)
def test_cross_origin_and_non_json_writes_are_refused(gateway, path) -> None:
    client, endpoint = gateway
    body = json.dumps({"inputs": "hi"})
    plain = client.post(path, content=body, headers={"Content-Type": "text/plain"})
    assert plain.status_code == 415
    form = client.post(path, data={"inputs": "hi"})
    assert form.status_code == 415
    foreign = client.post(
        path,
        content=body,
        headers={"Content-Type": "application/json", "Origin": "https://evil.example"},
    )
    assert foreign.status_code == 403
    fetch = client.post(
        path,
        content=body,
        headers={"Content-Type": "application/json", "Sec-Fetch-Site": "cross-site"},
    )
    assert fetch.status_code == 403
    assert not endpoint.calls
    own = client.post("/_local/reload", json={}, headers={"Origin": "http://127.0.0.1:8000"})
    assert own.status_code == 200


def test_a_page_that_rebinds_its_name_to_loopback_is_refused(gateway) -> None:
    client, endpoint = gateway
    rebound = {
        "Host": "rebind.attacker.example:8000",
        "Origin": "http://rebind.attacker.example:8000",
    }
    assert client.get("/local/catalog", headers=rebound).status_code == 403
    assert (
        client.post("/local/base/generate", json={"inputs": "hi"}, headers=rebound).status_code
        == 403
    )
    assert not endpoint.calls
    for host in ("127.0.0.1:8000", "localhost:8000", "[::1]:8000"):
        assert client.get("/local/catalog", headers={"Host": host}).status_code == 200


def test_the_playground_offers_typed_inputs_first_for_the_shipped_example() -> None:
    """The example dataset's adapter was offered only its file's test records; the typed
    e-mails (``training.datasets.natural``) come first now, as for the built-in tasks."""
    from config import load_deployment
    from local.gateway import _samples
    from training.datasets.natural import natural

    entry = load_deployment("local").adapter("support-triage").entry
    samples = _samples(entry.task, entry)
    typed = [r.raw for r in natural(entry.task, entry.dataset)]
    assert samples[: len(typed)] == typed and len(samples) > len(typed)


def test_the_gateway_tells_the_router_what_the_trainer_says(tmp_path) -> None:
    """Not served yet: the trainer's state (and a gate's reasons) reach the router, which
    answers in its own words; an online adapter, or one the trainer never saw, is the router's
    usual business."""
    from types import SimpleNamespace

    from local.gateway import LocalGateway
    from local.trainer import Status

    status = Status(tmp_path, ["a", "b", "c"])
    status.set("a", state="not publishable", detail="does not beat the echo")
    status.set("b", state="online")
    status.set("c", state="training", step=3)
    gateway = SimpleNamespace(state_dir=tmp_path)
    assert LocalGateway.training_state(gateway, "a") == (
        "not publishable",
        "does not beat the echo",
    )
    assert LocalGateway.training_state(gateway, "b") is None
    assert LocalGateway.training_state(gateway, "c") == ("training", "")
    assert LocalGateway.training_state(gateway, "unknown") is None


def test_the_how_this_works_panel_links_built_docs_pages(gateway, tmp_path, monkeypatch) -> None:
    """The playground's panel links the docs page of each part it shows; the gateway builds the
    site on the first visit (the same MkDocs build the suite runs strict), serves it, and
    nothing outside it."""
    import re

    from local import docs

    client, _ = gateway
    monkeypatch.setattr(docs, "DOCS_SITE", tmp_path / "site")
    page = client.get("/").text
    links = re.findall(r'href="(/docs/[^"]+)"', page)
    assert len(set(links)) >= 6
    for link in set(links):
        r = client.get(link)
        assert r.status_code == 200 and "<html" in r.text.lower(), link
    built = (tmp_path / "site" / "index.html").stat().st_mtime
    assert client.get("/docs/router/").status_code == 200
    assert (tmp_path / "site" / "index.html").stat().st_mtime == built, "not rebuilt when fresh"
    assert client.get("/docs/../../pyproject.toml").status_code == 404
    assert client.get("/docs/%2e%2e/%2e%2e/pyproject.toml").status_code == 404
    assert "make docs" in client.get("/docs/no-such-page/").json()["error"]


def test_the_usage_panel_reads_the_records_the_router_wrote(tmp_path, monkeypatch) -> None:
    """A gateway with a state directory keeps the router's usage records
    (``local.usage``); ``/local/usage`` and ``python -m local usage`` aggregate the same."""
    from contracts.usage import Usage
    from lambda_proxy import usage

    monkeypatch.setattr(usage, "SINKS", [])
    table = tmp_path / "routing_table.json"
    table.write_text(json.dumps({"endpoint": "e", "base_component": "b", "adapters": {}}))
    gw = LocalGateway(
        routing_table=table,
        endpoint_url="http://127.0.0.1:9",
        runtime_url="http://127.0.0.1:9",
        redis_url=None,
        state_dir=tmp_path,
    )
    for tokens, hit in ((7, 0), (7, 1), (3, 0)):
        usage.record(
            Usage("000000000000:demo", "000000000000:demo", "sales-json", "1.0.0", None,
                        "native", 200, hit, 10, tokens, 12.5)
        )  # fmt: skip
    with TestClient(create_app(gw), base_url="http://127.0.0.1:8000") as client:
        (row,) = client.get("/local/usage").json()["rows"]
    assert (row["requests"], row["tokens_in"], row["tokens_out"]) == (3, 30, 17)
    assert round(row["cache_hit_share"], 3) == 0.333
    shown: list[str] = []
    from local.usage import show

    assert show(tmp_path, out=shown.append) == 0
    assert "sales-json" in "\n".join(shown) and "3 requests" in shown[0]


def test_buffered_requests_are_served_at_once_as_lambda_serves_them(tmp_path, monkeypatch) -> None:
    """Each buffered request runs in an execution environment of its own (local.environments):
    a tenant's request in flight does not hold another tenant's behind it. The endpoint answers
    only once two invocations are in flight together; served one at a time, the first would
    wait for a second that cannot come and fail."""
    import threading

    from lambda_proxy import service, web

    monkeypatch.setenv("MAX_NEW_TOKENS_CAP", "64")
    run = uuid.uuid4()  # inputs no earlier run left an answer to in the shared Redis
    together = threading.Barrier(2, timeout=15)

    def answer(_calls: int, _body: bytes) -> tuple[int, dict[str, str], bytes]:
        try:
            together.wait()
        except threading.BrokenBarrierError:
            return 500, {}, b'{"message": "served one at a time"}'
        body = {"generated_text": "ok", "finish_reason": "stop", "artifact": None, "usage": {}}
        return 200, {}, json.dumps(body).encode()

    table = tmp_path / "routing_table.json"
    route = {
        "component": "local-public",
        "version": "1",
        "task": "style_transfer",
        "tenants": ["*"],
    }
    table.write_text(
        json.dumps({"endpoint": "e", "base_component": "local-base", "adapters": {"public": route}})
    )
    endpoint = HttpEndpoint(answer)
    gw = LocalGateway(
        routing_table=table,
        endpoint_url=endpoint.url,
        runtime_url=endpoint.url,
        redis_url="redis://127.0.0.1:6379/0",
        environments=2,
    )
    assert gw.environments is not None, "Redis answers at 127.0.0.1:6379 (the tests need it)"
    results: dict[str, int] = {}
    try:
        with TestClient(create_app(gw), base_url="http://127.0.0.1:8000") as client:

            def send(tenant: str) -> None:
                r = client.post(
                    "/v1/adapters/public/generate",
                    json={"inputs": f"a request from {tenant} {run}"},
                    headers={"X-Local-Tenant": tenant},
                )
                results[tenant] = r.status_code

            threads = [threading.Thread(target=send, args=(t,)) for t in ("flood", "quiet")]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
    finally:
        endpoint.close()
        service.configure(None)
        settings.cache_clear()
    assert results == {"flood": 200, "quiet": 200}
    assert endpoint.calls == 2
    assert web.BUFFERED is web.in_process  # the gateway's close put the handler back


def test_the_canary_panel_shows_its_state_and_signals_beside_stables(tmp_path, monkeypatch) -> None:
    """``/local/canaries`` (the playground's canary panel): a shadow canary's pairs, each
    signal's means for both versions, and, once the test has rolled it back, the state and the
    decision's evidence, as the router's shared state in Redis holds them."""
    from contracts.routing import CanaryRoute
    from lambda_proxy import service, shadow
    from lambda_proxy.canary import Canaries

    for name in ("ROUTING_TABLE_FILE", "SAGEMAKER_ENDPOINT_URL", "AWS_REGION"):
        monkeypatch.setenv(name, os.environ.get(name, ""))  # the gateway sets them
    version = f"2.0.0-{uuid.uuid4().hex[:8]}"
    canary = {
        "component": "local-sales-canary",
        "version": version,
        "weight": 10,
        "max_error_rate": 0.05,
        "window_s": 300,
        "min_requests": 20,
        "shadow": 0.5,
        "margins": {"json_valid": 0.05, "answered": 0.02},
        "min_pairs": 20,
        "promote_after": 40,
    }
    route = {"component": "local-sales", "version": "1.0.0", "task": "sales_json"}
    table = tmp_path / "routing_table.json"
    table.write_text(
        json.dumps(
            {
                "endpoint": "e",
                "base_component": "b",
                "adapters": {"sales-json": {**route, "canary": canary}, "other": route},
            }
        )
    )
    gw = LocalGateway(
        routing_table=table,
        endpoint_url="http://127.0.0.1:9",
        runtime_url="http://127.0.0.1:9",
        redis_url="redis://127.0.0.1:6379/0",
    )
    c = CanaryRoute.model_validate(canary)
    base = Canaries.base("sales-json", c)
    pairs = shadow.Pairs(gw.redis)
    try:
        with TestClient(create_app(gw), base_url="http://127.0.0.1:8000") as client:
            shown = client.get("/local/canaries").json()["adapters"]
            assert set(shown) == {"sales-json"}  # only routes with a canary
            assert shown["sales-json"]["state"] == "judging" and shown["sales-json"]["pairs"] == 0
            # 20 pairs in which the canary's JSON never validates: the first look decides.
            for _ in range(19):
                tally = pairs.add(base, {"json_valid": 1.0, "answered": 1.0},
                                  {"json_valid": 0.0, "answered": 1.0})  # fmt: skip
            seen = client.get("/local/canaries").json()["adapters"]["sales-json"]
            assert (seen["state"], seen["pairs"], seen["next_look"]) == ("judging", 19, 20)
            tally = pairs.add(base, {"json_valid": 1.0, "answered": 1.0},
                              {"json_valid": 0.0, "answered": 1.0})  # fmt: skip
            decision = shadow.decide(c, tally)
            assert decision is not None and decision.action == "rollback"
            service.settle("sales-json", c, decision)  # the router the gateway configured
            seen = client.get("/local/canaries").json()["adapters"]["sales-json"]
            catalog = client.get("/local/catalog").json()["adapters"]
    finally:
        gw.redis.delete(f"{base}:pairs", f"{base}:off")
        service.configure(None)
        settings.cache_clear()
    assert seen["state"] == "rolled back" and seen["stable_version"] == "1.0.0"
    means = {s["signal"]: (s["pairs"], s["stable"], s["canary"]) for s in seen["signals"]}
    assert means == {"json_valid": (20, 1.0, 0.0), "answered": (20, 1.0, 1.0)}
    assert seen["callers"] == 1
    assert seen["decision"]["n"] == 20 and "json_valid" in seen["decision"]["reason"]
    by_name = {a["name"]: a for a in catalog}
    assert by_name["sales-json"]["canary"] == {"version": version, "mode": "shadow"}
    assert by_name["other"]["canary"] is None
