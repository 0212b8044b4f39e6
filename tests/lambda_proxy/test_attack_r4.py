"""Router attack, round four (shared/reviews/2026-12-router-attack-r4.md): each defect as a
caller meets it, through the router's own doors (the Powertools handler, the web app, the
official ``openai`` client). Every test here failed on the router before its fix."""

from __future__ import annotations

import io
import json
from typing import Any

import httpx
import openai
import pytest
import redis
from botocore.exceptions import ClientError, ReadTimeoutError
from botocore.response import StreamingBody
from starlette.testclient import TestClient

from contracts.settings import RouterSettings
from lambda_proxy import service
from lambda_proxy.cache import ResponseCache
from lambda_proxy.web import app
from tests.lambda_proxy.conftest import call, event

ACCOUNT = "123456789012"
SSO_ROLE = f"arn:aws:iam::{ACCOUNT}:role/aws-reserved/sso.amazonaws.com/AWSReservedSSO_OnCall_abc1"
SSO_SESSION = f"arn:aws:sts::{ACCOUNT}:assumed-role/AWSReservedSSO_OnCall_abc1/alice@example.com"
WHO = f"arn:aws:sts::{ACCOUNT}:assumed-role/t/s"


class FakeSM:
    """A SageMaker runtime client that records each call and answers or raises."""

    def __init__(self, answer: dict[str, Any] | None = None, error: Exception | None = None):
        self.calls: list[dict[str, Any]] = []
        self.answer, self.error = answer, error
        self.lines: list[dict[str, Any]] | None = None

    def invoke_endpoint(self, **kw: Any) -> dict[str, Any]:
        self.calls.append(kw)
        if self.error is not None:
            raise self.error
        raw = json.dumps(self.answer).encode()
        return {"Body": StreamingBody(io.BytesIO(raw), len(raw))}

    def invoke_endpoint_with_response_stream(self, **kw: Any) -> dict[str, Any]:
        self.calls.append(kw)
        if self.error is not None:
            raise self.error
        lines = self.lines or []

        class Events:
            def __iter__(self):
                for line in lines:
                    yield {"PayloadPart": {"Bytes": json.dumps(line).encode() + b"\n"}}

            def close(self) -> None:
                pass

        return {"Body": Events()}


def answer(name: str = "m", version: str = "1", **over: Any) -> dict[str, Any]:
    return {
        "generated_text": "ok",
        "finish_reason": "stop",
        "adapter": f"c-{name}",
        "artifact": {"name": name, "version": version, "sha256": None},
        "usage": {"input_tokens": 3, "output_tokens": 1},
        **over,
    }


def table(**route: Any) -> dict[str, Any]:
    adapter = {"component": "c-m", "version": "1", "tenants": ["*"], **route}
    return {"endpoint": "e", "base_component": "b", "adapters": {"m": adapter}}


@pytest.fixture
def r13():
    client = redis.Redis(host="127.0.0.1", port=6379, db=13)
    client.flushdb()
    yield client
    client.flushdb()
    service.configure(None)


def configure(r13: redis.Redis, routes: dict[str, Any], fake: FakeSM, **settings: Any) -> None:
    r13.flushdb()
    service.configure(
        service.Dependencies(
            RouterSettings(routing_table=routes, **settings),
            ResponseCache(r13, 3600),
            fake,
            stream_client=fake,
        )
    )


def ev(path: str, body: Any, arn: str | None, method: str = "POST") -> dict[str, Any]:
    e = event(method, path, body, arn)
    e["requestContext"]["accountId"] = ACCOUNT
    return e


def context_header(arn: str | None = WHO) -> dict[str, str]:
    identity = {"userArn": arn} if arn else {}
    ctx = {"requestId": "r", "accountId": ACCOUNT, "identity": identity}
    return {"content-type": "application/json", "x-amzn-request-context": json.dumps(ctx)}


# -- D1: roles with a path (every SSO role) match their sessions ------------------------------


