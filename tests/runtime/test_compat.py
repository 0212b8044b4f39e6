"""The runtime's tokenizer fingerprint equals the catalog's (two copies, one definition)."""

from __future__ import annotations

from pathlib import Path

import pytest

from config.compat import tokenizer_sha256 as catalog_hash
from runtime.compat import CompatibilityError, tokenizer_sha256, verify_tokenizer


def test_same_fingerprint_as_config(tiny_base: Path) -> None:
    assert tokenizer_sha256(tiny_base) == catalog_hash(tiny_base)


def test_mismatch_refuses_to_start(tiny_base: Path) -> None:
    with pytest.raises(CompatibilityError, match="refusing to start"):
        verify_tokenizer(tiny_base, "0" * 64)
    assert verify_tokenizer(tiny_base, None) == tokenizer_sha256(tiny_base)
