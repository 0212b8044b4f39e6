"""Writes publish and release results back into one catalog entry (adapter or base model).

A targeted text edit rather than a YAML round trip, so the catalog's comments and layout
survive; the result is re-validated and the file restored if it would not load.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from config.loader import CATALOG_PATH, CatalogError, load_catalog

_ENTRY = re.compile(r"^(?P<indent>\s*)-\s+name:\s*['\"]?(?P<name>[^'\"\s#]+)['\"]?\s*(#.*)?$")


def set_artifact(
    name: str,
    artifact: str | None,
    sha256: str,
    path: Path = CATALOG_PATH,
    weights_sha256: str | None = None,
    gated_base_revision: str | None = None,
) -> None:
    """Record an adapter's published archive: its hash (and its weights' hash, which the
    runtime reports with every answer), and its URI when given (``None`` keeps the URI derived
    per environment, for a catalog several environments share)."""
    fields = {"sha256": sha256} if artifact is None else {"artifact": artifact, "sha256": sha256}
    if weights_sha256 is not None:
        fields["weights_sha256"] = weights_sha256
    if gated_base_revision is not None:
        fields["gated_base_revision"] = gated_base_revision
    update_adapter(name, fields, path)


def update_adapter(name: str, fields: dict[str, Any], path: Path = CATALOG_PATH) -> None:
    """Set top-level fields of one adapter entry: a scalar as ``key: value``, a mapping as a
    block under its key, ``None`` removes the field (with its block)."""
    original = path.read_text(encoding="utf-8")
    lines = original.splitlines(keepends=True)
    found = [
        (i, m["indent"] + "  ")
        for i, line in enumerate(lines)
        if (m := _ENTRY.match(line.rstrip("\n"))) and m["name"] == name
    ]
    if not found:
        raise KeyError(f"adapter {name!r} is not in {path}")
    start, indent = found[0]
    end = _entry_end(lines, start, indent)
    names = "|".join(re.escape(k) for k in fields)
    keep, dropping = [], False
    for line in lines[start + 1 : end]:
        if re.match(rf"^{indent}({names}):", line):
            dropping = True  # the field's own line, then its deeper block
        elif dropping and not line.startswith((indent + " ", indent + "-")):
            dropping = False
        if not dropping:
            keep.append(line)
    added = [x for k, v in fields.items() if v is not None for x in _field_lines(indent, k, v)]
    lines[start + 1 : end] = [*keep, *added]
    text = "".join(lines)
    entry = next(a for a in yaml.safe_load(text)["adapters"] if a.get("name") == name)
    wrong = [k for k, v in fields.items() if entry.get(k) != v]
    if wrong:  # never write an edit that did not take (a layout this editor misread)
        raise ValueError(
            f"adapter {name!r}: could not edit {', '.join(wrong)} in {path}; edit the entry by hand"
        )
    _write_checked(path, original, text)


def _entry_end(lines: list[str], start: int, indent: str) -> int:
    """The line after an entry's last field: blank and comment lines inside the entry (before
    another of its fields) belong to it; those after its last field do not."""
    end = j = start + 1
    while j < len(lines):
        line = lines[j]
        if line.startswith(indent) and line.strip() and not line.lstrip().startswith("#"):
            end = j + 1
        elif line.strip() and not line.lstrip().startswith("#"):
            break  # the next entry, or the end of the list
        j += 1
    return end


def _field_lines(indent: str, key: str, value: Any) -> list[str]:
    if isinstance(value, dict) and value:
        return [
            f"{indent}{key}:\n",
            *(x for k, v in value.items() for x in _field_lines(indent + "  ", k, v)),
        ]
    return [f"{indent}{key}: {_scalar(value)}\n"]


def _scalar(value: Any) -> str:
    """``value`` as YAML reads it back: plain where that is the same value (a hash, a URI),
    else as JSON, whose scalars are YAML's (a version "2" stays a string)."""
    plain = str(value)
    if isinstance(value, str) and plain and "#" not in plain and ": " not in plain:
        try:
            if yaml.safe_load(f"k: {plain}") == {"k": value}:
                return plain
        except yaml.YAMLError:
            pass
    return json.dumps(value)


def set_base_field(base: str, field: str, value: str, path: Path = CATALOG_PATH) -> None:
    """Set one scalar field of a ``base_models`` entry (``tokenizer_sha256`` at release)."""
    original = path.read_text(encoding="utf-8")
    lines = original.splitlines(keepends=True)
    head = next(
        (
            i
            for i, line in enumerate(lines)
            if re.match(rf"^(\s+){re.escape(base)}:\s*(#.*)?$", line)
        ),
        None,
    )
    if head is None:
        raise KeyError(f"base model {base!r} is not in {path}")
    indent = re.match(r"^(\s*)", lines[head])[1] + "  "  # type: ignore[index]
    end = head + 1
    while end < len(lines) and (lines[end].startswith(indent) or not lines[end].strip()):
        end += 1
    for i in range(head + 1, end):
        if re.match(rf"^{indent}{re.escape(field)}:", lines[i]):
            lines[i] = f"{indent}{field}: {value}\n"
            break
    else:
        lines.insert(head + 1, f"{indent}{field}: {value}\n")
    _write_checked(path, original, "".join(lines))


def _write_checked(path: Path, original: str, text: str) -> None:
    """Write, then re-validate; put the original back if the result would not load."""
    path.write_text(text, encoding="utf-8")
    try:
        load_catalog(path)
    except CatalogError:
        path.write_text(original, encoding="utf-8")
        raise
