"""The router refuses what the model server would refuse: both read the same bounds."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from contracts.requests import MAX_SCHEMA_DEPTH, schema_depth


def _deep(levels: int) -> dict:
    schema: dict = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


@pytest.mark.parametrize(
    "params",
    [
        {"temperature": 0.005, "do_sample": True},
        {"temperature": 2.5},
        {"repetition_penalty": 0.05},
        {"repetition_penalty": 10.5},
        {"json_schema": _deep(MAX_SCHEMA_DEPTH)},
        {"json_schema": {"enum": ["x" * 70_000]}},
    ],
)
def test_a_request_outside_the_bounds_is_refused_by_both_parts(params: dict) -> None:
    from lambda_proxy.schema import GenerateRequest
    from runtime.server import Invocation

    with pytest.raises(ValidationError):
        GenerateRequest.model_validate({"inputs": "x", "parameters": params})
    if "json_schema" in params:
        from runtime.schemas import SchemaError, check_schema

        with pytest.raises(SchemaError):
            check_schema(params["json_schema"], max_bytes=64 * 1024)
    else:
        with pytest.raises(ValidationError):
            Invocation.model_validate({"inputs": "x", "parameters": params})


def test_a_request_at_the_bounds_is_taken_by_both_parts() -> None:
    from lambda_proxy.schema import GenerateRequest
    from runtime.schemas import check_schema
    from runtime.server import Invocation

    params = {"temperature": 0.01, "do_sample": True, "repetition_penalty": 10.0}
    GenerateRequest.model_validate({"inputs": "x", "parameters": params})
    Invocation.model_validate({"inputs": "x", "parameters": params})
    deepest = _deep(MAX_SCHEMA_DEPTH // 2 - 1)
    assert schema_depth(deepest) <= MAX_SCHEMA_DEPTH
    check_schema(deepest, max_bytes=64 * 1024)
    GenerateRequest.model_validate({"inputs": "x", "parameters": {"json_schema": deepest}})
