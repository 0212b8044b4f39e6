"""Per-tenant quotas in Redis: exact under concurrency, per adapter, 429 with Retry-After, and a
Redis outage lets requests through (counted)."""

from __future__ import annotations

import json
import threading
import uuid

import redis

from lambda_proxy import handler as h
from lambda_proxy.quota import WINDOW_S, Limits, Quotas
from lambda_proxy.settings import RouterSettings
from tests.lambda_proxy.conftest import TABLE, Context, event, model_answer

NOW = 1_800_000_010.0  # 10 s into a window


def _tenant() -> str:
    return f"123456789012:t-{uuid.uuid4().hex[:8]}"


def test_a_request_limit_holds_exactly_under_concurrency(redis_client) -> None:
    quotas = Quotas(redis_client, Limits(requests_per_minute=10))
    tenant, results = _tenant(), []
    barrier = threading.Barrier(40)

    def one() -> None:
        barrier.wait()
        results.append(quotas.check(tenant, "medical", 8, now=NOW).allowed)

    threads = [threading.Thread(target=one) for _ in range(40)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results.count(True) == 10 and results.count(False) == 30


def test_tokens_are_reserved_per_request_and_the_next_window_starts_fresh(redis_client) -> None:
    quotas = Quotas(redis_client, Limits(tokens_per_minute=100))
    tenant = _tenant()
    allowed = [quotas.check(tenant, "a", 30, now=NOW).allowed for _ in range(5)]
    assert allowed == [True, True, True, False, False]
    refused = quotas.check(tenant, "a", 30, now=NOW)
    assert refused.retry_after_s == WINDOW_S - 10 and "tokens per minute" in refused.limit
    assert quotas.check(tenant, "a", 30, now=NOW + WINDOW_S).allowed


def test_an_adapters_own_limit_counts_apart_from_the_tenant_wide_one(redis_client) -> None:
    quotas = Quotas(redis_client, Limits(requests_per_minute=5))
    tenant, narrow = _tenant(), Limits(requests_per_minute=2)
    on_medical = [quotas.check(tenant, "medical", 1, narrow, now=NOW).allowed for _ in range(3)]
    assert on_medical == [True, True, False]
    others = [quotas.check(tenant, "public", 1, now=NOW).allowed for _ in range(4)]
    assert others == [True, True, True, False]  # 2 + 3 = the tenant-wide 5
    # Another tenant has budgets of its own.
    assert quotas.check(_tenant(), "medical", 1, narrow, now=NOW).allowed


def test_a_redis_outage_lets_requests_through_and_says_so() -> None:
    dead = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2, socket_timeout=0.2)
    decision = Quotas(dead, Limits(requests_per_minute=1)).check(_tenant(), "a", 1)
    assert decision.allowed and not decision.enforced


def test_the_router_answers_429_with_retry_after_and_never_calls_sagemaker(
    router, sagemaker
) -> None:
    stub, cache = router
    table = json.loads(json.dumps(TABLE))
    table["adapters"]["medical"]["quota"] = {"requests_per_minute": 1}
    h.configure(h.Dependencies(RouterSettings(routing_table=table), cache, sagemaker[0]))
    # Quotas are per tenant (the role), so a role name no other run has spent.
    name = f"quota-{uuid.uuid4().hex[:8]}"
    role = f"arn:aws:sts::123456789012:assumed-role/{name}/s"
    table["adapters"]["medical"]["tenants"] = [name]
    stub.add_response("invoke_endpoint", model_answer())
    body = {"inputs": f"x {uuid.uuid4().hex}", "parameters": {"max_new_tokens": 4}}
    assert h.handler(event(body=body, arn=role), Context())["statusCode"] == 200
    out = h.handler(event(body=body, arn=role), Context())
    assert out["statusCode"] == 429
    headers = out.get("headers") or {k: v[0] for k, v in out["multiValueHeaders"].items()}
    assert 1 <= int(headers["Retry-After"]) <= WINDOW_S
    assert json.loads(out["body"])["code"] == "QuotaExceeded"
