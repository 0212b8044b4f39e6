"""Values that stand in for real ones, kept out of every path that reaches AWS.

A default that stands in for an account, a region or a bucket looks right in every test that
uses the same stand-in (moto's default account is AWS's documentation account, 123456789012),
and fails on a real account. These checks read the code itself.
"""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC_ACCOUNT = "123456789012"


def _tracked(*patterns: str) -> list[Path]:
    out = subprocess.run(
        ["git", "ls-files", *patterns], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    return [ROOT / p for p in out if (ROOT / p).is_file()]


def _outside_tests(paths: list[Path]) -> list[Path]:
    return [p for p in paths if p.relative_to(ROOT).parts[0] not in ("tests",)]


def test_aws_documentation_account_appears_only_in_tests_and_the_dry_run() -> None:
    """AWS's documentation account in code that reaches AWS once named the training jobs'
    bucket; it may stand only in the training dry run, whose answers are all made up."""
    found = [
        f"{p.relative_to(ROOT)}:{n}"
        for p in _outside_tests(_tracked())
        if p.suffix in (".py", ".md", ".yaml", ".yml", ".json", ".sh", "")
        for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1)
        if DOC_ACCOUNT in line and not line.startswith("DRY_RUN_ACCOUNT = ")
    ]
    assert found == [], found


def test_only_the_layout_module_builds_a_bucket_name() -> None:
    """Five hand-written copies of ``PREFIX-artifacts-ACCOUNT-REGION`` let one of them name
    another account's bucket; config.layout is the one place."""
    found = [
        str(p.relative_to(ROOT))
        for p in _outside_tests(_tracked("*.py"))
        if "-artifacts-" in p.read_text() and p.relative_to(ROOT) != Path("config/layout.py")
    ]
    assert found == [], found


def _boto3_calls_without_region(path: Path) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "boto3"
            and node.func.attr in ("client", "resource", "Session")
            and not any(k.arg == "region_name" for k in node.keywords)
        ):
            out.append(f"{path.relative_to(ROOT)}:{node.lineno} boto3.{node.func.attr}")
    return out


def test_no_client_that_acts_on_an_environment_takes_the_shells_region() -> None:
    """Release, preflight, teardown, usage, smoke, publish and the training launch build their
    clients through config.aws (the environment's region); a bare boto3 client or session in
    them would take the shell's. ``training/datasets`` reads a user's own S3 file, whose
    region is the bucket's and which botocore's S3 redirect finds; code that runs inside a
    Lambda function (``infra/*_runtime/``) is in its function's region by Lambda's own
    ``AWS_REGION``."""
    paths = [
        p
        for p in _tracked("ops/*.py", "training/*.py", "infra/*.py", "config/*.py")
        if p.name != "aws.py"
        and "training/datasets/" not in p.as_posix()
        and "_runtime/" not in p.as_posix()
    ]
    found = [c for p in paths for c in _boto3_calls_without_region(p)]
    # A session made only for the caller's credentials (SigV4 of an execute-api request, whose
    # region is the environment's) is not a client.
    found = [c for c in found if not c.startswith("ops/smoke.py")]
    assert found == [], found
