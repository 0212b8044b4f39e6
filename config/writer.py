"""Writes publish and release results back into one catalog entry (adapter or base model).

A targeted text edit rather than a YAML round trip, so the catalog's comments and layout
survive; the result is re-validated and the file restored if it would not load.
"""

from __future__ import annotations

import re
from pathlib import Path

from config.loader import CATALOG_PATH, CatalogError, load_catalog

_ENTRY = re.compile(r"^(?P<indent>\s*)-\s+name:\s*['\"]?(?P<name>[^'\"\s#]+)['\"]?\s*(#.*)?$")


def set_artifact(name: str, artifact: str | None, sha256: str, path: Path = CATALOG_PATH,
                 weights_sha256: str | None = None,
                 gated_base_revision: str | None = None) -> None:  # fmt: skip
    """Record an adapter's published archive: its hash (and its weights' hash, which the
    runtime reports with every answer), and its URI when given (``None`` keeps the URI derived
    per environment, for a catalog several environments share)."""
    fields = {"sha256": sha256} if artifact is None else {"artifact": artifact, "sha256": sha256}
    if weights_sha256 is not None:
        fields["weights_sha256"] = weights_sha256
    if gated_base_revision is not None:
        fields["gated_base_revision"] = gated_base_revision
    _set_adapter_fields(name, fields, path)


def _set_adapter_fields(name: str, fields: dict[str, str], path: Path) -> None:
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
    end = start + 1
    while end < len(lines) and lines[end].startswith(indent):
        end += 1
    names = "|".join(re.escape(k) for k in fields)
    keep = [x for x in lines[start + 1 : end] if not re.match(rf"^{indent}({names}):", x)]
    lines[start + 1 : end] = [*keep, *(f"{indent}{k}: {v}\n" for k, v in fields.items())]
    _write_checked(path, original, "".join(lines))


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
