"""The router end to end: authorization, cache hit/miss/bypass, Redis failures, SageMaker errors."""

from __future__ import annotations

import json
import socket
import threading
import uuid

import pytest

from contracts.settings import RouterSettings
from lambda_proxy import service
from lambda_proxy.cache import ResponseCache
from lambda_proxy.sagemaker import MAX_ATTEMPTS, RETRYABLE_CODES, make_client
from tests.lambda_proxy.conftest import OTHER_ROLE, call, event, invoke_params, model_answer


def _body(**params) -> dict:
    return {
        "inputs": f"pt c/o sob {uuid.uuid4().hex}",
        "parameters": {"max_new_tokens": 16, **params},
    }


def _expect(stub, component: str = "lora-test-medical", answer=None) -> None:
    stub.add_response(
        "invoke_endpoint",
        answer or model_answer(),
        invoke_params(component),
    )


def test_allowed_caller_gets_the_model_answer_then_a_cache_hit(router) -> None:
    stub, _ = router
    body = _body()
    _expect(stub)
    status, out = call(event(body=body))
    assert status == 200, out
    assert out["output"] == "Patient has shortness of breath."
    assert out["cache"] == "miss" and out["adapter"] == "medical" and out["version"] == "1.0.0"
    assert out["request_id"] and set(out["timings_ms"]) >= {"router", "model", "total"}
    status, again = call(event(body=body))  # no stub queued: SageMaker must not be called
    assert status == 200 and again["cache"] == "hit" and again["output"] == out["output"]


def test_sampling_requests_bypass_the_cache(router) -> None:
    stub, _ = router
    body = _body(do_sample=True, temperature=0.8, seed=1)
    for _ in range(2):
        _expect(stub)
        status, out = call(event(body=body))
        assert status == 200 and out["cache"] == "bypass"


def test_forbidden_and_unknown_never_reach_sagemaker(router) -> None:
    status, out = call(event(body=_body(), arn=OTHER_ROLE))
    # Not yours answers exactly like no such adapter.
    assert status == 404 and out["error"] == "unknown adapter 'medical'"
    status, out = call(event(path="/v1/adapters/lora-test-medical/generate", body=_body()))
    assert status == 404  # a component name is not an adapter name
    status, out = call(event(path="/v1/adapters/nope/generate", body=_body()))
    assert status == 404 and "nope" in out["error"]
    status, out = call(event(body=_body(), arn=None))
    assert status == 403


def test_principal_arn_and_wildcard_tenants(router) -> None:
    stub, _ = router
    _expect(stub, "lora-test-by-arn")
    assert call(event(path="/v1/adapters/by-arn/generate", body=_body(), arn=OTHER_ROLE))[0] == 200
    _expect(stub, "lora-test-public")
    assert call(event(path="/v1/adapters/public/generate", body=_body(), arn=OTHER_ROLE))[0] == 200


def test_list_shows_only_the_callers_adapters(router) -> None:
    status, out = call(event("GET", "/v1/adapters"))
    assert status == 200
    assert [a["name"] for a in out["adapters"]] == ["medical", "public"]
    assert out["adapters"][0]["version"] == "1.0.0" and out["adapters"][0]["task"]
    status, out = call(event("GET", "/v1/adapters", arn=OTHER_ROLE))
    assert [a["name"] for a in out["adapters"]] == ["by-arn", "public"]
    assert call(event("GET", "/health"))[0] == 200


@pytest.mark.parametrize(
    "body",
    [
        {"inputs": "x", "parameters": {"max_new_tokens": 10_000}},
        {"inputs": "x", "parameters": {"temperature": 3}},
        {"inputs": "x", "parameters": {"top_p": 0}},
        {"inputs": "x", "parameters": {"stop": ["a", "b", "c"]}},
        {"inputs": "x", "messages": [{"role": "user", "content": "y"}]},
        {"inputs": "x", "component": "lora-test-public"},
        "not json",
        None,
    ],
)
def test_invalid_requests_are_400(router, body) -> None:
    status, out = call(event(body=body))
    assert status == 400, out
    assert out["error"] and out["request_id"]


def test_oversized_body_is_413(router) -> None:
    assert call(event(body={"inputs": "x" * 5000}))[0] == 413


@pytest.mark.parametrize(
    ("code", "http", "status"),
    [
        ("ModelError", 424, 502),
        ("ValidationError", 400, 400),
        ("ModelNotReadyException", 429, 503),
        ("ThrottlingException", 400, 429),
        ("ServiceUnavailable", 503, 503),
        ("InternalFailure", 500, 502),
    ],
)
def test_sagemaker_errors_map_to_clear_client_errors(router, code, http, status) -> None:
    stub, _ = router
    # Throttling is retried (SageMaker refused it before any container saw it); nothing else is.
    for _ in range(MAX_ATTEMPTS if code in RETRYABLE_CODES else 1):
        stub.add_client_error(
            "invoke_endpoint",
            service_error_code=code,
            service_message=f"detail of {code}",
            http_status_code=http,
        )
    got, out = call(event(body=_body()))
    assert got == status and out["code"] == code and out["request_id"]
    # SageMaker's and the container's own words are logged, never answered.
    assert f"detail of {code}" not in out["error"]


