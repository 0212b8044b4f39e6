"""The tokenizer fingerprint of the compatibility tuple.

The runtime computes the same fingerprint at container start (runtime/compat.py keeps its own
copy because the runtime ships alone); tests/config/test_compat.py holds the two to one answer.
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


def tokenizer_sha256(model_dir: Path | str) -> str:
    """sha256 over (name, sha256(content)) of each tokenizer file present, in a fixed order."""
    outer = hashlib.sha256()
    for name in TOKENIZER_FILES:
        path = Path(model_dir) / name
        if path.is_file():
            outer.update(f"{name}\0{hashlib.sha256(path.read_bytes()).hexdigest()}\n".encode())
    return outer.hexdigest()
