"""Canary routing through the router: the share, a session key that never flips, the router's
own rollback, and the same rules while Redis is away."""

from __future__ import annotations

import collections
import io
import json
import uuid
from typing import Any

import pytest
from botocore.exceptions import ClientError
from botocore.response import StreamingBody

from lambda_proxy import service
from lambda_proxy.cache import ResponseCache
from tests.lambda_proxy.conftest import call, event, routed


class Components:
    """SageMaker runtime as the router calls it: answers per inference component, each as
    that component's adapter version would, and a component can be made to fail."""

    def __init__(
        self,
        versions: dict[str, str],
        failing: frozenset[str] = frozenset(),
        error: dict[str, Any] | None = None,
    ) -> None:
        self.versions = versions
        self.failing = failing
        #: How a failing component fails (default: a container 500, as a ModelError).
        self.error = error or {
            "Error": {"Code": "ModelError", "Message": "CUDA error"},
            "OriginalStatusCode": 500,
        }
        self.calls: collections.Counter[str] = collections.Counter()

    def invoke_endpoint(self, *, InferenceComponentName: str, Body: bytes, **_: Any) -> dict:  # noqa: N803 - boto3's names
        self.calls[InferenceComponentName] += 1
        if InferenceComponentName in self.failing:
            raise ClientError(self.error, "InvokeEndpoint")
        version = self.versions[InferenceComponentName]
        body = json.dumps(
            {
                "generated_text": "ok",
                "finish_reason": "stop",
                "adapter": InferenceComponentName,
                "artifact": {"name": "medical", "version": version},
            }
        ).encode()
        return {"Body": StreamingBody(io.BytesIO(body), len(body))}


def _canary(version: str, weight: int = 10, **extra: Any) -> dict[str, Any]:
    return {
        "component": "lora-test-medical-canary",
        "version": version,
        "weight": weight,
        "max_error_rate": 0.05,
        "window_s": 300,
        "min_requests": 20,
        **extra,
    }


def _ask(session: str | None, i: int | str) -> tuple[int, dict[str, Any]]:
    ev = event(body={"inputs": f"pt {i} c/o sob", "parameters": {"max_new_tokens": 8}})
    if session is not None:
        ev["headers"]["X-Session-Key"] = session
    return call(ev)


@pytest.fixture
def canary_version() -> str:
    """A version no earlier run has counted in the shared Redis."""
    return f"2.0.0-{uuid.uuid4().hex[:8]}"


def _setup(
    redis_client: Any,
    canary: dict[str, Any],
    failing: frozenset[str] = frozenset(),
    client: Any = None,
) -> Components:
    sm = Components(
        {"lora-test-medical": "1.0.0", "lora-test-medical-canary": canary["version"]}, failing
    )
    cache = ResponseCache(client if client is not None else redis_client, ttl_s=60)
    # cache off: every request reaches the endpoint, so each one is routed and counted.
    routed(cache, sm, medical={"canary": canary, "cache": "off"})
    return sm


def test_a_ten_percent_canary_takes_ten_percent_and_no_session_key_flips(
    redis_client, canary_version
) -> None:
    sm = _setup(redis_client, _canary(canary_version))
    served: dict[str, set[str]] = collections.defaultdict(set)
    for i in range(2000):
        key = f"user-{i % 50}"
        status, body = _ask(key, i)
        assert status == 200, body
        served[key].add(body["version"])
    try:
        flipped = {k: v for k, v in served.items() if len(v) > 1}
        assert not flipped, f"session keys served by both versions: {flipped}"
        share = sm.calls["lora-test-medical-canary"] / 2000
        assert 0.07 <= share <= 0.13, share
        # The answer names the version that served it, and that version's component served it.
        assert {next(iter(v)) for v in served.values()} == {"1.0.0", canary_version}
    finally:
        service.configure(None)


def test_requests_without_a_session_key_are_split_by_the_weight(
    redis_client, canary_version
) -> None:
    sm = _setup(redis_client, _canary(canary_version, weight=25))
    try:
        for i in range(400):
            assert _ask(None, i)[0] == 200
        assert sm.calls["lora-test-medical-canary"] == 100
    finally:
        service.configure(None)


