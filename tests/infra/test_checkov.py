"""checkov's CloudFormation checks over every deployable environment: nothing fails, and every
suppression names its check and carries a reason."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHECKOV = ROOT / ".venv-checkov" / "bin" / "checkov"
pytestmark = pytest.mark.synth


def _run(outdir: Path) -> list[dict]:
    proc = subprocess.run(
        [
            str(CHECKOV),
            "-d",
            str(outdir),
            "--framework",
            "cloudformation",
            "--quiet",
            "-o",
            "json",
            "--skip-download",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
    )
    data = json.loads(proc.stdout)
    return data if isinstance(data, list) else [data]


def test_checkov_reports_no_failed_check(assemblies) -> None:
    assert CHECKOV.exists(), "make setup installs checkov into .venv-checkov"
    for a in assemblies.values():
        reports = _run(a.outdir)
        failed = [
            (c["check_id"], c["resource"]) for r in reports for c in r["results"]["failed_checks"]
        ]
        assert not failed, f"{a.env}: {failed}"
        assert sum(r["summary"]["passed"] for r in reports) > 100


def test_every_checkov_suppression_has_a_reason(assemblies) -> None:
    seen = 0
    for a in assemblies.values():
        for name, template in a.templates.items():
            for lid, resource in template["Resources"].items():
                for skip in resource.get("Metadata", {}).get("checkov", {}).get("skip", []):
                    seen += 1
                    assert skip["id"].startswith("CKV_"), (name, lid, skip)
                    assert len(skip.get("comment", "")) >= 40, (name, lid, skip)
    assert seen > 0
