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


#: Keys whose values are data, not schemas: a walk over a schema must not read them as one.
_DATA_KEYS = frozenset({"enum", "const", "default", "examples", "properties_order"})
#: String keywords that already decide the string's characters in xgrammar's grammar.
_OWN_CHARACTERS = frozenset({"pattern", "format", "enum", "const"})


def for_decoding(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema vLLM's grammar is compiled from: the caller's, with every length-bounded
    string made to exclude unescaped control characters.

    RFC 8259 requires U+0000 to U+001F escaped inside a string, and ``json.loads`` refuses them
    raw. xgrammar 0.2.8 (vLLM 0.32's backend) compiles a plain ``{"type": "string"}`` to its
    ``basic_string``, which excludes them, but a string with ``minLength`` or ``maxLength`` to
    ``[^"\\\r\n]{min,max}``, which lets every other control character through (measured:
    an untrained model wrote ``{"name":"emanyult\x1e pe...",...}``). xgrammar has no option
    for this, so the runtime puts the length bounds into a ``pattern`` over characters that are
    not control characters (xgrammar's ``Regex(..., json_string=true)``, which counts
    characters as the schema does; like xgrammar's own bounded strings it writes no escapes).
    The caller's schema is unchanged: answers are validated against it. A string that brings
    its own ``pattern`` or ``format`` keeps it."""
    return _strict_strings(schema)


def _strict_strings(node: Any) -> Any:
    if isinstance(node, list):
        return [_strict_strings(x) for x in node]
    if not isinstance(node, dict):
        return node
    out = {k: (v if k in _DATA_KEYS else _strict_strings(v)) for k, v in node.items()}
    kind = out.get("type")
    is_string = kind == "string" or (isinstance(kind, list) and "string" in kind)
    bounded = "minLength" in out or "maxLength" in out
    if is_string and bounded and not _OWN_CHARACTERS & out.keys():
        low = out.get("minLength", 0)
        high = out.get("maxLength", "")
        if isinstance(low, int) and isinstance(high, int | str):
            # The bounds move into the pattern: vLLM refuses a pattern beside them
            # (has_xgrammar_unsupported_json_features, xgrammar #966).
            out.pop("minLength", None)
            out.pop("maxLength", None)
            out["pattern"] = f"^[^\\x00-\\x1f]{{{low},{high}}}$"
    return out