def test_a_failing_canary_is_rolled_back_within_its_window_and_stable_never_fails(
    redis_client, canary_version, capsys, caplog
) -> None:
    canary = _canary(canary_version, weight=20)
    sm = _setup(redis_client, canary, failing=frozenset({"lora-test-medical-canary"}))
    outcomes: collections.Counter[tuple[str, int]] = collections.Counter()
    try:
        for i in range(1000):
            status, body = _ask(f"s{i}", i)
            served = body.get("version") if status == 200 else "canary"
            outcomes[(served, status)] += 1
        # Every failure is the canary's; the stable version answered every request sent to it.
        assert set(outcomes) <= {("1.0.0", 200), ("canary", 502)}, outcomes
        # Cut off at its min_requests (20 failures of 20: over 5%), then never called again.
        assert sm.calls["lora-test-medical-canary"] == canary["min_requests"]
        assert outcomes[("canary", 502)] == canary["min_requests"]
        assert outcomes[("1.0.0", 200)] == 1000 - canary["min_requests"]
    finally:
        service.configure(None)
    out = capsys.readouterr().out
    emitted = [json.loads(line) for line in out.splitlines() if '"_aws"' in line]
    counted = [m["CanaryRollback"] for m in emitted if "CanaryRollback" in m]
    assert counted == [[1.0]], f"counted once, by the tripping request: {counted}"
    rolled = [r for r in caplog.records if r.getMessage().startswith("canary rolled back")]
    assert [(r.adapter, r.canary_version, r.reason) for r in rolled] == [
        ("medical", canary_version, "20 of 20 canary requests failed, from 1 callers")
    ]


def test_a_healthy_canary_is_not_rolled_back_by_a_few_errors(redis_client, canary_version) -> None:
    """One failure in 40 (2.5%) stays under a 5% threshold."""
    from contracts.routing import CanaryRoute
    from lambda_proxy.canary import Canaries

    canaries = Canaries(redis_client)
    c = CanaryRoute.model_validate(_canary(canary_version))
    assert c is not None
    results = [canaries.record("medical", c, failed=(i == 7), now=1000.0) for i in range(40)]
    assert not any(r.rolled_back for r in results)
    assert (results[-1].requests, results[-1].errors) == (40, 1)
    # A new window starts from zero: old errors do not add up forever.
    assert canaries.record("medical", c, failed=False, now=1000.0 + 300).requests == 1


def test_the_openai_user_is_a_session_key(redis_client, canary_version) -> None:
    sm = _setup(redis_client, _canary(canary_version, weight=50))
    fingerprints: dict[str, set[str]] = collections.defaultdict(set)
    try:
        for i in range(60):
            user = f"end-user-{i % 6}"
            ev = event(
                path="/v1/chat/completions",
                body={
                    "model": "medical",
                    "user": user,
                    "max_tokens": 8,
                    "messages": [{"role": "user", "content": f"pt {i} c/o sob"}],
                },
            )
            status, body = call(ev)
            assert status == 200, body
            fingerprints[user].add(body["system_fingerprint"])
        assert all(len(v) == 1 for v in fingerprints.values()), fingerprints
        assert sm.calls["lora-test-medical-canary"] == 30  # 3 of 6 users, 10 requests each
    finally:
        service.configure(None)


def test_without_redis_a_session_key_still_keeps_its_version(own_redis, canary_version) -> None:
    proc, client = own_redis
    proc.kill()
    proc.wait()
    sm = _setup(client, _canary(canary_version, weight=30), client=client)
    served: dict[str, set[str]] = collections.defaultdict(set)
    try:
        for i in range(300):
            status, body = _ask(f"k{i % 30}", i)
            assert status == 200, body
            served[f"k{i % 30}"].add(body["version"])
    finally:
        service.configure(None)
    assert all(len(v) == 1 for v in served.values()), served
    assert 0 < sm.calls["lora-test-medical-canary"] < 300


def test_a_canary_answer_is_cached_under_its_own_version(redis_client, canary_version) -> None:
    """The cache key holds the version that served: a stable session never gets the canary's
    cached answer, nor the reverse."""
    sm = Components({"lora-test-medical": "1.0.0", "lora-test-medical-canary": canary_version})
    cache = ResponseCache(redis_client, ttl_s=60)
    routed(cache, sm, medical={"canary": _canary(canary_version, weight=50)})
    try:
        versions, prompt = {}, uuid.uuid4().hex  # a prompt no earlier run has cached
        for key in ("a", "b", "c", "d"):
            status, body = _ask(key, prompt)  # the same deterministic request every time
            assert status == 200
            versions[key] = body["version"]
        assert set(versions.values()) == {"1.0.0", canary_version}
        for key in ("a", "b", "c", "d"):
            status, body = _ask(key, prompt)
            assert (body["version"], body["cache"]) == (versions[key], "hit")
        assert sum(sm.calls.values()) == 2  # one miss per version
    finally:
        service.configure(None)


