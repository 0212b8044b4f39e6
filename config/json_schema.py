"""JSON Schemas an entry names, checked and applied without ever reaching the network.

``jsonschema`` resolves a ``$ref`` it does not hold by downloading it (its default registry,
deprecated but still on). A schema in the catalog must say everything itself: ``make check``
refuses a reference that does not resolve inside the document, and the scorers validate
against an empty registry, so that a remote ``$ref`` fails instead of fetching.
(``referencing`` is the library jsonschema resolves through; only the walk is written here.)
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from jsonschema import validators
from referencing import Registry
from referencing.exceptions import Unresolvable
from referencing.jsonschema import specification_with


def validator(schema: dict[str, Any]) -> Any:
    """A validator for ``schema`` that resolves references inside it only."""
    return validators.validator_for(schema)(schema, registry=Registry())


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str):
            yield ref
        for key, value in node.items():
            if key not in ("const", "enum", "examples", "default"):  # data, not schemas
                yield from _refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _refs(value)


def unresolved_refs(schema: dict[str, Any]) -> list[str]:
    """The ``$ref`` values of ``schema`` that do not resolve inside it (a pointer to nowhere,
    another document, a URL), each once, in order."""
    dialect = schema.get("$schema", "https://json-schema.org/draft/2020-12/schema")
    try:
        spec = specification_with(dialect)
    except Exception:  # an unknown dialect: check_schema has reported it
        return []
    uri = schema.get("$id", "") if isinstance(schema.get("$id"), str) else ""
    resolver = Registry().with_resource(uri, spec.create_resource(schema)).resolver(uri)
    bad: list[str] = []
    for ref in _refs(schema):
        if ref in bad:
            continue
        try:
            resolver.lookup(ref)
        except Unresolvable:
            bad.append(ref)
    return bad
