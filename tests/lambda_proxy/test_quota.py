"""Per-tenant quotas in Redis: token buckets exact under concurrency, per adapter, prompt tokens
counted, 429 with Retry-After, 400 for a cost no bucket can hold, and while Redis is down an
in-process bucket per tenant (counted), with no timeout paid per request."""

from __future__ import annotations

import json
import threading
import time
import uuid

import redis

from contracts.settings import RouterSettings
from lambda_proxy import handler as h
from lambda_proxy import service
from lambda_proxy.cache import ResponseCache
from lambda_proxy.quota import WINDOW_S, Limits, Quotas, prompt_tokens_estimate
from tests.lambda_proxy.conftest import TABLE, Context, call, event, model_answer, routed

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


def test_tokens_are_reserved_per_request_and_refill_at_the_limits_rate(redis_client) -> None:
    quotas = Quotas(redis_client, Limits(tokens_per_minute=100))
    tenant = _tenant()
    allowed = [quotas.check(tenant, "a", 30, now=NOW).allowed for _ in range(5)]
    assert allowed == [True, True, True, False, False]
    refused = quotas.check(tenant, "a", 30, now=NOW)
    # 10 tokens left, refilled at 100 a minute: 30 are there in 12 s.
    assert refused.retry_after_s == 12 and "tokens per minute" in refused.limit
    assert not quotas.check(tenant, "a", 30, now=NOW + 11).allowed
    assert quotas.check(tenant, "a", 30, now=NOW + 12).allowed
    assert quotas.check(tenant, "a", 30, now=NOW + 12 + WINDOW_S).allowed


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
    # Quotas are per tenant (the role), so a role name no other run has spent.
    name = f"quota-{uuid.uuid4().hex[:8]}"
    role = f"arn:aws:sts::123456789012:assumed-role/{name}/s"
    table["adapters"]["medical"]["tenants"] = [name]
    service.configure(
        service.Dependencies(RouterSettings(routing_table=table), cache, sagemaker[0])
    )
    stub.add_response("invoke_endpoint", model_answer())
    body = {"inputs": f"x {uuid.uuid4().hex}", "parameters": {"max_new_tokens": 4}}
    assert h.handler(event(body=body, arn=role), Context())["statusCode"] == 200
    out = h.handler(event(body=body, arn=role), Context())
    assert out["statusCode"] == 429
    headers = out.get("headers") or {k: v[0] for k, v in out["multiValueHeaders"].items()}
    assert 1 <= int(headers["Retry-After"]) <= WINDOW_S
    assert json.loads(out["body"])["code"] == "QuotaExceeded"


def _body() -> dict:
    return {"inputs": f"x {uuid.uuid4().hex}", "parameters": {"max_new_tokens": 4}}


def test_a_request_that_costs_more_than_the_limit_is_a_400_not_429_forever(
    router, sagemaker
) -> None:
    _, cache = router
    routed(cache, sagemaker[0], medical={"quota": {"tokens_per_minute": 100}})
    # The default max_new_tokens (128) alone is over 100 tokens a minute.
    status, out = call(event(body={"inputs": f"x {uuid.uuid4().hex}"}))
    assert status == 400 and out["code"] == "CostOverLimit", out
    assert "100 tokens per minute" in out["error"] and "estimate" in out["error"]


def test_prompt_tokens_count_against_the_token_quota(router) -> None:
    # An upper bound: a token per letter (a run of rare pairs is one each), plus the user
    # turn's template (8).
    assert prompt_tokens_estimate("x" * 400) == 400 + 8
    stub, cache = router
    name = f"prompt-{uuid.uuid4().hex[:8]}"
    routed(cache, stub.client, medical={"quota": {"tokens_per_minute": 900}, "tenants": [name]})
    role = f"arn:aws:sts::123456789012:assumed-role/{name}/s"
    statuses = []
    for _ in range(3):  # 16 new tokens and 408 prompt tokens each: two fit in 900
        body = {"inputs": "x" * 390 + uuid.uuid4().hex[:10], "parameters": {"max_new_tokens": 16}}
        if len(statuses) < 2:
            stub.add_response("invoke_endpoint", model_answer())
        statuses.append(call(event(body=body, arn=role))[0])
    assert statuses == [200, 200, 429]


def test_no_boundary_lets_twice_the_limit_through(redis_client) -> None:
    """The fixed window admitted 10 at 0:59 and 10 more at 1:00; a bucket refills at the
    limit's rate, so the second after a boundary admits what two seconds refill, not 10."""
    quotas = Quotas(redis_client, Limits(requests_per_minute=10))
    tenant, end = _tenant(), (NOW // WINDOW_S + 1) * WINDOW_S
    late = [quotas.check(tenant, "a", 1, now=end - 1).allowed for _ in range(10)]
    early = [quotas.check(tenant, "a", 1, now=end + 1).allowed for _ in range(10)]
    assert late.count(True) == 10 and early.count(True) == 0


class Public:
    """A SageMaker client that answers as the public adapter's container."""

    def __init__(self) -> None:
        self.calls = 0

    def invoke_endpoint(self, **_: object) -> dict:
        self.calls += 1
        return model_answer(artifact={"name": "public", "version": "2.0.0", "sha256": "0" * 64})


def test_with_redis_down_a_tenant_over_its_fallback_limit_gets_429_others_are_served(
    own_redis,
) -> None:
    proc, client = own_redis
    fake = Public()
    port = client.connection_pool.connection_kwargs["port"]
    cache = ResponseCache.from_url(f"redis://127.0.0.1:{port}", 60)  # the Lambda's own client
    routed(cache, fake, public={"quota": {"requests_per_minute": 2}})
    proc.kill()
    proc.wait()
    greedy = f"arn:aws:sts::123456789012:assumed-role/greedy-{uuid.uuid4().hex[:6]}/s"
    other = f"arn:aws:sts::123456789012:assumed-role/other-{uuid.uuid4().hex[:6]}/s"
    path = "/v1/adapters/public/generate"
    t0 = time.perf_counter()
    greedy_codes = [call(event(path=path, body=_body(), arn=greedy))[0] for _ in range(3)]
    assert greedy_codes == [200, 200, 429]
    assert call(event(path=path, body=_body(), arn=other))[0] == 200
    assert fake.calls == 3
    # The breaker: one failed connection for the cache and one for the quota, not one each
    # per request (redis-py's default retries took seconds per request).
    elapsed = time.perf_counter() - t0
    assert elapsed < 1.5, f"a dead Redis cost {elapsed:.2f} s over four requests"
    service.configure(None)


def test_the_429_names_the_limit_that_ran_out(redis_client) -> None:
    quotas = Quotas(redis_client, Limits(requests_per_minute=1, tokens_per_minute=1000))
    tenant = _tenant()
    assert quotas.check(tenant, "a", 10, now=NOW).allowed
    refused = quotas.check(tenant, "a", 10, now=NOW)
    assert refused.limit == "1 requests per minute", refused


def test_the_fallback_never_refills_the_same_time_twice() -> None:
    """Timestamps out of order (two clocks): the bucket keeps its later stamp, as the Lua
    script does, instead of refilling the interval again."""
    quotas = Quotas(None, Limits(tokens_per_minute=10))
    tenant = _tenant()
    assert quotas.check(tenant, "a", 5, now=NOW + 60).allowed
    assert quotas.check(tenant, "a", 5, now=NOW).allowed
    assert not quotas.check(tenant, "a", 10, now=NOW + 60).allowed
