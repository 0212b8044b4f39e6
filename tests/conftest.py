"""Shared fixtures: the tiny local base (built once per session, in seconds)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Qwen3-architecture base with a locally trained tokenizer, saved with save_pretrained."""
    from training.base import build_base

    return build_base(
        tmp_path_factory.mktemp("tiny-base"), preset="tiny", seed=0, log=lambda _: None
    )


@pytest.fixture(scope="session")
def local_base() -> Path:
    """The local platform's base (preset local, briefly pre-trained), cached under .artifacts."""
    from training.base import build_base

    root = Path(__file__).resolve().parents[1] / ".artifacts" / "base" / "qwen3-local"
    return build_base(root, preset="local", seed=0, log=lambda _: None)
