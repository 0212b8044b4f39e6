"""Every served request is one usage record: tenant, adapter, version and weights, door,
status, cache hit, tokens, latency; the metric dimensions stay bounded."""

from __future__ import annotations

import io
import json
import uuid

import pytest

from lambda_proxy import usage
from tests.lambda_proxy.conftest import OTHER_ROLE, call, event, invoke_params, model_answer


@pytest.fixture
def lines():
    """What the router's logger writes (the Lambda's stdout, which CloudWatch Logs keeps)."""
    buf = io.StringIO()
    handler = usage.logger.registered_handler
    old = handler.setStream(buf)
    yield buf
    handler.setStream(old)


@pytest.fixture
def records():
    got: list[dict] = []
    usage.SINKS.append(got.append)
    yield got
    usage.SINKS.remove(got.append)


def _expect(stub, component: str = "lora-test-medical") -> None:
    stub.add_response(
        "invoke_endpoint",
        model_answer(),
        invoke_params(component),
    )


def test_an_answer_and_its_cache_hit_are_two_records_of_the_callers_tenant(
    router, records, lines, capfd
) -> None:
    stub, _ = router
    body = {"inputs": f"pt c/o sob {uuid.uuid4().hex}", "parameters": {"max_new_tokens": 8}}
    _expect(stub)
    assert call(event(body=body))[0] == 200
    assert call(event(body=body))[0] == 200  # the cache answers
    first, second = records
    assert first == {
        **first,
        "tenant": "123456789012:clinic-north",
        "tenant_dimension": "123456789012:clinic-north",
        "adapter": "medical",
        "version": "1.0.0",
        "weights_sha256": "0" * 64,
        "route": "native",
        "status": 200,
        "cache_hit": 0,
        "input_tokens": 5,
        "output_tokens": 6,
    }
    assert first["latency_ms"] > 0 and first["request_id"]
    assert second["cache_hit"] == 1 and second["output_tokens"] == 6
    logged = [json.loads(x) for x in lines.getvalue().splitlines() if x.startswith("{")]
    assert [x["usage"] for x in logged if x.get("message") == "usage"] == records, (
        "the log line carries the whole record"
    )
    out = capfd.readouterr().out
    emf = [json.loads(x) for x in out.splitlines() if '"_aws"' in x and "Requests" in x]
    dims = sorted(tuple(d) for x in emf for d in x["_aws"]["CloudWatchMetrics"][0]["Dimensions"])
    assert dims and all(set(d) == {"service", "tenant"} for d in dims), dims
    assert not any("adapter" in d for d in dims), "no metric per adapter"


def test_a_wildcard_caller_is_other_in_the_metric_and_itself_in_the_log(router, records) -> None:
    stub, _ = router
    _expect(stub, "lora-test-public")
    ev = event(path="/v1/adapters/public/generate", body={"inputs": "hello"}, arn=OTHER_ROLE)
    assert call(ev)[0] == 200
    (r,) = records
    assert r["tenant"] == "123456789012:intruder" and r["tenant_dimension"] == usage.OTHER


def test_a_failed_invocation_is_a_record_with_its_status_and_no_tokens(router, records) -> None:
    stub, _ = router
    stub.add_client_error(
        "invoke_endpoint",
        service_error_code="ModelError",
        service_message="boom",
        http_status_code=424,
        response_meta={"HTTPStatusCode": 424},
    )
    status, _ = call(event(body={"inputs": f"x {uuid.uuid4().hex}"}))
    (r,) = records
    assert r["status"] == status >= 400 and r["input_tokens"] == r["output_tokens"] == 0


def test_a_refused_identity_is_not_usage(router, records) -> None:
    # An adapter the caller may not use answers as if it did not exist.
    assert call(event(arn=OTHER_ROLE, body={"inputs": "x"}))[0] in (403, 404)
    assert records == []
