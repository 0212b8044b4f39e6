"""The first day on AWS, rehearsed as a user configures it.

The environment names its account (111122223333, not moto's default) and a region other than
us-east-1 (eu-west-1), while the shell's default region is a third one (us-west-2): a client
built without the environment's region finds nothing there. The emulated account holds only
what a user has before a first release (the CDK bootstrap and their training role) and what
the synthesized templates of that environment declare (buckets, the key alias, the image
repository, the model package groups), by their names and in their region. Everything else
fails as it would in AWS: a bucket, a group, an account or a region the templates do not name.

The release synthesizes through its own path (``ops.snapshots.synth``: ``app.py`` under the
three cdk-nag packs), deploys the assembly only when it needs no context nothing looked up,
trains through the real SageMaker SDK launcher, and runs the real preflight. Every request is
validated by botocore against AWS's model of the service before moto or a stub answers it.

The path: a checkout where ``make up`` already ran -> preflight and the first release ->
approvals -> add an adapter -> remove one -> a canary release -> ``make destroy`` -> release
again. It fails when any first-day breaker is put back: placeholder
availability zones or a nag acknowledgement that misses with an account, a training bucket
of another account, a removed entry's group holding versions, a teardown in the shell's
region.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import tarfile
import tempfile
from pathlib import Path

import boto3
import pytest
import yaml
from botocore.awsrequest import AWSResponse
from moto import mock_aws

from config import load_deployment
from config.aws import AwsEnv
from ops.release import STEPS, Release, ReleaseError
from ops.snapshots import synth as release_synth
from tests.infra.conftest import PSEUDO, edited_config, resolve
from tests.ops import test_release as fakes
from tests.training.test_launch import _s3_uris

pytestmark = pytest.mark.synth

ACCOUNT = "111122223333"
REGION = "eu-west-1"
#: The shell's default region: a client without the environment's lands here, on nothing.
SHELL_REGION = "us-west-2"
TRAINING_ROLE = f"arn:aws:iam::{ACCOUNT}:role/lora-training"
#: Who runs the release: a role session (as SSO or CI gives one), an operator of the environment.
OPERATOR = f"arn:aws:iam::{ACCOUNT}:role/release-operator"
#: The quotas of a ready account (Service Quotas: applied values for the endpoint instances,
#: AWS's default only for training, which ListServiceQuotas then leaves out).
APPLIED = {"ml.g5.xlarge for endpoint usage": ("L-1928E07B", 3.0)}
DEFAULTS = {**APPLIED, "ml.g5.2xlarge for training job usage": ("L-TRAIN", 1.0)}

_SYNTH_CACHE: dict[str, Path] = {}


def cached_synth(env: str, catalog: Path, environments: Path):
    """The release's own synth (``app.py`` with the nag packs, in a subprocess), run once per
    distinct configuration of this module: each takes about 25 s, and a release synthesizes
    again after every catalog change."""

    def synth(outdir: Path) -> dict[str, dict]:
        digest = hashlib.sha256(catalog.read_bytes())
        for f in sorted(environments.glob("*.yaml")):
            digest.update(f.read_bytes())
        key = digest.hexdigest()
        if key not in _SYNTH_CACHE:
            built = Path(tempfile.mkdtemp(prefix=f"rehearsal-synth-{key[:12]}-"))
            release_synth(env, built, catalog, environments)
            _SYNTH_CACHE[key] = built
        shutil.rmtree(outdir, ignore_errors=True)
        shutil.copytree(_SYNTH_CACHE[key], outdir)
        return {
            p.name.removesuffix(".template.json"): json.loads(p.read_text())
            for p in sorted(outdir.glob("*.template.json"))
        }

    return synth


class AccountTools(fakes.FakeTools):
    """CloudFormation, docker, SageMaker training and the smoke check, as the account sees them:
    a deploy creates exactly what the assembly's templates declare, in the assembly's own
    account and region, and refuses an assembly that still needs context."""

    def _deploy(self, names: list[str]) -> None:
        outdir = self.release._outdir
        manifest = json.loads((outdir / "manifest.json").read_text())
        assert not manifest.get("missing"), f"deployed with missing context: {manifest['missing']}"
        for name in names:
            artifact = manifest["artifacts"][name]
            assert artifact["environment"] == f"aws://{ACCOUNT}/{REGION}", artifact["environment"]
            text = json.dumps(self.release.templates[name])
            assert "dummy1" not in text, f"{name} has CDK's placeholder availability zones"
            self._update(name, self.release.templates[name])
            self.deployed_elsewhere(name, self.release.templates[name])

    def _update(self, name: str, template: dict) -> None:
        """A stack update deletes what the new template no longer declares, unless its
        DeletionPolicy keeps it; a group that still holds versions cannot be deleted, and the
        update then rolls back."""
        old = self._deployed_template(name)
        if old is None:
            return
        sm = boto3.client("sagemaker", region_name=REGION)
        gone = set(old.get("Resources", {})) - set(template.get("Resources", {}))
        for logical in sorted(gone):
            r = old["Resources"][logical]
            if r["Type"] != "AWS::SageMaker::ModelPackageGroup":
                continue
            if r.get("DeletionPolicy", "Delete") not in ("Delete",):
                continue
            try:
                sm.delete_model_package_group(
                    ModelPackageGroupName=r["Properties"]["ModelPackageGroupName"]
                )
            except sm.exceptions.ClientError as exc:
                raise ReleaseError(f"{name} UPDATE_ROLLBACK_COMPLETE: {exc}") from exc

    @staticmethod
    def _deployed_template(name: str) -> dict | None:
        cfn = boto3.client("cloudformation", region_name=REGION)
        try:
            body = cfn.get_template(StackName=name)["TemplateBody"]
        except cfn.exceptions.ClientError:
            return None
        return json.loads(body) if isinstance(body, str) else body

    def _stateful(self) -> None:
        """The stateful stack's named resources, from its template (resolved for this account
        and region): never a name the test chose."""
        template = self.release.templates[f"{self.release.dep.env.prefix}-stateful"]
        pseudo = {**PSEUDO, "AWS::AccountId": ACCOUNT, "AWS::Region": REGION}
        s3 = boto3.client("s3", region_name=REGION)
        kms = boto3.client("kms", region_name=REGION)
        ecr = boto3.client("ecr", region_name=REGION)
        made = set()
        for r in template["Resources"].values():
            props = r.get("Properties", {})
            if r["Type"] == "AWS::S3::Bucket" and "BucketName" in props:
                bucket = resolve(props["BucketName"], pseudo)
                if bucket in {b["Name"] for b in s3.list_buckets()["Buckets"]}:
                    raise ReleaseError(f"CREATE_FAILED: bucket {bucket} already exists")
                s3.create_bucket(
                    Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": REGION}
                )
                made.add(r["Type"])
            elif r["Type"] == "AWS::KMS::Alias":
                key = kms.create_key()["KeyMetadata"]["KeyId"]
                kms.create_alias(AliasName=props["AliasName"], TargetKeyId=key)
                made.add(r["Type"])
            elif r["Type"] == "AWS::ECR::Repository":
                ecr.create_repository(
                    repositoryName=props["RepositoryName"], imageTagMutability="IMMUTABLE"
                )
                made.add(r["Type"])
        assert made == {"AWS::S3::Bucket", "AWS::KMS::Alias", "AWS::ECR::Repository"}, made

    def train(self, adapter: str, aws, dep, role: str) -> str:
        """The real launcher (``training.launch``) through the SageMaker SDK v3, in the
        environment's session: the CreateTrainingJob request is kept, every S3 URI in it must
        name the environment's own bucket, and the job's output is written where the request
        said."""
        from training.launch import launch

        self.calls.append(("train", adapter, dep.env.name, role))
        launch(adapter, dep.env.name, role, dry_run=False, wait=False, session=aws.session, dep=dep)
        # The job as SageMaker in the environment's region holds it (none elsewhere).
        sm = boto3.client("sagemaker", region_name=REGION)
        head = f"{dep.env.prefix}-{adapter}"[:50]
        names = sorted(
            j["TrainingJobName"]
            for j in sm.list_training_jobs()["TrainingJobSummaries"]
            if j["TrainingJobName"].startswith(head)
        )
        assert names, f"no training job of {adapter} in {REGION}: {self._jobs()}"
        request = sm.describe_training_job(TrainingJobName=names[-1])
        own = f"s3://{self.release.bucket}/"
        uris = _s3_uris(request)
        assert uris and all(u.startswith(own) for u in uris), uris
        self.training_requests.append(request)
        archive = fakes.make_archive(self.ref["tmp"] / "trained", adapter, self.release.dep)
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            tar.add(archive, arcname=f"{adapter}.tar.gz")
        output = request["OutputDataConfig"]["S3OutputPath"].rstrip("/")
        key = f"{output.removeprefix(own)}/{request['TrainingJobName']}/output/model.tar.gz"
        boto3.client("s3", region_name=REGION).put_object(
            Bucket=self.release.bucket, Key=key, Body=buf.getvalue()
        )
        return f"{own}{key}"

    @staticmethod
    def _jobs() -> dict[str, list[str]]:
        out = {}
        for region in (REGION, SHELL_REGION, "us-east-1"):
            sm = boto3.client("sagemaker", region_name=region)
            out[region] = [
                j["TrainingJobName"] for j in sm.list_training_jobs()["TrainingJobSummaries"]
            ]
        return out

    def preflight(self, session, dep, environments_dir, *, smoke=True, training=False):
        """The real preflight (``ops.preflight``), on the account's own answers."""
        return fakes.Tools.preflight(
            self, session, dep, environments_dir, smoke=smoke, training=training
        )


