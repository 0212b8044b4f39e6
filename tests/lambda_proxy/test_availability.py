"""An adapter the local platform does not serve yet says why, in the router's fixed words: not
trained yet (503, retry later), not publishable with its gate's reason and how to serve it
anyway (409), or its training failed (409); /v1/models tells serving from not serving. A caller
who may not use the adapter still gets the unknown-adapter 404."""

from __future__ import annotations

import json

import pytest
import redis

from contracts.settings import RouterSettings
from lambda_proxy import service
from lambda_proxy.cache import ResponseCache
from tests.lambda_proxy.conftest import ALLOWED_ROLE, OTHER_ROLE, TABLE, call, event

STATES = {
    "medical": ("not publishable", "does not beat the nearest training label (CI low -0.03)"),
    "public": ("training", ""),
    "by-arn": ("failed", "RuntimeError: /tmp/secret/path exploded"),
}


class NoSageMaker:
    def invoke_endpoint(self, **_kw):
        raise AssertionError("a request for an adapter that is not served reached SageMaker")


@pytest.fixture
def router_with_states():
    client = redis.Redis(db=0)
    service.configure(
        service.Dependencies(
            RouterSettings(routing_table=TABLE),
            ResponseCache(client, 60),
            NoSageMaker(),
            availability=STATES.get,
        )
    )
    yield
    service.configure(None)


def test_a_not_publishable_adapter_names_its_state_reason_and_the_way_to_serve_it(
    router_with_states,
) -> None:
    status, out = call(event(body={"inputs": "pt 45yo m c/o sob"}))
    assert status == 409 and out["code"] == "AdapterNotPublishable", out
    assert "did not pass its evaluation gate" in out["error"]
    assert "nearest training label" in out["error"] and "--serve-unpublishable" in out["error"]


def test_an_adapter_in_training_asks_for_a_retry_later(router_with_states) -> None:
    ev = event(path="/v1/adapters/public/generate", body={"inputs": "hi"})
    out = __import__("lambda_proxy.handler", fromlist=["handler"]).handler(ev, _Ctx())
    assert out["statusCode"] == 503
    assert json.loads(out["body"])["code"] == "AdapterNotReady"
    headers = {k.lower(): v for k, v in (out.get("multiValueHeaders") or {}).items()}
    assert headers.get("retry-after") == ["30"], out


def test_a_failed_training_names_no_internals(router_with_states) -> None:
    arn = "arn:aws:sts::123456789012:assumed-role/intruder/session-9"
    status, out = call(event(path="/v1/adapters/by-arn/generate", body={"inputs": "x"}, arn=arn))
    assert status == 409 and out["code"] == "AdapterTrainingFailed"
    assert "/tmp/secret" not in out["error"] and "RuntimeError" not in out["error"]


def test_the_openai_door_and_models_list_say_the_same(router_with_states) -> None:
    body = {"model": "medical", "messages": [{"role": "user", "content": "x"}], "max_tokens": 4}
    status, out = call(event(path="/v1/chat/completions", body=body))
    assert status == 409 and out["error"]["code"] == "AdapterNotPublishable"
    status, models = call(event("GET", "/v1/models", None))
    states = {m["id"]: m["state"] for m in models["data"]}
    assert states == {"medical": "not publishable", "public": "training"}


def test_a_caller_who_may_not_use_it_still_gets_the_unknown_adapter_404(
    router_with_states,
) -> None:
    status, out = call(event(body={"inputs": "x"}, arn=OTHER_ROLE))
    assert status == 404 and out["code"] == "UnknownAdapter"
    assert ALLOWED_ROLE  # the allowed caller of the tests above


class _Ctx:
    function_name, memory_limit_in_mb, aws_request_id = "router", 512, "req-1"
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:router"
