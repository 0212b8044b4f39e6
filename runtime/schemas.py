"""JSON schemas a request (or an adapter's manifest) asks the output to follow.

The schema is compiled into a grammar by vLLM's structured-output backend (xgrammar, with
guidance and outlines as its fall-backs), whose cost grows with the schema; so a schema is
bounded in bytes and nesting, and checked as a JSON Schema (``jsonschema``'s metaschema check)
before it reaches the engine, where a malformed one would fail the request as a 500.
"""

from __future__ import annotations

from typing import Any

from contracts.requests import schema_problem


class SchemaError(ValueError):
    """The schema is not usable; the message says why."""


def check_schema(schema: Any, *, max_bytes: int) -> dict[str, Any]:
    """The schema, if it is a JSON object within the bounds and a valid JSON Schema."""
    if (problem := schema_problem(schema, max_bytes)) is not None:
        raise SchemaError(problem)
    from jsonschema import exceptions, validators

    try:
        validators.validator_for(schema).check_schema(schema)
    except exceptions.SchemaError as exc:
        raise SchemaError(f"is not a valid JSON Schema: {exc.message}") from None
    return schema
