"""The tokenizer fingerprint: what it covers, and the start-up refusal it drives."""

from __future__ import annotations

from pathlib import Path

import pytest

from contracts.compat import CompatibilityError, tokenizer_sha256, verify_tokenizer


def _base(tmp_path: Path) -> Path:
    (tmp_path / "tokenizer.json").write_text('{"model": {"vocab": {"a": 0}}}')
    (tmp_path / "tokenizer_config.json").write_text('{"eos_token": "</s>"}')
    (tmp_path / "model.safetensors").write_bytes(b"weights")
    return tmp_path


def test_the_fingerprint_follows_the_tokenizer_files_and_nothing_else(tmp_path: Path) -> None:
    base = _base(tmp_path)
    before = tokenizer_sha256(base)
    (base / "model.safetensors").write_bytes(b"other weights")
    assert tokenizer_sha256(base) == before
    (base / "chat_template.jinja").write_text("{{ messages }}")
    assert tokenizer_sha256(base) != before


def test_a_base_with_another_tokenizer_refuses_to_start(tmp_path: Path) -> None:
    base = _base(tmp_path)
    with pytest.raises(CompatibilityError, match="refusing to start"):
        verify_tokenizer(base, "0" * 64)
    assert verify_tokenizer(base, None) == tokenizer_sha256(base)
    assert verify_tokenizer(base, tokenizer_sha256(base)) == tokenizer_sha256(base)
