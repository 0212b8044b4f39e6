"""JSON Schemas an entry names, checked and applied without ever reaching the network.

``jsonschema`` resolves a ``$ref`` it does not hold by downloading it (its default registry,
deprecated but still on). A schema in the catalog must say everything itself: ``make check``
refuses a reference that does not resolve inside the document, and the scorers validate
against an empty registry, so that a remote ``$ref`` fails instead of fetching.
(``referencing`` is the library jsonschema resolves through; only the walk is written here.)
"""

from __future__ import annotations

from typing import Any

from jsonschema import validators
from referencing import Registry
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012, specification_with


def validator(schema: dict[str, Any]) -> Any:
    """A validator for ``schema`` that resolves references inside it only."""
    return validators.validator_for(schema)(schema, registry=Registry())


def _dialect(schema: dict[str, Any]) -> Any:
    """The ``referencing`` specification of the schema's ``$schema``; draft 2020-12, which
    jsonschema also falls back to, when it names none or one ``referencing`` does not know."""
    return specification_with(schema.get("$schema", ""), default=DRAFT202012)


def unresolved_refs(schema: dict[str, Any]) -> list[str]:
    """The ``$ref`` values of ``schema`` that do not resolve inside it (a pointer to nowhere,
    another document, a URL), each once, in order. A subschema with its own ``$id`` (a
    bundled schema) resolves its references against itself, as validators do."""
    spec = _dialect(schema)
    root = spec.create_resource(schema)
    uri = root.id() or ""
    registry = Registry().with_resource(uri, root).crawl()
    bad: list[str] = []

    def walk(node: Any, resolver: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("$id"), str) and node is not schema:
                resolver = resolver.in_subresource(spec.create_resource(node))
            ref = node.get("$ref")
            if isinstance(ref, str) and ref not in bad:
                try:
                    resolver.lookup(ref)
                except Unresolvable:
                    bad.append(ref)
            for key, value in node.items():
                if key not in ("const", "enum", "examples", "default"):  # data, not schemas
                    walk(value, resolver)
        elif isinstance(node, list):
            for value in node:
                walk(value, resolver)

    walk(schema, registry.resolver(uri))
    return bad
