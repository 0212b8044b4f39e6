"""A model directory that is an adapter merged into its base (``training.merge``).

Served like a base (no adapter is registered on it), but it is the adapter's behaviour: every
request gets the adapter's prompt format and default JSON schema, as the adapter's requests do
on a base component, and every answer reports the adapter's identity (name, version, weights
sha256, and ``merged: true``), so the router caches and the smoke check compares as for the
adapter. The files the manifest lists are checked at start: a merged directory whose weights
are not the ones merged is refused, as an adapter archive with a wrong hash is.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contracts.manifests import ManifestError, MergedManifest, PromptFormat, chat_prompt
from runtime.adapters import AdapterError, default_schema, file_sha256

MERGED_MANIFEST = MergedManifest.FILE


class MergedModelError(RuntimeError):
    """The model directory's merged manifest is broken or its files differ from it."""


@dataclass(frozen=True)
class MergedModel:
    identity: dict[str, Any]
    prompt: PromptFormat | None
    json_schema: dict[str, Any] | None


def load_merged(model_dir: Path) -> MergedModel | None:
    """The merged adapter this directory holds, checked; None for a plain base."""
    try:
        manifest = MergedManifest.load(model_dir)
    except ManifestError as exc:
        raise MergedModelError(f"{model_dir}: {exc}") from None
    if manifest is None:
        return None
    for fname, digest in sorted(manifest.merged.files.items()):
        target = model_dir / fname
        if "/" in fname or not target.is_file():
            raise MergedModelError(f"{MERGED_MANIFEST} lists {fname!r}, not in {model_dir}")
        if file_sha256(target) != digest:
            raise MergedModelError(f"{fname} does not match the sha256 {MERGED_MANIFEST} records")
    adapter = manifest.adapter
    try:
        schema = default_schema(adapter.json_schema)
    except AdapterError as exc:
        raise MergedModelError(f"{MERGED_MANIFEST}: {exc}") from None
    identity = {
        "name": adapter.name,
        "version": adapter.version,
        "sha256": adapter.weights_sha256,
        "merged": True,
    }
    return MergedModel(identity, chat_prompt(adapter.prompt), schema)
