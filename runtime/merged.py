"""A model directory that is an adapter merged into its base (``training.merge``).

Served like a base (no adapter is registered on it), but it is the adapter's behaviour: every
request gets the adapter's prompt format and default JSON schema, as the adapter's requests do
on a base component, and every answer reports the adapter's identity (name, version, weights
sha256, and ``merged: true``), so the router caches and the smoke check compares as for the
adapter. The files the manifest lists are checked at start: a merged directory whose weights
are not the ones merged is refused, as an adapter archive with a wrong hash is.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtime.adapters import AdapterError, PromptFormat, file_sha256, prompt_format

MERGED_MANIFEST = "merged_manifest.json"


class MergedModelError(RuntimeError):
    """The model directory's merged manifest is broken or its files differ from it."""


@dataclass(frozen=True)
class MergedModel:
    identity: dict[str, Any]
    prompt: PromptFormat | None
    json_schema: dict[str, Any] | None


def load_merged(model_dir: Path) -> MergedModel | None:
    """The merged adapter this directory holds, checked; None for a plain base."""
    path = model_dir / MERGED_MANIFEST
    if not path.is_file():
        return None
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
        adapter, files = manifest["adapter"], manifest["merged"]["files"]
        name, version = str(adapter["name"]), str(adapter["version"])
    except (ValueError, KeyError, TypeError) as exc:
        raise MergedModelError(f"{path} is not a merged manifest: {exc}") from None
    for fname, digest in sorted(files.items()):
        target = model_dir / str(fname)
        if "/" in str(fname) or not target.is_file():
            raise MergedModelError(f"{MERGED_MANIFEST} lists {fname!r}, not in {model_dir}")
        if file_sha256(target) != digest:
            raise MergedModelError(f"{fname} does not match the sha256 {MERGED_MANIFEST} records")
    from runtime.engine import default_schema

    try:
        prompt, schema = prompt_format(adapter), default_schema(adapter)
    except AdapterError as exc:
        raise MergedModelError(f"{MERGED_MANIFEST}: {exc}") from None
    identity = {"name": name, "version": version, "sha256": adapter.get("weights_sha256"),
                "merged": True}  # fmt: skip
    return MergedModel(identity, prompt, schema)
