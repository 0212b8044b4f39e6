"""Writes publish results (artifact URI, sha256) back into one catalog entry.

A targeted text edit rather than a YAML round trip, so the catalog's comments and layout
survive; the result is re-validated and the file restored if it would not load.
"""

from __future__ import annotations

import re
from pathlib import Path

from config.loader import CATALOG_PATH, CatalogError, load_catalog

_ENTRY = re.compile(r"^(?P<indent>\s*)-\s+name:\s*['\"]?(?P<name>[^'\"\s#]+)['\"]?\s*(#.*)?$")


def set_artifact(name: str, artifact: str, sha256: str, path: Path = CATALOG_PATH) -> None:
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
    keep = [x for x in lines[start + 1 : end] if not re.match(rf"^{indent}(artifact|sha256):", x)]
    lines[start + 1 : end] = [
        *keep,
        f"{indent}artifact: {artifact}\n",
        f"{indent}sha256: {sha256}\n",
    ]
    path.write_text("".join(lines), encoding="utf-8")
    try:
        load_catalog(path)
    except CatalogError:
        path.write_text(original, encoding="utf-8")
        raise
