"""4,000 malformed events (native and OpenAI routes): each gets a 4xx JSON error, none raises,
none reaches SageMaker (the stubbed client has no responses queued, so any call would fail the
test)."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lambda_proxy import handler as h
from lambda_proxy import service
from tests.lambda_proxy.conftest import Context, event, model_answer

#: Text as JSON can carry it: with lone surrogates, which no UTF-8 encoder takes.
texts = st.text(max_size=30) | st.sampled_from(["\ud800", "a\udfffb", "\udc00" * 3, "\ud83d"])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | texts,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=12,
)

bodies = st.one_of(
    st.text(max_size=200),
    json_values.map(json.dumps),
    st.fixed_dictionaries(
        {},
        optional={
            "inputs": json_values,
            "messages": json_values,
            "parameters": st.dictionaries(
                st.sampled_from(["max_new_tokens", "temperature", "top_p", "stop", "seed", "x"]),
                json_values,
                max_size=4,
            ),
            "stream": json_values,
            "component": st.text(max_size=20),
        },
    ).map(json.dumps),
)


def _bad_event(base: dict, field: str, value) -> dict:
    ev = dict(base)
    ev[field] = value
    return ev


raw_events = st.one_of(
    json_values,
    st.builds(
        _bad_event,
        st.just(event()),
        st.sampled_from(
            [
                "httpMethod",
                "path",
                "headers",
                "body",
                "requestContext",
                "queryStringParameters",
                "isBase64Encoded",
            ]
        ),
        json_values.filter(lambda v: not isinstance(v, str)),
    ),
)


def _check(out) -> None:
    assert isinstance(out, dict)
    assert 400 <= out["statusCode"] < 500, out
    assert isinstance(json.loads(out["body"]), dict)


@settings(max_examples=1500, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    body=bodies,
    path=st.sampled_from(
        [
            "/v1/adapters/medical/generate",
            "/v1/adapters/%00/generate",
            "/v1/adapters/../generate",
            "/nope",
            "/v1/adapters/x/generate",
        ]
    ),
)
def test_malformed_bodies_and_paths(router, body, path) -> None:
    ev = event(body=body, path=path)
    try:
        parsed = json.loads(body)
        valid_prompt = (
            isinstance(parsed, dict) and isinstance(parsed.get("inputs"), str) and parsed["inputs"]
        )
    except ValueError:
        valid_prompt = False
    if valid_prompt and path == "/v1/adapters/medical/generate":
        return  # a well-formed request is not this test's subject
    _check(h.handler(ev, Context()))  # the stubber has no responses: any SageMaker call fails


@settings(max_examples=1500, deadline=None, suppress_health_check=list(HealthCheck))
@given(ev=raw_events)
def test_malformed_events(router, ev) -> None:
    _check(h.handler(ev, Context()))


messages = st.lists(
    st.fixed_dictionaries(
        {
            "role": st.sampled_from(["user", "system", "assistant", "tool", "x"]),
            "content": texts | json_values,
        },
        optional={"name": texts, "tool_calls": json_values, "x": json_values},
    ),
    max_size=3,
)

openai_bodies = st.fixed_dictionaries(
    {"model": st.sampled_from(["medical", "public", "nope"]) | texts},
    optional={
        "messages": messages | json_values,
        "prompt": texts | json_values,
        "max_tokens": json_values,
        "max_completion_tokens": json_values,
        "stop": texts | st.lists(texts, max_size=3) | json_values,
        "response_format": json_values,
        "n": json_values,
        "seed": json_values,
        "x": json_values,
    },
).map(json.dumps)


class Answering:
    """A SageMaker client that answers every call as the medical adapter's container."""

    def invoke_endpoint(self, **_: object) -> dict:
        return model_answer()


@settings(max_examples=1000, deadline=None, suppress_health_check=list(HealthCheck))
@given(body=openai_bodies, path=st.sampled_from(["/v1/chat/completions", "/v1/completions"]))
def test_malformed_openai_requests(router, body, path) -> None:
    """Some of these are valid requests (the container answers them); none is a 5xx."""
    _, cache = router
    settings_ = service.deps().settings
    service.configure(service.Dependencies(settings_, cache, Answering()))
    out = h.handler(event(body=body, path=path), Context())
    assert out["statusCode"] == 200 or 400 <= out["statusCode"] < 500, out
    assert isinstance(json.loads(out["body"]), dict)
