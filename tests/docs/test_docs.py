"""The docs cannot drift from the code: the site builds with ``mkdocs build --strict`` (a broken
link, anchor or missing page fails), the catalog reference is what the schema generates, and
every command in a shell block of the README and docs is either run here (each one that runs
offline in reasonable time) or excused with the test that covers it and why."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
VENV_BIN = Path(sys.executable).parent

#: Placeholders the docs write in commands, and what this machine runs them with.
PLACEHOLDERS = {"ROLE_ARN": "arn:aws:iam::123456789012:role/lora-training"}

#: Commands that run offline here, each run by ``test_offline_commands_run``.
RUN = {
    "make check",
    "make plan ENV=prod",
    "make diff ENV=prod",
    "make lint",
    "python -m training.base --preset tiny --out /tmp/tiny-base",
    ".venv/bin/python -m training.launch --adapter sales-json --env dev --role ROLE_ARN --dry-run",
    ".venv/bin/python -m local usage",
}

#: Commands not run by this test, by their first words, with why and what covers them.
EXCUSED = {
    "make up": "the main job; tests/e2e start the same platform (local.platform) and its tour",
    "make test": "this test suite",
    "bash .ci/run": "CI itself; it runs this suite",
    "make preflight": "reads an AWS account; tests/ops/test_preflight.py runs it on stubs",
    "make release": "deploys to AWS; tests/ops/test_release.py runs it on moto, dry run included",
    "make smoke": "calls a deployed router; tests/ops/test_smoke.py",
    "make usage": "reads CloudWatch Logs; tests/ops/test_usage.py runs it on stubbed clients",
    "make synth": "tests/infra/test_nag.py synthesizes every environment with the nag packs",
    "make snapshot": "rewrites infra/snapshots; tests/ops/test_snapshots.py checks they are fresh",
    "make promote": "edits the catalog; tests/config/test_rollout.py",
    "make rollback": "edits the catalog; tests/config/test_rollout.py",
    "git commit": "a user's own commit",
    ".venv/bin/python -m training.approve": "Model Registry in AWS; tests/training on moto",
    ".venv/bin/python -m training.publish": "an archive and a bucket; tests/training, test_release",
    ".venv/bin/python -m training.train ": "minutes of training; tests/training/test_train.py",
    ".venv/bin/python -m training.train_all": "every adapter trained (about an hour); benchmarks",
    ".venv/bin/python -m training.base --model-id": "converts the local base; make up does it",
    "OPTION_MAX_LORAS=4 .venv/bin/python -m runtime serve": "tests/runtime start the server",
    "curl ": "asks the server above; tests/runtime send the same requests",
    ".venv/bin/python benchmarks/degraded_canaries.py": "trains six adapters and serves them "
    "(half an hour); its run is in benchmarks/RESULTS.md, and tests/lambda_proxy/test_shadow.py "
    "makes the same decisions on stand-in components",
    "make destroy": "tears an environment down; tests/ops/test_rehearsal.py runs it on the "
    "emulated account, in the environment's region with the shell's set to another",
    "aws iam update-role": "the user's own IAM role; tests/ci/test_workflow.py checks the "
    "duration the guide states against the workflow's longest session",
    "aws sagemaker list-": "lists a real account; tests/ops/test_rehearsal.py checks that the "
    "teardown leaves no stack of the environment on the emulated account",
    "aws elasticache": "lists a real account; the cache is in PREFIX-cache, which the teardown "
    "destroys (tests/ops/test_rehearsal.py)",
    "aws ec2 describe-vpc-endpoints": "lists a real account; the endpoints are in PREFIX-network",
    "aws cloudformation list-stacks": "lists a real account; tests/ops/test_rehearsal.py makes "
    "the same check on the emulated account",
    "aws sagemaker describe-model-package": "reads a deployed account's Model Registry; "
    "tests/lambda_proxy/test_shadow.py checks what the router writes there against the API model",
}


def commands() -> dict[str, list[str]]:
    """Each command of a bash block (continuation lines joined, comments dropped) and the pages
    it is on."""
    found: dict[str, list[str]] = {}
    for page in PAGES:
        for block in re.findall(r"```(?:bash|sh|shell)\n(.*?)```", page.read_text(), re.S):
            joined = re.sub(r"\\\n\s*", " ", block)
            for line in joined.splitlines():
                line = re.split(r"\s{2,}#", line)[0].strip()
                if line and not line.startswith("#"):
                    found.setdefault(line, []).append(page.name)
    return found


def test_the_site_builds_strict(tmp_path) -> None:
    proc = subprocess.run(
        [str(VENV_BIN / "mkdocs"), "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": f"{VENV_BIN}:/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert (tmp_path / "site" / "catalog-reference" / "index.html").exists()


def test_the_catalog_reference_is_generated_from_the_schema() -> None:
    from config.reference import OUT, render

    assert OUT.read_text() == render(), (
        "docs/catalog-reference.md is stale: python -m config.reference --write"
    )


def test_the_routers_error_table_is_generated_from_the_error_catalogue() -> None:
    from config.reference import ROUTER_DOC, router_doc

    assert ROUTER_DOC.read_text() == router_doc(), (
        "docs/router.md's error table is stale: python -m config.reference --write"
    )


def test_the_readme_stays_short_with_the_two_commands_first() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 150
    first_block = re.search(r"```bash\n(.*?)```", text, re.S).group(1)  # type: ignore[union-attr]
    assert [line.split()[:2] for line in first_block.splitlines()] == [
        ["make", "up"],
        ["make", "test"],
    ]


def test_every_docs_command_is_run_or_excused() -> None:
    loose = [
        (cmd, pages)
        for cmd, pages in commands().items()
        if cmd not in RUN and not any(cmd.startswith(prefix) for prefix in EXCUSED)
    ]
    assert not loose, f"run these in RUN or excuse them in EXCUSED: {loose}"
    assert set(commands()) >= RUN, f"no longer in the docs: {RUN - set(commands())}"


@pytest.mark.parametrize("command", sorted(RUN))
def test_offline_commands_run(command: str) -> None:
    for placeholder, value in PLACEHOLDERS.items():
        command = command.replace(placeholder, value)
    argv = shlex.split(command)
    if argv[0] == "python":
        argv[0] = sys.executable
    elif argv[0].startswith(".venv/bin/"):
        argv[0] = str(VENV_BIN / Path(argv[0]).name)
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{command}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