def test_a_busy_canary_is_not_rolled_back(redis_client, canary_version) -> None:
    """503 (busy, not ready) is capacity the stable version shares: it never counts as the
    canary's failure; a ModelError (502) does."""

    sm = Components(
        {"lora-test-medical": "1.0.0", "lora-test-medical-canary": canary_version},
        frozenset({"lora-test-medical-canary"}),
        {"Error": {"Code": "ModelError", "Message": "busy"}, "OriginalStatusCode": 503},
    )
    routed(
        ResponseCache(redis_client, ttl_s=60),
        sm,
        medical={"canary": _canary(canary_version, weight=50), "cache": "off"},
    )
    try:
        statuses = collections.Counter(_ask(f"b{i}", i)[0] for i in range(100))
        assert statuses == {200: 50, 503: 50}, statuses
        assert sm.calls["lora-test-medical-canary"] == 50, "never rolled back"
    finally:
        service.configure(None)


def test_a_rolled_back_canary_stays_off_and_the_fallback_learns_it(
    redis_client, canary_version
) -> None:
    """The switch has no TTL (the cache's volatile-lru eviction takes only keys with one), and
    an execution environment that saw it keeps the canary off when Redis goes away."""
    from contracts.routing import CanaryRoute
    from lambda_proxy.canary import Canaries, Choice

    canaries = Canaries(redis_client)
    c = CanaryRoute.model_validate(_canary(canary_version, min_requests=2))
    assert c is not None
    assert [canaries.record("medical", c, failed=True).rolled_back for _ in range(2)] == [
        False,
        True,
    ]
    assert redis_client.ttl(f"lora:canary:v1:medical:{canary_version}:off") == -1
    routed = [canaries.route("medical", c, "tenant", f"k{i}") for i in range(20)]
    assert Choice.CANARY not in routed
    canaries._skip_until = float("inf")  # Redis away: the fallback decides
    routed = [canaries.route("medical", c, "tenant", f"k{i}") for i in range(20)]
    assert Choice.CANARY not in routed


def test_timeouts_and_sagemakers_own_failures_are_not_the_canarys() -> None:
    from lambda_proxy.sagemaker import InvokeError, container_error
    from lambda_proxy.service import canary_fault

    assert canary_fault(container_error(500, "CUDA error"))
    assert canary_fault(InvokeError(502, "x", "BadModelOutput"))
    assert not canary_fault(None)
    assert not canary_fault(container_error(503, "busy"))
    assert not canary_fault(container_error(400, "bad input"))
    assert not canary_fault(InvokeError(504, "x", "Timeout"))
    assert not canary_fault(InvokeError(502, "x", "InternalFailure"))
    assert not canary_fault(InvokeError(502, "x", "EndpointConnectionError"))


def test_a_lone_surrogate_in_the_openai_user_is_a_400_not_a_crash(redis_client) -> None:
    routed(ResponseCache(redis_client, ttl_s=60), Components({}), medical={})
    try:
        ev = event(
            path="/v1/chat/completions",
            body='{"model": "medical", "user": "\\ud800", "messages": '
            '[{"role": "user", "content": "hi"}]}',
        )
        status, body = call(ev)
        assert status == 400, body
        ev["body"] = ev["body"].replace("\\\\ud800", "ok")
        ev["headers"]["X-Session-Key"] = "\ud800"  # a header too: hashed, never a 500
        assert call(ev)[0] != 500
    finally:
        service.configure(None)


def test_a_canary_component_not_there_yet_or_any_more_falls_back_to_stable(
    redis_client, canary_version
) -> None:
    """A release deploys the canary's component and the router's table apart: while the
    table names a component SageMaker does not have (ValidationError), stable answers."""

    sm = Components(
        {"lora-test-medical": "1.0.0", "lora-test-medical-canary": canary_version},
        frozenset({"lora-test-medical-canary"}),
        {
            "Error": {
                "Code": "ValidationError",
                "Message": "Inference Component lora-test-medical-canary not found",
            }
        },
    )
    routed(
        ResponseCache(redis_client, ttl_s=60),
        sm,
        medical={"canary": _canary(canary_version, weight=50), "cache": "off"},
    )
    try:
        answers = [_ask(f"v{i}", i) for i in range(20)]
        assert {(s, b["version"]) for s, b in answers} == {(200, "1.0.0")}
        assert sm.calls["lora-test-medical-canary"] == 10  # tried, then stable
    finally:
        service.configure(None)