def test_timeout_is_504(router) -> None:
    _stub, cache = router
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    port = srv.getsockname()[1]
    hold: list[socket.socket] = []
    threading.Thread(
        target=lambda: [hold.append(srv.accept()[0]) for _ in range(4)], daemon=True
    ).start()
    client = make_client(f"http://127.0.0.1:{port}", "us-east-1", deadline_s=1.0)
    client.meta.config.retries = {"max_attempts": 1}
    deps = service.deps()
    service.configure(service.Dependencies(settings=deps.settings, cache=cache, client=client))
    try:
        status, out = call(event(body=_body()))
    finally:
        srv.close()
    assert status == 504 and out["code"] == "Timeout"


def test_redis_down_mid_run_bypasses_and_still_answers(sagemaker, own_redis) -> None:
    client, stub = sagemaker
    proc, rc = own_redis
    from contracts.settings import RouterSettings
    from tests.lambda_proxy.conftest import TABLE

    service.configure(
        service.Dependencies(RouterSettings(routing_table=TABLE), ResponseCache(rc, 3600), client)
    )
    try:
        body = _body()
        _expect(stub)
        assert call(event(body=body))[1]["cache"] == "miss"
        assert call(event(body=body))[1]["cache"] == "hit"
        proc.kill()
        proc.wait()
        _expect(stub)
        status, out = call(event(body=body))
        assert status == 200 and out["cache"] == "bypass"
        assert service.deps().cache.failures >= 1
    finally:
        service.configure(None)


def test_cache_key_covers_adapter_version_and_base_revision() -> None:
    from lambda_proxy.cache import cache_key

    req = {"inputs": "x", "parameters": {"max_new_tokens": 4}}
    keys = {
        cache_key("a", "1", "r1", req),
        cache_key("a", "2", "r1", req),
        cache_key("a", "1", "r2", req),
        cache_key("b", "1", "r1", req),
        cache_key("a", "1", "r1", {**req, "inputs": "y"}),
    }
    assert len(keys) == 5
    reordered = {"parameters": {"max_new_tokens": 4}, "inputs": "x"}
    assert cache_key("a", "1", "r1", req) == cache_key("a", "1", "r1", reordered)


def test_an_operator_principal_may_call_every_adapter_and_no_one_else_gains(router) -> None:
    stub, _ = router
    settings = service.deps().settings
    table = settings.routing_table.model_copy(
        update={"operators": ("arn:aws:iam::123456789012:role/intruder",)}
    )
    service.configure(
        service.Dependencies(
            settings=RouterSettings(routing_table=table),
            cache=service.deps().cache,
            client=service.deps().client,
        )
    )
    _expect(stub)
    status, out = call(event(body=_body(), arn=OTHER_ROLE))  # the role intruder's session
    assert status == 200, out
    stranger = "arn:aws:sts::123456789012:assumed-role/stranger/s"
    assert call(event(body=_body(), arn=stranger))[0] == 404
    status, listed = call(event("GET", "/v1/adapters", arn=OTHER_ROLE))
    assert status == 200
    assert {a["name"] for a in listed["adapters"]} == set(table.adapters)


def _chat(**fields) -> dict:
    return event(
        path="/v1/chat/completions",
        body={"model": "medical", "messages": [{"role": "user", "content": "x"}], **fields},
    )


@pytest.mark.parametrize(
    "route",
    [
        lambda: event(body=_body(stop=["\ud800"])),
        lambda: event(body={"inputs": "a\udfffb"}),
        lambda: event(body={"messages": [{"role": "user", "content": "\ud83d"}]}),
        lambda: event(body=_body(json_schema={"type": "object", "title": "\udc00"})),
        lambda: _chat(stop="\ud800"),
        lambda: _chat(messages=[{"role": "user", "content": "\ud800"}]),
    ],
)
def test_text_that_does_not_encode_is_a_400_before_the_quota_is_charged(router, route) -> None:
    spent = []
    quotas = service.deps().quotas
    real = quotas.check
    quotas.check = lambda *a, **k: spent.append(a) or real(*a, **k)  # type: ignore[method-assign]
    status, out = call(route())
    assert status == 400, out
    assert not spent  # nothing charged, and SageMaker never called (no stub queued)


@pytest.mark.parametrize(
    ("message", "field"),
    [
        ({"role": "user", "content": "x", "name": "bob"}, "name"),
        ({"role": "assistant", "content": "x", "tool_calls": []}, "tool_calls"),
        ({"role": "user", "content": "x", "anything": 1}, "anything"),
    ],
)
def test_openai_message_fields_that_are_not_honoured_are_a_400_naming_them(
    router, message, field
) -> None:
    status, out = call(_chat(messages=[message]))
    assert status == 400 and field in out["error"]["message"], out


def test_conflicting_openai_token_limits_are_refused(router) -> None:
    status, out = call(_chat(max_tokens=8, max_completion_tokens=16))
    assert status == 400 and "max_tokens" in out["error"]["message"], out
    stub, _ = router
    _expect(stub)
    assert call(_chat(max_tokens=8, max_completion_tokens=8))[0] == 200


@pytest.mark.parametrize(
    "body",
    [
        {"inputs": "x", "stream": "true"},
        {"inputs": "x", "stream": 1},
        {"inputs": "x", "parameters": {"max_new_tokens": True}},
        {"inputs": "x", "parameters": {"json_schema": {"type": "object", "maximum": float("nan")}}},
    ],
)
def test_loose_types_and_non_json_numbers_are_a_400(router, body) -> None:
    status, out = call(event(body=json.dumps(body)))
    assert status == 400, out


def test_an_event_body_with_a_raw_lone_surrogate_is_a_400(router) -> None:
    ev = event(body='{"inputs": "a' + chr(0xD800) + '"}')  # the raw character, no escape
    status, out = call(ev)
    assert status == 400, out
