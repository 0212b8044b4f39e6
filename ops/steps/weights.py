"""The ``weights`` step: the base weights staged under the base prefix: the pinned revision from
the Hugging Face Hub (weights, config and tokenizer files only), uploaded with SSE-KMS, with the
tokenizer sha256 checked against the catalog, or written into it when unpinned."""

from __future__ import annotations

import tempfile
from pathlib import Path

from config import layout
from config.writer import set_base_field
from contracts.compat import TOKENIZER_FILES, tokenizer_sha256
from ops.steps.base import Release, ReleaseError, running_in_ci
from training.package import sha256_file

NAME = "weights"
SUMMARY = "stage the base weights from the Hugging Face Hub under the base prefix"


#: Files of a hub snapshot the runtime loads: weights, configs, tokenizer (never code or docs).
BASE_FILES = [
    "*.safetensors",
    "*.safetensors.index.json",
    "config.json",
    "generation_config.json",
    "tokenizer.model",
    *TOKENIZER_FILES,
]
#: Written last under the base prefix: the staged files and their hashes. Its presence is what
#: "the weights are staged" means, so an interrupted upload is redone.
BASE_MANIFEST = "release-manifest.json"


def missing(r: Release) -> list[str]:
    if r.dep.base.model_data:
        uri = r.dep.base.model_data
        return [] if uri.endswith("/") or r._object_exists(uri) else [f"{uri} not found"]
    if r.base_manifest() is None:
        return [f"s3://{r.bucket}/{r.base_prefix()} not staged"]
    return []


def run(r: Release) -> None:
    base = r.dep.base
    if base.model_data:
        raise ReleaseError(f"base model_data {base.model_data} is not there; upload it")
    if base.source != "hub":
        raise ReleaseError(f"base {r.dep.base_key!r} is built locally, not on the hub")
    with tempfile.TemporaryDirectory(prefix="base-") as tmp:
        r.log(f"  downloading {base.model_id}@{base.revision} (weights, config, tokenizer)")
        local = r.tools.download_base(base.model_id, base.revision, Path(tmp))
        files = sorted(p for p in local.rglob("*") if p.is_file() and ".cache" not in p.parts)
        if not any(p.suffix == ".safetensors" for p in files):
            raise ReleaseError(f"{base.model_id}@{base.revision} has no safetensors weights")
        digest = tokenizer_sha256(local)
        if base.tokenizer_sha256 is None and running_in_ci():
            # Written on the runner, the digest would deploy a model the next synth (from
            # the committed catalog) replaces, rolling the whole base component again.
            raise ReleaseError(
                f"base {r.dep.base_key!r} has no tokenizer_sha256, and a release in CI "
                "cannot commit it: pin it in config/adapters.yaml "
                f"(base_models.{r.dep.base_key}.tokenizer_sha256: {digest}), commit, and "
                "run the release again"
            )
        if base.tokenizer_sha256 and base.tokenizer_sha256 != digest:
            raise ReleaseError(
                f"tokenizer sha256 of {base.model_id}@{base.revision} is {digest}, the "
                f"catalog pins {base.tokenizer_sha256}: the revision is not what adapters "
                "were trained on"
            )
        hashes = {}
        for path in files:
            rel = path.relative_to(local).as_posix()
            hashes[rel] = sha256_file(path)
            r.log(f"  upload {rel} ({path.stat().st_size / 1e6:.1f} MB)")
            layout.upload_encrypted(r.s3, path, r.bucket, r.base_prefix() + rel, r._kms_key())
        manifest = {
            "model_id": base.model_id,
            "revision": base.revision,
            "tokenizer_sha256": digest,
            "files": hashes,
        }
        r._put_json(r.base_prefix() + BASE_MANIFEST, manifest)
    if base.tokenizer_sha256 is None:
        set_base_field(r.dep.base_key, "tokenizer_sha256", digest, r.catalog)
        r.log(f"  wrote tokenizer_sha256: {digest} into {r.catalog.name} (commit it)")
        r._catalog_changed()
