"""Identity before the body: the OpenAI doors and the web app check who calls before they
parse what was sent, and refuse a body over the limit unread."""

from __future__ import annotations

from starlette.testclient import TestClient

from lambda_proxy.web import app
from tests.lambda_proxy.conftest import call
from tests.lambda_proxy.doors import (
    FakeSM,
    answer,
    configure,
    context_header,
    ev,
    table,
)


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