def _answer(operation: str, params: dict) -> dict:
    """Service Quotas, Lambda's account settings and IAM's policy simulation, which moto does
    not implement: answered in the shape of AWS's model (botocore validated the request)."""
    if operation == "ListServiceQuotas":
        return {"Quotas": [{"QuotaName": n, "QuotaCode": c} for n, (c, _) in APPLIED.items()]}
    if operation == "ListAWSDefaultServiceQuotas":
        return {"Quotas": [{"QuotaName": n, "QuotaCode": c} for n, (c, _) in DEFAULTS.items()]}
    if operation in ("GetServiceQuota", "GetAWSDefaultServiceQuota"):
        table = APPLIED if operation == "GetServiceQuota" else DEFAULTS
        value = next(v for c, v in table.values() if c == params["QuotaCode"])
        return {"Quota": {"QuotaCode": params["QuotaCode"], "Value": value}}
    if operation == "GetAccountSettings":
        return {
            "AccountLimit": {"ConcurrentExecutions": 1000, "UnreservedConcurrentExecutions": 1000}
        }
    if operation == "GetFunctionConcurrency":
        return {}
    if operation == "SimulatePrincipalPolicy":
        return {
            "EvaluationResults": [
                {"EvalActionName": a, "EvalResourceName": "*", "EvalDecision": "allowed"}
                for a in params.get("ActionNames", [])
            ]
        }
    raise AssertionError(operation)


