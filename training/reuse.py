"""Whether an adapter archive already trained can stand for training it again.

The local platform (``make up``) and ``training.train_all --reuse`` decide by this one rule, so
the table and the platform agree on which archives are current: the same version, base,
hyperparameters, dataset and gate (scorer version).
"""

from __future__ import annotations

from pathlib import Path

from config import Deployment
from config.layout import archives_dir
from contracts.manifests import AdapterManifest, BaseManifest, ManifestError


def cached_adapter(
    dep: Deployment, name: str, out: Path, base_manifest: BaseManifest, max_steps: int | None
) -> str | None:
    """Why the archive in ``out`` cannot be reused, or None when it can."""
    archive = out / f"{name}.tar.gz"
    try:
        m = AdapterManifest.load(out / name)
    except ManifestError as exc:
        return f"its manifest is unreadable ({exc})"
    if not archive.is_file() or m is None:
        return "no artifact yet"
    entry = dep.adapter(name).entry
    if m.version != entry.version:
        return f"version {m.version} -> {entry.version}"
    trained_on = (m.base.model_id, m.base.revision, m.base.tokenizer_sha256)
    if trained_on != (
        base_manifest.model_id,
        base_manifest.revision,
        base_manifest.tokenizer_sha256,
    ):
        return "trained on another base"
    from training.train import recorded_hyperparameters

    if m.hyperparameters != recorded_hyperparameters(dep.adapter(name).profile, max_steps):
        return "hyperparameters changed"
    from training.metrics import SCORER_VERSION

    if (m.eval or {}).get("scorer") != SCORER_VERSION:
        return "evaluated by an older gate"
    from config import CATALOG_PATH
    from training import datasets

    split, _ = datasets.for_entry(entry, CATALOG_PATH.parent)
    if m.dataset.get("sha256") != split.sha256():
        return "its dataset changed"
    return None


def trained_here(dep: Deployment, artifacts: Path, names: list[str]) -> dict[str, bool]:
    """Of ``names``, the adapters whose archive under ``artifacts`` was trained for this
    catalog entry, base and gate (``make up``'s or ``training.train_all``'s): whether each
    passed its gate."""
    base = BaseManifest.load(artifacts / "base" / dep.base_key)
    if base is None:
        return {}
    out = archives_dir(artifacts / "adapters", dep.base_key)
    found = {}
    for name in names:
        if cached_adapter(dep, name, out, base, None) is None:
            manifest = AdapterManifest.read(out / name)
            found[name] = bool((manifest.eval or {}).get("publishable"))
    return found
