"""The tokenizer fingerprint of the compatibility tuple.

Publish records it for the base an adapter was trained on, the catalog pins it, and the model
server computes it again at container start and refuses a base whose tokenizer differs: token ids
mean nothing under another tokenizer, and the adapter would answer garbage without an error.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

#: Files that decide how text becomes token ids (and back), when present.
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.json",
    "merges.txt",
    "special_tokens_map.json",
    "added_tokens.json",
    "chat_template.jinja",
)


class CompatibilityError(RuntimeError):
    """The model directory is not the base the deployment says it is."""


def tokenizer_sha256(model_dir: Path | str) -> str:
    """sha256 over (name, sha256(content)) of each tokenizer file present, in a fixed order."""
    outer = hashlib.sha256()
    for name in TOKENIZER_FILES:
        path = Path(model_dir) / name
        if path.is_file():
            outer.update(f"{name}\0{hashlib.sha256(path.read_bytes()).hexdigest()}\n".encode())
    return outer.hexdigest()


def verify_tokenizer(model_dir: Path, expected: str | None) -> str:
    actual = tokenizer_sha256(model_dir)
    if expected and actual != expected:
        raise CompatibilityError(
            f"tokenizer sha256 of {model_dir} is {actual}, the catalog pins {expected}: "
            "this is not the base the adapters were trained on; refusing to start"
        )
    return actual
