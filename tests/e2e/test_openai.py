"""The official ``openai`` client against the local gateway: the OpenAI-compatible routes run the
router unchanged, with the adapter as ``model``."""

from __future__ import annotations

import openai
import pytest

from tests.e2e.test_platform import _deployment

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def client(platform) -> openai.OpenAI:
    # The local gateway stands in for SigV4 (it calls the router as the role `demo`); the
    # deployed API takes lambda_proxy.client.SigV4Auth as the http client's auth.
    return openai.OpenAI(base_url=f"{platform.gateway}/v1", api_key="unused", max_retries=0)


def test_chat_completion(client, platform) -> None:
    adapter = _deployment(platform).adapters[0]
    out = client.chat.completions.create(
        model=adapter.name,
        messages=[{"role": "user", "content": "pt 45yo m c/o sob"}],
        max_tokens=6,
        temperature=0,
        seed=3,
    )
    assert out.object == "chat.completion" and out.model == adapter.name
    choice = out.choices[0]
    assert choice.message.role == "assistant" and isinstance(choice.message.content, str)
    assert choice.finish_reason in ("stop", "length")
    assert 0 < out.usage.completion_tokens <= 6
    assert out.usage.total_tokens == out.usage.prompt_tokens + out.usage.completion_tokens


def test_completion(client, platform) -> None:
    adapter = _deployment(platform).adapters[-1]
    out = client.completions.create(
        model=adapter.name, prompt="Alamak, I forgot my wallet lah", max_tokens=5, temperature=0
    )
    assert out.object == "text_completion" and isinstance(out.choices[0].text, str)
    assert out.usage.completion_tokens <= 5


def test_models_lists_the_adapters_this_caller_may_use(client, platform) -> None:
    ids = {m.id for m in client.models.list()}
    dep = _deployment(platform)
    allowed = {
        a.name
        for a in dep.adapters
        if "demo" in a.entry.allow.tenants or "*" in a.entry.allow.tenants
    }
    assert ids == allowed and ids


def test_an_unknown_model_is_openais_404(client) -> None:
    with pytest.raises(openai.NotFoundError) as err:
        client.chat.completions.create(
            model="no-such-adapter", max_tokens=4, messages=[{"role": "user", "content": "hi"}]
        )
    assert err.value.body["code"] == "model_not_found"


def test_a_bad_parameter_is_openais_400_naming_it(client, platform) -> None:
    adapter = _deployment(platform).adapters[0]
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(
            model=adapter.name,
            temperature=5,
            max_tokens=4,
            messages=[{"role": "user", "content": "hi"}],
        )
    assert err.value.body["param"] == "temperature"
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(
            model=adapter.name, n=2, max_tokens=4, messages=[{"role": "user", "content": "hi"}]
        )
    assert err.value.body["param"] == "n"


def test_sales_json_is_decoded_to_the_catalogs_schema_natively_and_through_openai(
    client, platform
) -> None:
    """Neither request names a schema; the catalog's sales-record applies on both routes. The
    tiny base's few-step adapter cannot finish a record within budget, so what shows here is
    the constraint itself: every answer is JSON from its first character on (the trained
    adapter's answers validate in full: benchmarks/structured.py, RESULTS.md)."""
    import httpx

    from training import datasets

    texts = [r.raw for r in datasets.load("sales_json").test[:3]]
    answers = []
    with httpx.Client(base_url=platform.gateway, timeout=120) as http:
        for text in texts:
            r = http.post(
                "/v1/adapters/sales-json/generate",
                json={"inputs": text, "parameters": {"max_new_tokens": 24}},
            )
            assert r.status_code == 200, r.text
            answers.append(r.json()["output"])
    for text in texts:
        out = client.chat.completions.create(
            model="sales-json",
            max_tokens=24,
            temperature=0,
            messages=[{"role": "user", "content": text}],
        )
        answers.append(out.choices[0].message.content)
    for answer in answers:
        assert answer.startswith('{"'), answer


def test_openai_response_format_json_schema_constrains_any_adapter(client, platform) -> None:
    import json

    from jsonschema import Draft202012Validator

    schema = {
        "type": "object",
        "additionalProperties": False,
        "required": ["urgent"],
        "properties": {"urgent": {"type": "boolean"}},
    }
    adapter = _deployment(platform).adapters[0]
    out = client.chat.completions.create(
        model=adapter.name,
        max_tokens=32,
        temperature=0,
        messages=[{"role": "user", "content": "pt 45yo m c/o sob"}],
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "triage", "schema": schema, "strict": True},
        },
    )
    Draft202012Validator(schema).validate(json.loads(out.choices[0].message.content))
