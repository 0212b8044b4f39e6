"""JSON-schema output through the router: a request's schema and the catalog's default reach
the container, the cache key holds the schema, and OpenAI's response_format maps onto it."""

from __future__ import annotations

import copy
import json
import uuid
from typing import Any

import pytest

from contracts.settings import RouterSettings
from lambda_proxy import service
from lambda_proxy.cache import ResponseCache
from tests.lambda_proxy.conftest import TABLE, call, event, model_answer

RECORD = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
OTHER = {"type": "object", "properties": {"s": {"type": "string"}}, "required": ["s"]}


class Recorder:
    """A SageMaker client that records what the router sends and answers like the runtime."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def invoke_endpoint(self, **kw: Any) -> dict[str, Any]:
        self.sent.append(json.loads(kw["Body"]))
        return model_answer('{"n": 3}')


@pytest.fixture
def recorder(redis_client):
    table = copy.deepcopy(TABLE)
    table["adapters"]["medical"]["json_schema"] = RECORD  # the catalog's default
    fake = Recorder()
    settings = RouterSettings(routing_table=table, max_new_tokens_cap=256, max_body_bytes=200_000)
    service.configure(
        service.Dependencies(
            settings=settings, cache=ResponseCache(redis_client, 3600), client=fake
        )
    )
    yield fake
    service.configure(None)


def _ask(**params: Any) -> tuple[int, dict[str, Any]]:
    body = {"inputs": f"deal {uuid.uuid4().hex}", "parameters": {"max_new_tokens": 16, **params}}
    return call(event(body=body))


def test_the_catalogs_default_schema_reaches_the_container(recorder) -> None:
    status, out = _ask()
    assert status == 200, out
    assert recorder.sent[-1]["parameters"]["json_schema"] == RECORD


def test_a_requests_own_schema_wins_and_is_part_of_the_cache_key(recorder) -> None:
    body = {"inputs": f"same prompt {uuid.uuid4().hex}", "parameters": {"max_new_tokens": 16}}
    assert call(event(body=body))[1]["cache"] in ("miss", "hit")
    own = {**body, "parameters": {**body["parameters"], "json_schema": OTHER}}
    status, out = call(event(body=own))
    assert status == 200 and out["cache"] == "miss", out  # another schema: another answer
    assert recorder.sent[-1]["parameters"]["json_schema"] == OTHER
    assert call(event(body=own))[1]["cache"] == "hit"


@pytest.mark.parametrize("schema", [[1, 2], "object", {"a": "x" * 70_000}])
def test_a_schema_that_is_not_an_object_or_too_large_is_a_400(recorder, schema) -> None:
    status, out = _ask(json_schema=schema)
    assert status == 400, out
    assert not recorder.sent


def test_openai_response_format_maps_onto_the_schema(recorder) -> None:
    from lambda_proxy.openai_api import ChatRequest, _native

    def native(fmt: dict[str, Any] | None) -> dict[str, Any]:
        req = ChatRequest.model_validate(
            {
                "model": "medical",
                "response_format": fmt,
                "messages": [{"role": "user", "content": "hi"}],
            }
        )
        return _native(req, {"messages": [{"role": "user", "content": "hi"}]})["parameters"]

    js = {"type": "json_schema", "json_schema": {"name": "rec", "schema": OTHER, "strict": True}}
    assert native(js)["json_schema"] == OTHER
    assert native({"type": "json_object"})["json_schema"] == {"type": "object"}
    assert "json_schema" not in native({"type": "text"})
    assert "json_schema" not in native(None)