def _emulated(session: boto3.Session) -> boto3.Session:
    """Answers for what moto lacks, each checked to be in the environment's region."""
    seen: dict[str, dict] = {}

    def remember(params, model, **_):
        seen[model.name] = dict(params)

    def answer(model, context, **_):
        region = context.get("client_region")
        if model.service_model.service_name != "iam":  # IAM is global
            assert region == REGION, f"{model.name} sent to {region}, not {REGION}"
        return AWSResponse("https://emulated.invalid", 200, {}, None), _answer(
            model.name, seen.get(model.name, {})
        )

    for service, ops in {
        "service-quotas": (
            "ListServiceQuotas",
            "ListAWSDefaultServiceQuotas",
            "GetServiceQuota",
            "GetAWSDefaultServiceQuota",
        ),
        "lambda": ("GetAccountSettings", "GetFunctionConcurrency"),
        "iam": ("SimulatePrincipalPolicy",),
    }.items():
        for op in ops:
            session.events.register(f"before-parameter-build.{service}.{op}", remember)
            session.events.register(f"before-call.{service}.{op}", answer)

    return session


@pytest.fixture
def account(monkeypatch):
    """An account that holds only the CDK bootstrap and the user's training role."""
    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": SHELL_REGION,
        "MOTO_ACCOUNT_ID": ACCOUNT,
    }.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_REGION", raising=False)
    fakes.strict_sagemaker(monkeypatch)
    fakes.strict_cloudformation(monkeypatch)
    for ci in ("CI", "CODEBUILD_BUILD_ID"):
        monkeypatch.delenv(ci, raising=False)
    with mock_aws():
        boto3.client("ssm", region_name=REGION).put_parameter(
            Name="/cdk-bootstrap/hnb659fds/version", Value="30", Type="String"
        )
        boto3.client("cloudformation", region_name=REGION).create_stack(
            StackName="CDKToolkit",
            TemplateBody=json.dumps(
                {"Resources": {"H": {"Type": "AWS::CloudFormation::WaitConditionHandle"}}}
            ),
        )
        from training.launch import SAGEMAKER_TRUST

        trust = SAGEMAKER_TRUST
        iam = boto3.client("iam")
        iam.create_role(RoleName="lora-training", AssumeRolePolicyDocument=json.dumps(trust))
        iam.create_role(RoleName="release-operator", AssumeRolePolicyDocument=json.dumps(trust))
        creds = boto3.client("sts", region_name=REGION).assume_role(
            RoleArn=OPERATOR, RoleSessionName="rehearsal"
        )["Credentials"]
        # A session as `make release` has one: a role's, with no region of its own (the
        # shell's default is another).
        yield _emulated(
            boto3.Session(
                aws_access_key_id=creds["AccessKeyId"],
                aws_secret_access_key=creds["SecretAccessKey"],
                aws_session_token=creds["SessionToken"],
            )
        )


