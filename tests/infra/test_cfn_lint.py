"""cfn-lint reports nothing on any template of any environment (the app synthesized as a user would)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from config import environment_names

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.synth


@pytest.mark.parametrize("env", environment_names(deployable=True))
def test_cfn_lint_is_clean(env: str, tmp_path: Path) -> None:
    out = tmp_path / "cdk.out"
    synth = subprocess.run(
        [sys.executable, "app.py"], cwd=ROOT, capture_output=True, text=True, check=False,
        env={**os.environ, "CDK_CONTEXT_JSON": json.dumps(
            {**json.loads((ROOT / "cdk.json").read_text())["context"], "env": env}),
             "CDK_OUTDIR": str(out)},
    )  # fmt: skip
    assert synth.returncode == 0, synth.stderr[-3000:]
    templates = sorted(str(p) for p in out.glob("*.template.json"))
    assert templates
    lint = subprocess.run(
        [str(Path(sys.executable).parent / "cfn-lint"), "--config-file", str(ROOT / ".cfnlintrc.yaml"), *templates],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert lint.returncode == 0, lint.stdout[-4000:]
