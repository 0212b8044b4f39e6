"""JSON schemas a request (or an adapter's manifest) asks the output to follow.

The schema is compiled into a grammar by vLLM's structured-output backend (xgrammar, with
guidance and outlines as its fall-backs), whose cost grows with the schema; so a schema is
bounded in bytes and nesting, and checked as a JSON Schema (``jsonschema``'s metaschema check)
before it reaches the engine, where a malformed one would fail the request as a 500.
"""

from __future__ import annotations

import json
from typing import Any

#: Deepest nesting of objects and arrays a schema may have.
MAX_DEPTH = 32


class SchemaError(ValueError):
    """The schema is not usable; the message says why."""


def _depth(node: Any, level: int = 0) -> int:
    if level > MAX_DEPTH:
        return level
    if isinstance(node, dict):
        return max((_depth(v, level + 1) for v in node.values()), default=level)
    if isinstance(node, list):
        return max((_depth(v, level + 1) for v in node), default=level)
    return level


def check_schema(schema: Any, *, max_bytes: int) -> dict[str, Any]:
    """The schema, if it is a JSON object within the bounds and a valid JSON Schema."""
    if not isinstance(schema, dict):
        raise SchemaError("must be a JSON object (a JSON Schema)")
    size = len(json.dumps(schema, separators=(",", ":")).encode())
    if size > max_bytes:
        raise SchemaError(f"is {size} bytes, over the limit of {max_bytes}")
    if _depth(schema) > MAX_DEPTH:
        raise SchemaError(f"nests deeper than {MAX_DEPTH} levels")
    from jsonschema import exceptions, validators

    try:
        validators.validator_for(schema).check_schema(schema)
    except exceptions.SchemaError as exc:
        raise SchemaError(f"is not a valid JSON Schema: {exc.message}") from None
    return schema
