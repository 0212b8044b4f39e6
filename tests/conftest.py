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