def test_an_sso_operator_listed_by_its_real_arn_is_an_operator(r13):
    routes = {
        "endpoint": "e",
        "base_component": "b",
        "operators": [SSO_ROLE],
        "adapters": {"ops": {"component": "c-ops", "version": "1", "principals": [SSO_ROLE]}},
    }
    configure(r13, routes, FakeSM(answer("ops", "1")))
    status, body = call(ev("/v1/adapters/ops/generate", {"inputs": "x"}, SSO_SESSION))
    assert status == 200, body
    status, body = call(ev("/health", None, SSO_SESSION, "GET"))
    assert status == 200 and body.get("endpoint") == "e", body


def test_a_role_of_the_same_name_in_another_account_is_still_refused(r13):
    routes = table(tenants=[], principals=[SSO_ROLE])
    configure(r13, routes, FakeSM(answer()))
    stranger = "arn:aws:sts::999999999999:assumed-role/AWSReservedSSO_OnCall_abc1/mallory"
    assert call(ev("/v1/adapters/m/generate", {"inputs": "x"}, stranger))[0] == 404


def test_make_check_says_how_each_listed_arn_is_matched(capsys):
    from config.__main__ import _principal_notes
    from config.loader import load_deployment

    dep = load_deployment("dev")
    dep.env.router.operators.append(SSO_ROLE)
    try:
        notes = "\n".join(_principal_notes(dep))
    finally:
        dep.env.router.operators.remove(SSO_ROLE)
    assert "AWSReservedSSO_OnCall_abc1" in notes and "path" in notes and "is ignored" in notes


# -- D2: the official openai client does not re-run a generation --------------------------


def _openai_client(web: TestClient) -> openai.OpenAI:
    def relay(req: httpx.Request) -> httpx.Response:
        r = web.request(req.method, req.url.path, content=req.content, headers=context_header())
        return httpx.Response(r.status_code, headers=r.headers, content=r.content)

    return openai.OpenAI(
        base_url="http://router/v1",
        api_key="unused",
        max_retries=2,
        http_client=httpx.Client(transport=httpx.MockTransport(relay)),
    )


def _container_error(status: int) -> ClientError:
    return ClientError(
        {
            "Error": {"Code": "ModelError", "Message": "boom"},
            "OriginalStatusCode": status,
            "ResponseMetadata": {"HTTPStatusCode": 424},
        },
        "InvokeEndpoint",
    )


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (ReadTimeoutError(endpoint_url="https://runtime.sagemaker"), 504),
        (_container_error(500), 502),
    ],
)
@pytest.mark.parametrize("stream", [False, True])
def test_the_openai_client_sends_a_failed_generation_once(r13, error, status, stream):
    fake = FakeSM(error=error)
    configure(r13, table(), fake)
    client = _openai_client(TestClient(app))
    with pytest.raises(openai.APIStatusError) as failed:
        client.chat.completions.create(
            model="m",
            max_tokens=8,
            temperature=0,
            stream=stream,
            messages=[{"role": "user", "content": "x"}],
        )
    assert failed.value.status_code == status
    assert failed.value.response.headers.get("x-should-retry") == "false"
    assert len(fake.calls) == 1, "the client sent the generation again"


