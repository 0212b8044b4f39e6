"""One synth per environment for the whole session, as a user runs it (``app.py -c env=NAME``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from config import environment_names
from infra.snapshots import synth


@dataclass(frozen=True)
class Assembly:
    env: str
    outdir: Path
    templates: dict[str, dict]


@pytest.fixture(scope="session")
def assemblies(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Assembly]:
    out = {}
    for env in environment_names(deployable=True):
        outdir = tmp_path_factory.mktemp(f"cdk-{env}")
        out[env] = Assembly(env, outdir, synth(env, outdir))
    return out