def _configure(env: dict) -> None:
    """What the deploy guide asks of a user: the account, the region, the operator."""
    env["account"] = ACCOUNT
    env["region"] = REGION
    env.setdefault("router", {})["operators"] = [OPERATOR]


@pytest.fixture
def world(tmp_path, account):
    catalog, environments = edited_config(tmp_path, environment=_configure)
    dep = load_deployment("dev", catalog, environments)
    assert (dep.env.account, dep.env.region) == (ACCOUNT, REGION)
    archives = tmp_path / "archives"
    # A checkout where `make up` already ran: archives of the local platform's small base, in
    # its own folder and (as older versions left them) flat in the archives root.
    local = load_deployment("local")
    for where in (archives / local.base_key, archives):
        where.mkdir(parents=True, exist_ok=True)
        for a in dep.adapters[:2]:
            fakes.make_archive(where, a.name, local)
    ref: dict = {"tmp": tmp_path}
    tools = AccountTools(ref)
    tools.training_requests = []
    logs: list[str] = []

    def release(**kw) -> Release:
        r = Release(
            "dev",
            account,
            tools=tools,
            catalog=catalog,
            environments_dir=environments,
            archives=archives,
            training_role=TRAINING_ROLE,
            synth=cached_synth("dev", catalog, environments),
            log=logs.append,
            **kw,
        )
        ref["release"] = r
        return r

    return {
        "release": release,
        "tools": tools,
        "catalog": catalog,
        "environments": environments,
        "logs": logs,
        "dep": dep,
        "tmp": tmp_path,
        "archives": archives,
        "session": account,
    }


def _released(world: dict) -> dict[str, str]:
    with pytest.raises(ReleaseError, match="has not approved every version"):
        world["release"]().run()
    fakes.approve_all(world, by="rehearsal", region=REGION)
    return world["release"]().run()


def _edit_catalog(world: dict, edit) -> None:
    data = yaml.safe_load(world["catalog"].read_text())
    edit(data)
    world["catalog"].write_text(yaml.safe_dump(data, sort_keys=False))


def _groups() -> set[str]:
    sm = boto3.client("sagemaker", region_name=REGION)
    return {
        g["ModelPackageGroupName"]
        for g in sm.list_model_package_groups()["ModelPackageGroupSummaryList"]
    }


