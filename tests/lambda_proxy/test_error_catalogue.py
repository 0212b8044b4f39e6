"""The error catalogue (``contracts.errors``) as every door renders it: each code with its
status, OpenAI's type, and the header that tells a client whether to retry."""

from __future__ import annotations

import json

import pytest

from contracts.errors import CATALOGUE, SHOULD_RETRY, Canary, ErrorSpec, Retry
from lambda_proxy import handler, openai_api, streaming
from lambda_proxy.sagemaker import InvokeError
from lambda_proxy.service import RouterError, retry_headers, unanswered

ROWS = list(CATALOGUE.values())


def _advice(headers: dict[str, str]) -> Retry | None:
    if "Retry-After" in headers:
        return Retry.AFTER
    if headers.get(SHOULD_RETRY) == "false":
        return Retry.NEVER
    return None


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r.code)
@pytest.mark.parametrize("door", ["native", "chat", "completion"])
def test_every_door_renders_every_code(row: ErrorSpec, door: str) -> None:
    exc = RouterError(row.status, row.message, code=row.code)
    status, headers, raw = streaming.refusal(door, exc, "req-1")
    body = json.loads(raw)
    assert status == row.status
    if door == "native":
        assert body == handler.error_body(exc, "req-1")
        assert body["code"] == row.code and body["status"] == row.status
    else:
        assert body == openai_api.error_body(exc)
        assert body["error"]["code"] == row.code
        assert body["error"]["type"] == row.openai_type
    expected = {Retry.AFTER: Retry.AFTER, Retry.NEVER: Retry.NEVER}.get(row.retry)
    assert _advice(headers) == expected, headers
    if row.retry_after_s:
        assert headers["Retry-After"] == str(row.retry_after_s)


@pytest.mark.parametrize(
    "row", [r for r in ROWS if r.metric.startswith("Error")], ids=lambda r: r.code
)
def test_an_invocation_failure_advises_as_its_row_and_as_what_may_have_run(row) -> None:
    """The catalogue's retry column agrees with the invocation's own account of whether the
    generation may have run: ``x-should-retry: false`` exactly where it may have."""
    exc = InvokeError(row.status, row.message, row.code)
    advice = _advice(retry_headers(exc))
    assert (advice is Retry.NEVER) == exc.may_have_generated, row
    assert (advice is Retry.AFTER) == (row.retry is Retry.AFTER), row


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r.code)
def test_only_a_canarys_own_failure_is_its_silence(row: ErrorSpec) -> None:
    exc = InvokeError(row.status, row.message, row.code)
    assert unanswered(exc) == (row.canary is Canary.FAULT), row


def test_a_code_nobody_catalogued_or_a_status_not_its_own_is_refused_where_it_is_raised() -> None:
    with pytest.raises(KeyError):
        RouterError(400, "x", code="SomethingNew")
    with pytest.raises(ValueError, match="QuotaExceeded is 429"):
        RouterError(400, "x", code="QuotaExceeded")
    # A ModelError carries the container's own status where it describes the request.
    assert RouterError(413, "too long", code="ModelError").headers == {}
    assert RouterError(503, "busy", code="ModelError").headers == {"Retry-After": "5"}
