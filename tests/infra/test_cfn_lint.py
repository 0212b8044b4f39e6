"""cfn-lint reports nothing on any template of any environment (the app synthesized as a user would)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.synth


def test_cfn_lint_is_clean_on_every_environment(assemblies) -> None:
    templates = sorted(
        str(p) for a in assemblies.values() for p in a.outdir.glob("*.template.json")
    )
    assert {"dev", "staging", "prod"} <= set(assemblies)
    assert len(templates) >= 3 * 7
    lint = subprocess.run(
        [
            str(Path(sys.executable).parent / "cfn-lint"),
            "--config-file",
            str(ROOT / ".cfnlintrc.yaml"),
            *templates,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert lint.returncode == 0, lint.stdout[-4000:]
