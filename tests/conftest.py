"""Shared fixtures: the tiny local base (built once per session, in seconds)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: The pid of make up's trainer this session paused, if any.
_PAUSED = pytest.StashKey["int | None"]()


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


# -- the CDK app, synthesized (tests/infra and tests/ops) --------------------------------------


@dataclass(frozen=True)
class Assembly:
    env: str
    outdir: Path
    templates: dict[str, dict]


@pytest.fixture(scope="session")
def assemblies(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Assembly]:
    """One synth per environment for the whole session, as a user runs it (``app.py -c
    env=NAME``)."""
    from config import environment_names
    from ops.snapshots import synth

    out = {}
    for env in environment_names(deployable=True):
        outdir = tmp_path_factory.mktemp(f"cdk-{env}")
        out[env] = Assembly(env, outdir, synth(env, outdir))
    return out


@pytest.fixture(scope="session")
def dev_templates(assemblies) -> dict[str, dict]:
    return assemblies["dev"].templates


@pytest.fixture
def synth_edited(tmp_path: Path):
    """``synth_edited(catalog=fn, environment=fn, env="dev")`` -> templates by stack name."""
    from tests.infra.conftest import edited_config, synth_in_process

    def run(env: str = "dev", **edits) -> dict[str, dict]:
        catalog, environments = edited_config(tmp_path, env, **edits)
        return synth_in_process(catalog, environments, env)

    return run


def _say(config: pytest.Config, line: str) -> None:
    """A line the user sees whatever the capture: through pytest's terminal reporter (a write to
    stderr from a fixture is captured at the descriptor and shown only on a failure)."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.ensure_newline()
        reporter.write_line(line)
    else:
        sys.__stderr__.write(line + "\n")


def pytest_sessionstart(session: pytest.Session) -> None:
    """``make test`` beside ``make up``: the background trainer is paused for the run (on two
    cores it kept a core whatever its priority, and 39 fixtures timed out) and resumes after."""
    from local.trainer import pause_running_trainer

    pid = pause_running_trainer(ROOT / ".local")
    session.config.stash[_PAUSED] = pid
    if pid is not None:
        _say(
            session.config,
            f"found make up's background training in progress (pid {pid}): paused while the "
            "tests run, it resumes after them",
        )


def pytest_sessionfinish(session: pytest.Session) -> None:
    from local.trainer import resume

    pid = session.config.stash.get(_PAUSED, None)
    if pid is not None:
        resume(pid)
        _say(session.config, f"make up's background training (pid {pid}) resumed")
