"""``python -m training.merge --base-dir DIR --archive NAME.tar.gz --out DIR``: an adapter merged
into its base, for an entry with ``serving: merged``.

AWS's LoRA guidance (seed 002): where "one adapted behavior dominates the endpoint", serve a
merged artifact on "a dedicated serving path", without the LoRA computation on every token.
PEFT's ``merge_and_unload`` folds ``B @ A * alpha / r`` into each target weight; the result is
saved as a plain model directory the runtime serves like a base (its own component, its own
process), beside ``merged_manifest.json``, which keeps both identities:

- ``merged``: the sha256 of every file written here (the runtime checks them at start);
- ``base``: the model id, revision and tokenizer sha256 it was merged into;
- ``adapter``: the archive's name, version, sha256 and weights sha256, and the prompt format
  and JSON schema it was trained with, which the runtime applies to every request as it would
  to the adapter's (an answer reports the adapter's identity, so the router's cache binding
  and the smoke check hold for merged serving too).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from contracts.manifests import BaseRef, MergedAdapter, MergedFiles, MergedManifest
from training.package import read_manifest, sha256_file

MERGED_MANIFEST = MergedManifest.FILE
#: What the base directory holds beside its weights that the merged directory needs as they are
#: (the tokenizer, so its sha256, the chat template and the generation defaults are the base's).
_CARRIED = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
    "generation_config.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "added_tokens.json",
    "base_manifest.json",
)


class MergeError(ValueError):
    pass


def merge(base_dir: Path, archive: Path, out_dir: Path, log: Any = print) -> MergedManifest:
    """Merge the archive's adapter into the base at ``base_dir``; returns the manifest."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from contracts.compat import tokenizer_sha256

    manifest = read_manifest(archive)
    if out_dir.exists() and any(out_dir.iterdir()):
        raise MergeError(f"{out_dir} is not empty")
    out_dir.mkdir(parents=True, exist_ok=True)
    recorded = manifest.base.tokenizer_sha256
    tok = tokenizer_sha256(base_dir)
    if recorded and recorded != tok:
        raise MergeError(
            f"{base_dir} is not the base {manifest.name} was trained on (its tokenizer differs)"
        )
    with tempfile.TemporaryDirectory(prefix="merge-") as tmp:
        with tarfile.open(archive, "r:gz") as tar:
            tar.extractall(tmp, filter="data")
        log(f"merging {manifest.name} {manifest.version} into {base_dir}")
        config = json.loads((base_dir / "config.json").read_text())
        dtype = getattr(torch, str(config.get("torch_dtype") or config.get("dtype") or "float32"))
        model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=dtype)
        merged = PeftModel.from_pretrained(model, tmp).merge_and_unload()
        merged.save_pretrained(out_dir, safe_serialization=True)
    for name in _CARRIED:
        if (base_dir / name).is_file():
            shutil.copy2(base_dir / name, out_dir / name)
    files = {p.name: sha256_file(p) for p in sorted(out_dir.iterdir()) if p.is_file()}
    out = MergedManifest(
        format=1,
        merged=MergedFiles(files=files),
        base=BaseRef(
            model_id=manifest.base.model_id, revision=manifest.base.revision, tokenizer_sha256=tok
        ),
        adapter=MergedAdapter(
            name=str(manifest.name),
            version=str(manifest.version),
            sha256=sha256_file(archive),
            weights_sha256=manifest.files.get("adapter_model.safetensors"),
            **({"prompt": manifest.prompt} if manifest.prompt else {}),
            **({"json_schema": manifest.json_schema} if manifest.json_schema else {}),
        ),
    )
    out.dump(out_dir)
    log(f"merged weights in {out_dir} ({sum(p.stat().st_size for p in out_dir.iterdir())} bytes)")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m training.merge",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--base-dir", type=Path, required=True)
    ap.add_argument("--archive", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    try:
        merge(args.base_dir, args.archive, args.out)
    except MergeError as exc:
        print(f"merge failed: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