def _versions() -> list[str]:
    """Every model package version in the region's groups (a list call per group, as the
    strict fake answers ListModelPackages only with ModelPackageType)."""
    sm = boto3.client("sagemaker", region_name=REGION)
    return sorted(
        p["ModelPackageArn"]
        for group in _groups()
        for p in sm.list_model_packages(ModelPackageGroupName=group, ModelPackageType="Versioned")[
            "ModelPackageSummaryList"
        ]
    )


def test_the_first_day_as_configured_from_make_up_to_destroy_and_back(world) -> None:
    dep, tools, logs = world["dep"], world["tools"], world["logs"]
    # The dry run from a checkout where `make up` ran: nothing done, nothing trusted.
    assert world["release"](dry_run=True).run() == dict.fromkeys(STEPS, "missing")

    # The first release: the local archives are skipped with the reason; every adapter trains
    # in the environment's account, region and bucket.
    outcome = _released(world)
    assert outcome == {**dict.fromkeys(STEPS[:5], "done"), "deploy": "ran", "smoke": "ran"}
    text = "\n".join(logs)
    for a in dep.adapters[:2]:
        assert f"{a.name}: skipped {world['archives'] / a.name}.tar.gz: trained on" in text
    trained = sorted(c[1] for c in tools.calls if c[0] == "train")
    assert trained == sorted(a.name for a in dep.adapters)
    bucket = f"lora-dev-artifacts-{ACCOUNT}-{REGION}"
    assert world["release"]().bucket == bucket
    for request in tools.training_requests:
        assert request["RoleArn"] == TRAINING_ROLE
        assert all(u.startswith(f"s3://{bucket}/") for u in _s3_uris(request))
    # The local platform's archives are where they were: a release never writes over them.
    local = load_deployment("local")
    assert (world["archives"] / local.base_key / f"{dep.adapters[0].name}.tar.gz").is_file()
    assert world["release"]().run() == dict.fromkeys(STEPS, "done")

    # Add an adapter: its group comes with the registry shard, then it trains and deploys.
    _edit_catalog(world, lambda d: d["adapters"].append(_new_entry()))
    assert _released(world)["deploy"] == "ran"
    assert "lora-dev-contracts-summary" in _groups()

    # Remove one: its versions are deleted first, so its shard can delete the group.
    removed = dep.adapters[-1].name
    _edit_catalog(
        world, lambda d: d.update(adapters=[e for e in d["adapters"] if e["name"] != removed])
    )
    logs.clear()
    assert world["release"]().run()["deploy"] == "ran"
    assert f"lora-dev-{removed}" not in _groups()
    assert any(f"lora-dev-{removed}: its entry left the catalog; deleted" in m for m in logs)
    assert world["release"]().run() == dict.fromkeys(STEPS, "done")

    # A shadow canary: published by hand as the docs say, registered in the lifecycle stage the
    # router may record decisions in (and only that package), approved, released.
    _shadow_canary_release(world, dep.adapters[0].name)
    # ... then rolled back (make rollback), released without it.
    from config.rollout import rollback

    rollback(dep.adapters[0].name, world["catalog"])
    assert world["release"]().run()["deploy"] == "ran"

    # Tear down in the environment's region, whatever the shell's is, and release again.
    from ops.teardown import TeardownError, teardown

    # A stack still protected (deployed while the file had deletion_protection on): refused
    # before anything is deleted, since `cdk destroy` would stop at it with the versions gone.
    cfn = boto3.client("cloudformation", region_name=REGION)
    cfn.update_termination_protection(
        StackName="lora-dev-stateful", EnableTerminationProtection=True
    )
    versions = _versions()

    def destroy() -> None:
        dep = world["release"]().dep
        teardown(
            AwsEnv(dep.env, boto3.Session()),
            dep,
            tools.run,
            archives=world["archives"],
            log=logs.append,
        )

    with pytest.raises(TeardownError, match="lora-dev-stateful"):
        destroy()
    assert _versions() == versions and versions
    cfn.update_termination_protection(
        StackName="lora-dev-stateful", EnableTerminationProtection=False
    )
    destroy()
    left = [
        s["StackName"]
        for s in cfn.list_stacks()["StackSummaries"]
        if s["StackStatus"] != "DELETE_COMPLETE" and s["StackName"].startswith("lora-dev-")
    ]
    assert left == []
    kept = world["archives"] / dep.base_key
    assert (kept / "contracts-summary.tar.gz").is_file()
    tools.calls.clear()
    outcome = _released(world)
    assert outcome["deploy"] == "ran" and outcome["smoke"] == "ran", outcome
    assert not [c for c in tools.calls if c[0] == "train"], "recreated from the kept archives"
    assert world["release"]().run() == dict.fromkeys(STEPS, "done")