def test_a_busy_container_stays_retryable(r13):
    configure(r13, table(), FakeSM(error=_container_error(503)))
    r = TestClient(app).post(
        "/v1/chat/completions",
        json={"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "x"}]},
        headers=context_header(),
    )
    assert r.status_code == 503 and r.headers["retry-after"] == "5"
    assert "x-should-retry" not in r.headers


# -- D3: the container's deadline is a 504, and not a canary's fault ------------------------


CANARY = {
    "component": "c-m-canary",
    "version": "2",
    "weight": 100,
    "max_error_rate": 0.25,
    "window_s": 300,
    "min_requests": 4,
}


def test_a_container_deadline_in_a_stream_is_a_504_and_keeps_the_canary(r13):
    fake = FakeSM()
    fake.lines = [{"token": "x"}, {"error": "request timed out", "status": 504}]
    configure(r13, table(canary=CANARY), fake)
    web = TestClient(app)
    for i in range(6):
        r = web.post(
            "/v1/adapters/m/generate",
            json={"inputs": f"x{i}", "stream": True},
            headers=context_header(),
        )
        last = r.text.strip().splitlines()[-1]
        assert '"status": 504' in last and '"Timeout"' in last, last
    assert not r13.exists("lora:canary:v1:m:2:off")


def test_a_buffered_container_deadline_is_a_504(r13):
    configure(r13, table(), FakeSM(error=_container_error(504)))
    status, body = call(ev("/v1/adapters/m/generate", {"inputs": "x"}, WHO))
    assert (status, body["code"]) == (504, "Timeout")


def test_one_tenant_whose_inputs_fail_cannot_roll_back_a_canary_for_everyone(r13):
    # Two tenants the catalog names: two voices (roles a wildcard admits are one, r5 D2).
    fake = FakeSM(error=_container_error(500))
    route = table(canary={**CANARY, "min_callers": 2}, tenants=["t", "another-team"])
    configure(r13, route, fake)
    for i in range(10):
        call(ev("/v1/adapters/m/generate", {"inputs": f"bad {i}"}, WHO))
    assert not r13.exists("lora:canary:v1:m:2:off"), "one caller ended the canary"
    other = f"arn:aws:sts::{ACCOUNT}:assumed-role/another-team/s"
    call(ev("/v1/adapters/m/generate", {"inputs": "bad"}, other))
    assert r13.exists("lora:canary:v1:m:2:off"), "two failing callers must roll it back"


def test_the_catalog_caps_min_callers_at_the_callers_an_entry_admits():
    from config.loader import load_deployment

    for dep in (load_deployment("dev"),):
        for a in dep.adapters:
            route = dep.routing_table().adapters[a.name]
            if route.canary is not None and "*" not in a.entry.allow.tenants:
                admitted = len(a.entry.allow.tenants) + len(a.entry.allow.principals)
                assert route.canary.min_callers <= max(1, admitted)


# -- D4, D5: the prompt estimate is an upper bound; chat turns cost their template ----------


@pytest.mark.parametrize(
    ("text", "real_tokens"),
    # The real counts the attack measured with SmolLM2's tokenizer.
    [("8491027365" * 200, 2000), ("😀" * 800, 2400), ("中" * 760, 1600), ("é" * 1100, 2200)],
)
def test_hostile_prompts_are_charged_at_least_their_tokens(r13, text, real_tokens):
    configure(r13, table(), FakeSM(answer()), quota_tokens_per_minute=100_000)
    body = {"inputs": text, "parameters": {"max_new_tokens": 1}}
    assert call(ev("/v1/adapters/m/generate", body, WHO))[0] == 200
    level = float(r13.hget(f"lora:quota:v2:{ACCOUNT}:t:*:tok", "level"))
    assert 100_000 - level - 1 >= real_tokens


def test_a_chat_is_charged_its_template_per_message(r13):
    configure(r13, table(), FakeSM(answer()), quota_tokens_per_minute=100_000)
    msgs = [{"role": "user" if i % 2 == 0 else "assistant", "content": "k"} for i in range(64)]
    body = {"model": "m", "max_tokens": 1, "temperature": 0, "messages": msgs}
    assert call(ev("/v1/chat/completions", body, WHO))[0] == 200
    charged = 100_000 - float(r13.hget(f"lora:quota:v2:{ACCOUNT}:t:*:tok", "level"))
    assert charged >= 441  # the SmolLM2 template's real count for these 64 messages


# -- D6, D7: only the contract's fields reach a caller and the cache ------------------------


def test_an_answer_carries_only_the_contracts_fields(r13):
    ans = answer(
        usage={"input_tokens": 3, "output_tokens": 1, "debug": "SECRET"},
        timings_ms={"host": "ip-10-0-3-17.ec2.internal", "engine": 4.0},
    )
    ans["artifact"]["uri"] = "s3://lora-prod-artifacts/m/1/model.tar.gz"
    ans["debug"] = "SECRET"
    configure(r13, table(), FakeSM(ans))
    status, body = call(ev("/v1/adapters/m/generate", {"inputs": "x"}, WHO))
    assert status == 200
    text = json.dumps(body)
    assert "SECRET" not in text and "s3://" not in text and "ec2.internal" not in text, text
    assert body["usage"] == {"input_tokens": 3, "output_tokens": 1}
    assert body["timings_ms"]["engine"] == {"engine": 4.0}
    cached = [json.loads(r13.get(k)) for k in r13.scan_iter("lora:v1:*")]
    assert cached and all("SECRET" not in json.dumps(c) for c in cached)


def test_an_answer_with_a_null_usage_never_breaks_the_openai_doors(r13):
    fake = FakeSM(answer(usage={"input_tokens": None, "output_tokens": 1}))
    configure(r13, table(), fake)
    body = {"inputs": "x", "parameters": {"max_new_tokens": 8}}
    assert call(ev("/v1/adapters/m/generate", body, WHO))[0] == 200
    completion = {"model": "m", "prompt": "x", "max_tokens": 8, "temperature": 0}
    for _ in range(2):
        status, out = call(ev("/v1/completions", completion, WHO))
        assert status == 200, out
        assert out["usage"]["prompt_tokens"] == 0 and out["usage"]["completion_tokens"] == 1


def test_a_cached_answer_from_before_the_check_is_read_tolerantly(r13):
    from lambda_proxy.openai_api import usage

    assert usage({"usage": {"input_tokens": "many", "output_tokens": None}})["total_tokens"] == 0


# -- D8: identity before the body ------------------------------------------------------------


def test_the_openai_doors_check_identity_before_the_body(r13):
    configure(r13, table(), FakeSM(answer()))
    status, _ = call(ev("/v1/chat/completions", {"model": "m", "messages": []}, None))
    assert status == 403
    status, _ = call(ev("/v1/chat/completions", "x" * 10_000_000, None))
    assert status == 403


def test_the_web_app_never_parses_a_body_without_identity_or_over_the_limit(r13, monkeypatch):
    from lambda_proxy import web

    configure(r13, table(), FakeSM(answer()))
    parsed: list[int] = []
    real = web.stream_kind
    monkeypatch.setattr(web, "stream_kind", lambda *a: parsed.append(1) or real(*a))
    client = TestClient(app)
    body = '{"model":"m","stream":true,"p":"' + "x" * 7_000_000 + '"}'
    assert (
        client.post("/v1/chat/completions", content=body, headers=context_header()).status_code
        == 413
    )
    assert (
        client.post("/v1/chat/completions", content="{}", headers=context_header(None)).status_code
        == 403
    )
    assert parsed == []


# -- tidy: our own codes; a Redis blip does not refill a tenant's bucket --------------------


def test_error_codes_are_the_routers_own_not_botocore_classes(r13):
    from botocore.exceptions import EndpointConnectionError, NoCredentialsError

    for error in (EndpointConnectionError(endpoint_url="https://x"), NoCredentialsError()):
        configure(r13, table(), FakeSM(error=error))
        status, body = call(ev("/v1/adapters/m/generate", {"inputs": "x"}, WHO))
        assert status == 502 and body["code"] == "SageMakerUnreachable"
    denied = ClientError({"Error": {"Code": "AccessDeniedException"}}, "InvokeEndpoint")
    configure(r13, table(), FakeSM(error=denied))
    assert call(ev("/v1/adapters/m/generate", {"inputs": "x"}, WHO))[1]["code"] == "SageMakerError"


def test_a_redis_blip_does_not_give_a_tenant_a_fresh_bucket():
    from lambda_proxy.quota import Limits, Quotas

    class Blinking:
        up = True

        def register_script(self, _source: str):
            def run(keys: list[str], args: list[Any]) -> list[int]:
                if not self.up:
                    raise redis.ConnectionError("blip")
                return [0, 0]

            return run

    blinking = Blinking()
    quotas = Quotas(blinking, Limits(requests_per_minute=5))  # type: ignore[arg-type]
    assert all(quotas.check("t", "m", 1, now=100.0).allowed for _ in range(5))
    blinking.up = False
    assert not quotas.check("t", "m", 1, now=100.5).allowed
