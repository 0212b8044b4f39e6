"""The base's tokenizer fingerprint, checked at container start.

Same definition as ``config/compat.py`` (the runtime ships alone, so it keeps its own copy;
tests/runtime/test_compat.py holds the two to one answer).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

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