def _shadow_canary_release(world: dict, name: str) -> None:
    from config.writer import update_adapter
    from training.package import pack, read_manifest, sha256_file, write_manifest
    from training.publish import publish

    update_adapter(name, {"canary": {"version": "9.0.0", "shadow": 0.5}}, world["catalog"])
    archive = fakes.make_archive(world["tmp"] / "canary", name, world["release"]().dep)
    work = world["tmp"] / "canary" / name
    write_manifest(work, read_manifest(archive).model_copy(update={"version": "9.0.0"}))
    pack(work, archive)
    r = world["release"]()
    sent: list[dict] = []
    r.sm.meta.events.register(
        "before-parameter-build.sagemaker.CreateModelPackage",
        lambda params, **_: sent.append(dict(params)),
    )
    publish(
        archive,
        name,
        "dev",
        bucket=r.bucket,
        s3=r.s3,
        catalog=world["catalog"],
        environments_dir=r.environments_dir,
        record_uri=False,
        kms_key=r._kms_key(),
        describe_job=lambda job, region: fakes.job_record(
            job, region, r.bucket, HyperParameters={"adapter": name, "version": "9.0.0"}
        ),
        job_archive=lambda uri, adapter, region: sha256_file(archive),
        canary=True,
        registry=r.sm,
    )
    # What CreateModelPackage was sent (botocore validated it against the API model; moto keeps
    # neither ModelLifeCycle nor every tag, so the request itself is the evidence).
    created = [p for p in sent if p["ModelPackageGroupName"] == f"lora-dev-{name}"]
    assert len(created) == 1
    lifecycle = created[0]["ModelLifeCycle"]
    assert (lifecycle["Stage"], lifecycle["StageStatus"]) == ("shadow-canary", "judging")
    assert {"Key": "lora-fleet-stage", "Value": "shadow-canary"} in created[0]["Tags"]
    fakes.approve_all(world, by="rehearsal", region=REGION)
    outcome = world["release"]().run()
    assert outcome["deploy"] == "ran" and outcome["smoke"] == "ran", outcome


def _new_entry() -> dict:
    return {
        "name": "contracts-summary",
        "version": "1.0.0",
        "base": "qwen3-4b",
        "task": "style_transfer",
        "rank": 16,
        "alpha": 32,
        "allow": {"tenants": ["legal"]},
    }


@pytest.mark.parametrize("env", ["dev", "staging", "prod"])
def test_every_deployable_environment_synthesizes_with_its_account_set(tmp_path, env) -> None:
    """The release's own synth (cdk-nag's three packs included) of each environment as a user
    configures it: no missing context, no placeholder zones, the account in every stack."""
    catalog, environments = edited_config(tmp_path, env, environment=_configure)
    out = tmp_path / "cdk.out"
    templates = release_synth(env, out, catalog, environments)
    manifest = json.loads((out / "manifest.json").read_text())
    assert not manifest.get("missing"), manifest["missing"]
    assert "dummy1" not in json.dumps(templates)
    envs = {
        a["environment"]
        for a in manifest["artifacts"].values()
        if a["type"] == "aws:cloudformation:stack"
    }
    assert envs == {f"aws://{ACCOUNT}/{REGION}"}, envs
    subnets = [
        r["Properties"]["AvailabilityZone"]
        for t in templates.values()
        for r in t["Resources"].values()
        if r["Type"] == "AWS::EC2::Subnet"
    ]
    azs = load_deployment(env, catalog, environments).env.network.max_azs
    assert len(subnets) == azs, subnets
