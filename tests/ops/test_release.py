"""``make release`` against an empty account (moto, in process), with docker, the CDK CLI, the hub,
training jobs and the smoke check behind a recording seam: every step missing in a dry run, each
done in order by a release, and all skipped by a second release."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import boto3
import pytest
import yaml
from moto import mock_aws

from config import CATALOG_PATH, load_deployment
from contracts.compat import tokenizer_sha256
from contracts.manifests import (
    AdapterManifest,
    BaseRef,
    MergedAdapter,
    MergedFiles,
    MergedManifest,
)
from ops.release import BASE_MANIFEST, STEPS, Release, ReleaseError, Tools
from tests.infra.conftest import CONFIG, PSEUDO, edited_config, resolve, synth_in_process
from training.package import pack, sha256_file, write_manifest

pytestmark = pytest.mark.synth
ACCOUNT = "123456789012"
REGION = "us-east-1"


class FakeTools(Tools):
    """Plays CloudFormation, docker, the hub, SageMaker training and the smoke check against moto,
    recording every command line and call."""

    def __init__(self, release_ref: dict) -> None:
        self.calls: list[tuple] = []
        self.ref = release_ref

    @property
    def release(self) -> Release:
        return self.ref["release"]

    @property
    def account(self) -> str:
        """The emulated account is the release's (its STS answer), never a constant."""
        return self.release.account

    @property
    def region(self) -> str:
        return self.release.region

    def run(self, argv: list[str], *, input: str | None = None) -> None:
        self.calls.append(("run", tuple(argv)))
        if argv[:4] == ["npx", "--no-install", "cdk", "deploy"]:
            assert argv[4:6] == ["--app", str(self.release._outdir)]
            assert "--require-approval" in argv and "never" in argv
            names = argv[argv.index("events") + 1 :]
            self._deploy(sorted(self.release.templates) if names == ["--all"] else names)
        elif argv[:4] == ["npx", "--no-install", "cdk", "destroy"]:
            assert "--force" in argv and argv[argv.index("-c") + 1] == "env=dev"
            pattern = argv[4]
            assert pattern.endswith("-*"), "an environment's own stacks, never --all"
            self.destroy(pattern.removesuffix("-*"))
        elif argv[:2] == ["docker", "login"]:
            assert argv[argv.index("--username") + 1] == "AWS" and input
        elif argv[:3] == ["docker", "buildx", "build"]:
            assert argv[argv.index("--platform") + 1] == "linux/amd64"
            assert "--push" in argv
            base = argv[argv.index("--build-arg") + 1]
            assert base.startswith("VLLM_IMAGE=vllm/vllm-openai:v0.32.0@sha256:"), base
            uri = argv[argv.index("--tag") + 1]
            repo, tag = uri.split("/", 1)[1].rsplit(":", 1)
            manifest = json.dumps(
                {
                    "schemaVersion": 2,
                    "config": {"digest": "sha256:" + "1" * 64},
                    "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
                }
            )
            boto3.client("ecr", region_name=self.region).put_image(
                repositoryName=repo, imageManifest=manifest, imageTag=tag
            )
        else:
            raise AssertionError(f"unexpected command {argv}")

    def _deploy(self, names: list[str]) -> None:
        """What CloudFormation would leave: the stacks (with the deployed template) and the
        resources later steps use (bucket, key alias, repository)."""
        for name in names:
            self.deployed_elsewhere(name, self.release.templates[name])

    def deployed_elsewhere(self, name: str, template: dict) -> None:
        """A stack deployed with ``template``: by this release, or by another synth (a
        shell's ``cdk deploy``, the pipeline)."""
        from moto.cloudformation.models import cloudformation_backends

        cfn = boto3.client("cloudformation", region_name=self.region)
        placeholder = json.dumps(
            {"Resources": {"H": {"Type": "AWS::CloudFormation::WaitConditionHandle"}}}
        )
        backend = cloudformation_backends[self.account][self.region]
        held = self._held(name)
        try:
            cfn.describe_stacks(StackName=name)
        except cfn.exceptions.ClientError:
            cfn.create_stack(StackName=name, TemplateBody=placeholder)
            if name.endswith("-stateful"):
                self._stateful()
        (stack,) = [s for s in backend.stacks.values() if s.name == name]
        stack.template = json.dumps(template)
        self._groups(template, held)

    def _held(self, name: str) -> set[str]:
        """The model package groups the deployed stack ``name`` already holds."""
        from moto.cloudformation.models import cloudformation_backends

        backend = cloudformation_backends[self.account][self.region]
        stacks = [
            s for s in backend.stacks.values() if s.name == name and s.status != "DELETE_COMPLETE"
        ]
        if not stacks:
            return set()
        return {
            r["Properties"]["ModelPackageGroupName"]
            for r in json.loads(stacks[0].template).get("Resources", {}).values()
            if r["Type"] == "AWS::SageMaker::ModelPackageGroup"
        }

    def _groups(self, template: dict, held: set[str]) -> None:
        """The model package groups a deployed template declares, and only those: a group no
        stack created does not exist (CreateModelPackage refuses it, as SageMaker would), and a
        stack cannot create a group of a name that exists outside it (CloudFormation's create
        fails "already exists", as for every resource with a fixed name)."""
        sm = boto3.client("sagemaker", region_name=self.region)
        for r in template.get("Resources", {}).values():
            if r["Type"] != "AWS::SageMaker::ModelPackageGroup":
                continue
            group = r["Properties"]["ModelPackageGroupName"]
            try:
                sm.describe_model_package_group(ModelPackageGroupName=group)
            except sm.exceptions.ClientError:
                sm.create_model_package_group(ModelPackageGroupName=group)
                continue
            if group not in held:
                raise ReleaseError(f"CREATE_FAILED: model package group {group} already exists")

    def destroy(self, prefix: str) -> None:
        """What ``npx cdk destroy 'PREFIX-*'`` leaves: every stack of the environment deleted,
        and each resource this fake models deleted with it unless the deployed template's
        ``DeletionPolicy`` keeps it (CDK's auto-delete custom resource empties a bucket first;
        ``EmptyOnDelete`` a repository)."""
        from moto.cloudformation.models import cloudformation_backends

        backend = cloudformation_backends[self.account][self.region]
        cfn = boto3.client("cloudformation", region_name=self.region)
        s3 = boto3.resource("s3", region_name=self.region)
        sm = boto3.client("sagemaker", region_name=self.region)
        kms = boto3.client("kms", region_name=self.region)
        ecr = boto3.client("ecr", region_name=self.region)
        pseudo = {**PSEUDO, "AWS::AccountId": self.account, "AWS::Region": self.region}

        def named(value):
            return None if value is None else resolve(value, pseudo)

        live = [s for s in backend.stacks.values() if s.status != "DELETE_COMPLETE"]
        for stack in [s for s in live if s.name.startswith(f"{prefix}-")]:
            # CloudFormation refuses DeleteStack on a protected stack ("Protect CloudFormation
            # stacks from being deleted", its user guide), and `cdk destroy` stops there.
            (described,) = cfn.describe_stacks(StackName=stack.name)["Stacks"]
            if described.get("EnableTerminationProtection"):
                raise ReleaseError(
                    f"{stack.name}: Stack [{stack.name}] cannot be deleted while "
                    "TerminationProtection is enabled"
                )
            for r in json.loads(stack.template).get("Resources", {}).values():
                if r.get("DeletionPolicy", "Delete") != "Delete":
                    continue
                props = r.get("Properties", {})
                if (
                    r["Type"] == "AWS::S3::Bucket"
                    and named(props.get("BucketName")) == self.release.bucket
                ):
                    bucket = s3.Bucket(self.release.bucket)
                    bucket.object_versions.delete()
                    bucket.delete()
                elif r["Type"] == "AWS::ECR::Repository":
                    ecr.delete_repository(repositoryName=props["RepositoryName"], force=True)
                elif r["Type"] == "AWS::KMS::Alias":
                    alias = props["AliasName"]
                    key = kms.describe_key(KeyId=alias)["KeyMetadata"]["KeyId"]
                    kms.delete_alias(AliasName=alias)
                    kms.schedule_key_deletion(KeyId=key, PendingWindowInDays=7)
                elif r["Type"] == "AWS::SageMaker::ModelPackageGroup":
                    try:
                        sm.delete_model_package_group(
                            ModelPackageGroupName=props["ModelPackageGroupName"]
                        )
                    except sm.exceptions.ClientError as exc:
                        raise ReleaseError(f"{stack.name} DELETE_FAILED: {exc}") from exc
            cfn.delete_stack(StackName=stack.name)

    def _stateful(self) -> None:
        """The stateful stack's named resources; one that a teardown kept fails the create, as
        CloudFormation's "already exists" would."""
        dep = self.release.dep
        s3 = boto3.client("s3", region_name=self.region)
        if self.release.bucket in {b["Name"] for b in s3.list_buckets()["Buckets"]}:
            raise ReleaseError(f"CREATE_FAILED: bucket {self.release.bucket} already exists")
        s3.create_bucket(Bucket=self.release.bucket)
        kms = boto3.client("kms", region_name=self.region)
        key = kms.create_key()["KeyMetadata"]["KeyId"]
        kms.create_alias(AliasName=f"alias/{dep.env.prefix}-data", TargetKeyId=key)
        boto3.client("ecr", region_name=self.region).create_repository(
            repositoryName=dep.base.image.repository_name(dep.env.prefix),
            imageTagMutability="IMMUTABLE",
        )

    def base_image(self, *, ci: bool) -> str:
        """The registry's answer for vLLM's tag (no registry here): a pinned reference."""
        self.calls.append(("base_image", ("ci" if ci else "terminal",)))
        return "vllm/vllm-openai:v0.32.0@sha256:" + "c" * 64

    def download_base(self, repo_id: str, revision: str, dest: Path) -> Path:
        self.calls.append(("download_base", repo_id, revision))
        return fake_base(dest)

    def train(self, adapter: str, aws, dep, role: str) -> str:
        assert aws.bucket == self.release.bucket and dep.env.name == self.release.env
        self.calls.append(("train", adapter, dep.env.name, role))
        archive = make_archive(self.ref["tmp"] / "trained", adapter, self.release.dep)
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            tar.add(archive, arcname=f"{adapter}.tar.gz")
        key = f"jobs/{adapter}/output/model.tar.gz"
        boto3.client("s3", region_name=self.region).put_object(
            Bucket=self.release.bucket, Key=key, Body=buf.getvalue()
        )
        return f"s3://{self.release.bucket}/{key}"

    def training_job(self, name: str, region: str) -> dict:
        return job_record(name, region, self.release.bucket)

    def job_archive(self, uri: str, adapter: str, region: str) -> str:
        """The archive the job "wrote": the one the test trained or put in the archives."""
        for where in ("trained", f"archives/{self.release.dep.base_key}"):
            if (path := self.ref["tmp"] / where / f"{adapter}.tar.gz").exists():
                return sha256_file(path)
        raise AssertionError(f"no archive of {adapter} was made")

    def merge(self, base_dir: Path, archive: Path, out: Path) -> MergedManifest:
        """What training.merge leaves: weights and the merged manifest."""
        self.calls.append(("merge", archive.name))
        out.mkdir(parents=True)
        (out / "model.safetensors").write_bytes(b"merged" * 8)
        manifest = MergedManifest(
            merged=MergedFiles(files={"model.safetensors": sha256_file(out / "model.safetensors")}),
            base=BaseRef(model_id="base"),
            adapter=MergedAdapter(
                name=archive.name.removesuffix(".tar.gz"), version="1", sha256=sha256_file(archive)
            ),
        )
        manifest.dump(out)
        return manifest

    def smoke(self, env: str) -> int:
        self.calls.append(("smoke", env))
        return 0

    def preflight(self, session, dep, environments_dir, *, smoke=True, training=False) -> list[str]:
        """moto has no SageMaker quotas: ops.preflight is tested against stubbed clients
        (tests/ops/test_preflight.py); here it passes, unrecorded, as on a ready account."""
        return []


def fake_base(dest: Path) -> Path:
    """What the hub's snapshot of the base holds, in miniature."""
    (dest / "config.json").write_text('{"model_type": "qwen3"}')
    (dest / "model.safetensors").write_bytes(b"\0" * 64)
    (dest / "tokenizer.json").write_text('{"version": "1.0"}')
    (dest / "tokenizer_config.json").write_text("{}")
    return dest


def _fake_tokenizer_sha256() -> str:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        return tokenizer_sha256(fake_base(Path(tmp)))


GATE = {
    "metric": "chrf",
    "beats_base": True,
    "publishable": True,
    "failures": [],
    "adapter": {"score": 60.0},
    "base": {"score": 10.0},
    "bootstrap": {"ci_low": 42.5},
}


def job_name(adapter: str) -> str:
    return f"lora-dev-{adapter}-job"


def job_record(name: str, region: str, bucket: str, **changes) -> dict:
    """What DescribeTrainingJob answers for the job that made ``make_archive``'s archive: every
    member botocore's ``DescribeTrainingJobResponse`` requires, the output in the environment's
    own bucket, and parsed through a Stubber, which refuses a shape SageMaker would not send."""
    from datetime import UTC, datetime

    from botocore.stub import Stubber

    adapter = name.removeprefix("lora-dev-").removesuffix("-job")
    metrics = {"adapter_score": 60.0, "base_score": 10.0, "ci_low": 42.5, "publishable": 1.0}
    account = bucket.split("-artifacts-", 1)[1].split("-", 1)[0]
    response = {
        "TrainingJobName": name,
        "TrainingJobArn": f"arn:aws:sagemaker:{region}:{account}:training-job/{name}",
        "TrainingJobStatus": "Completed",
        "SecondaryStatus": "Completed",
        "AlgorithmSpecification": {
            "TrainingImage": f"{account}.dkr.ecr.{region}.amazonaws.com/lora-dev-runtime:train",
            "TrainingInputMode": "File",
        },
        "ResourceConfig": {
            "InstanceType": "ml.g5.2xlarge",
            "InstanceCount": 1,
            "VolumeSizeInGB": 100,
        },
        "StoppingCondition": {"MaxRuntimeInSeconds": 14_400},
        "CreationTime": datetime(2026, 12, 1, tzinfo=UTC),
        "ModelArtifacts": {"S3ModelArtifacts": f"s3://{bucket}/jobs/{name}/output/model.tar.gz"},
        "HyperParameters": {"adapter": adapter, "version": "1.0.0"},
        "FinalMetricDataList": [
            {"MetricName": f"gate:{k}", "Value": v} for k, v in metrics.items()
        ],
        **changes,
    }
    sm = boto3.client(
        "sagemaker", region_name=region, aws_access_key_id="x", aws_secret_access_key="x"
    )
    with Stubber(sm) as stub:
        stub.add_response("describe_training_job", response, {"TrainingJobName": name})
        described = sm.describe_training_job(TrainingJobName=name)
    described.pop("ResponseMetadata", None)
    return described


def make_archive(directory: Path, name: str, dep) -> Path:
    """An adapter archive that passes publish's gates for ``dep``'s base: the output of a
    training job whose recorded metrics (``job_record``) agree with its manifest."""
    entry = dep.adapter(name).entry
    work = directory / name
    work.mkdir(parents=True, exist_ok=True)
    (work / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 8}))
    (work / "adapter_model.safetensors").write_bytes(name.encode() * 8)
    from training.datasets import for_entry

    split, identity = for_entry(entry, CATALOG_PATH.parent)
    write_manifest(
        work,
        AdapterManifest.parse(
            {
                "name": name,
                "version": entry.version,
                "dataset": {"sha256": split.sha256(), **identity},
                "base": {
                    "model_id": dep.base.model_id,
                    "revision": dep.base.revision,
                    "tokenizer_sha256": _fake_tokenizer_sha256(),
                },
                "eval": GATE,
                "training": {"job_name": job_name(name)},
            },
            "the test's manifest",
        ),
    )
    archive = directory / f"{name}.tar.gz"
    pack(work, archive)
    return archive


def _delete_model_package(self):
    """DeleteModelPackage, which moto lacks (botocore still serializes the call from AWS's
    model): the version is gone."""
    from moto.core.responses import EmptyResult
    from moto.sagemaker.exceptions import ValidationError

    backend = self.sagemaker_backend
    name = self._get_param("ModelPackageName")
    arn = backend.model_package_name_mapping.get(name, name)
    if backend.model_packages.pop(arn, None) is None:
        raise ValidationError(f"Model package {name} not found")
    return EmptyResult()


def _delete_model_package_group(self):
    """DeleteModelPackageGroup, which moto lacks, at its strictest: SageMaker's API reference
    lists a ConflictException without saying when, so a group that still holds versions is
    refused (its stack would end DELETE_FAILED)."""
    from moto.core.responses import EmptyResult
    from moto.sagemaker.exceptions import ConflictException, ValidationError

    backend = self.sagemaker_backend
    group = self._get_param("ModelPackageGroupName")
    if group not in backend.model_package_groups:
        raise ValidationError(f"Model Package Group {group} does not exist")
    held = [p for p in backend.model_packages.values() if p.model_package_group_name == group]
    if held:
        raise ConflictException(f"Model Package Group {group} holds {len(held)} version(s)")
    del backend.model_package_groups[group]
    return EmptyResult()


def _list_model_packages(real):
    """ListModelPackages as botocore's sagemaker model documents it: ``ModelPackageType``
    "UNVERSIONED is the default value". moto answers a group's versions whenever a group is
    named, so a call that forgot the type passed; every package here is a version, so such a
    call answers none, as SageMaker would."""
    from moto.core.responses import ActionResult

    def list_model_packages(self):
        if self._get_param("ModelPackageType") is None:
            return ActionResult({"ModelPackageSummaryList": []})
        return real(self)

    return list_model_packages


def _update_termination_protection(self):
    """UpdateTerminationProtection, which moto lacks (botocore serializes the call from AWS's
    model): the stack's flag, as DescribeStacks then shows it."""
    from moto.core.responses import ActionResult

    stack = self.cloudformation_backend.get_stack(self._get_param("StackName"))
    stack.enable_termination_protection = self._get_param("EnableTerminationProtection") in (
        True,
        "true",
    )
    return ActionResult({"StackId": stack.stack_id})


def strict_cloudformation(monkeypatch) -> None:
    """moto's CloudFormation with the call it lacks."""
    from moto.cloudformation.responses import CloudFormationResponse

    monkeypatch.setattr(
        CloudFormationResponse,
        "update_termination_protection",
        _update_termination_protection,
        raising=False,
    )


def strict_sagemaker(monkeypatch) -> None:
    """moto's SageMaker with the calls it lacks and the defaults it does not honour."""
    from moto.sagemaker.responses import SageMakerResponse

    monkeypatch.setattr(
        SageMakerResponse, "delete_model_package", _delete_model_package, raising=False
    )
    monkeypatch.setattr(
        SageMakerResponse, "delete_model_package_group", _delete_model_package_group, raising=False
    )
    monkeypatch.setattr(
        SageMakerResponse,
        "list_model_packages",
        _list_model_packages(SageMakerResponse.list_model_packages),
    )


@pytest.fixture
def account(monkeypatch):
    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": REGION,
    }.items():
        monkeypatch.setenv(key, value)
    strict_sagemaker(monkeypatch)
    for ci in ("CI", "CODEBUILD_BUILD_ID"):  # a developer's release unless a test says CI
        monkeypatch.delenv(ci, raising=False)
    with mock_aws():
        boto3.client("ssm", region_name=REGION).put_parameter(
            Name="/cdk-bootstrap/hnb659fds/version", Value="30", Type="String"
        )
        yield boto3.Session(region_name=REGION)


@pytest.fixture
def setup(tmp_path, account):
    """A copy of the catalog (release writes hashes into it), archives for half the adapters."""
    catalog, environments = edited_config(tmp_path)
    dep = load_deployment("dev", catalog, environments)
    archives = tmp_path / "archives"
    own = archives / dep.base_key
    own.mkdir(parents=True)
    with_archive = [a.name for a in dep.adapters][::2]
    for name in with_archive:
        make_archive(own, name, dep)
    ref: dict = {"tmp": tmp_path}
    tools = FakeTools(ref)
    logs: list[str] = []

    def release(**kw) -> Release:
        r = Release(
            "dev",
            account,
            tools=tools,
            catalog=catalog,
            environments_dir=environments,
            archives=archives,
            training_role=f"arn:aws:iam::{ACCOUNT}:role/train",
            synth=lambda _out: synth_in_process(catalog, environments),
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
        "with_archive": with_archive,
        "dep": dep,
        "tmp": tmp_path,
    }


def test_a_dry_run_against_an_empty_account_lists_every_step_missing(setup) -> None:
    outcome = setup["release"](dry_run=True).run()
    assert outcome == dict.fromkeys(STEPS, "missing")
    assert setup["tools"].calls == [], "a dry run runs nothing"
    text = "\n".join(setup["logs"])
    assert "[1/7] stacks    missing: lora-fleet-account: not deployed" in text
    assert "not in ECR" in text or "repository does not exist" in text


def approve_all(setup: dict, by: str = "release-test", region: str = REGION) -> None:
    """What a reviewer does between two runs of a release: approve every pending version."""
    from training.registry import approve, versions

    dep = setup["release"]().dep
    sm = boto3.client("sagemaker", region_name=region)
    for a in dep.adapters:
        for version, _ in versions(a):
            approve(sm, dep, a.name, version, by=by, note="looked at its evaluation")


def released(setup: dict) -> dict[str, str]:
    """A release up to the approval step, the approvals, then the rest."""
    with pytest.raises(ReleaseError, match="has not approved every version"):
        setup["release"]().run()
    approve_all(setup)
    return setup["release"]().run()


def test_a_release_runs_each_step_in_order_and_a_second_run_skips_every_step(setup) -> None:
    tools = setup["tools"]
    with pytest.raises(ReleaseError) as refused:
        setup["release"]().run()
    # It stops at the approval step, naming each version published and pending approval.
    for a in setup["dep"].adapters:
        assert f"{a.name} {a.entry.version}: PendingManualApproval" in str(refused.value)
    assert not [r for c in tools.calls if c[0] == "run" for r in [c[1]] if r[-1:] == ("--all",)]
    approve_all(setup)
    outcome = setup["release"]().run()
    assert outcome == {**dict.fromkeys(STEPS[:5], "done"), "deploy": "ran", "smoke": "ran"}
    runs = [c[1] for c in tools.calls if c[0] == "run"]
    deploys = [r for r in runs if r[2:4] == ("cdk", "deploy")]
    assert deploys[0][4 + 6 : 4 + 8] == ("lora-fleet-account", "lora-dev-stateful")
    assert deploys[0][-1] == "lora-dev-network"
    assert "lora-dev-registry-00" in deploys[0] and "lora-dev-registry-15" in deploys[0]
    assert deploys[1][-1] == "--all"
    order = [c[0] if c[0] != "run" else " ".join(c[1][:3]) for c in tools.calls]
    assert order.index("docker buildx build") > order.index("npx --no-install cdk")
    assert order.index("download_base") > order.index("docker buildx build")
    assert order.index("smoke") == len(order) - 1
    # The image went to the repository and tag the catalog names.
    dep = setup["dep"]
    build = next(r for r in runs if r[:3] == ("docker", "buildx", "build"))
    assert build[build.index("--tag") + 1] == (
        f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com/lora-dev/lora-runtime:{dep.base.image.tag}"
    )
    # Base weights staged with SSE-KMS, the tokenizer hash written into the catalog.
    s3 = boto3.client("s3", region_name=REGION)
    bucket = f"lora-dev-artifacts-{ACCOUNT}-{REGION}"
    prefix = f"base/qwen3-4b/{dep.base.revision}/"
    head = s3.head_object(Bucket=bucket, Key=prefix + "model.safetensors")
    assert head["ServerSideEncryption"] == "aws:kms"
    staged = json.loads(s3.get_object(Bucket=bucket, Key=prefix + BASE_MANIFEST)["Body"].read())
    cat = yaml.safe_load(setup["catalog"].read_text())
    assert cat["base_models"]["qwen3-4b"]["tokenizer_sha256"] == staged["tokenizer_sha256"]
    # Archives: the ones at hand published, the others trained; each hash pinned, no URI.
    trained = sorted(c[1] for c in tools.calls if c[0] == "train")
    assert trained == sorted({a.name for a in dep.adapters} - set(setup["with_archive"]))
    for entry in cat["adapters"]:
        key = f"adapters/{entry['name']}/{entry['version']}/adapter.tar.gz"
        meta = s3.head_object(Bucket=bucket, Key=key)
        assert meta["Metadata"]["sha256"] == entry["sha256"]
        assert "artifact" not in entry

    tools.calls.clear()
    setup["logs"].clear()
    assert setup["release"]().run() == dict.fromkeys(STEPS, "done")
    assert tools.calls == [], "a second release changes nothing"
    assert all("done, skipped" in line for line in setup["logs"] if line.startswith("["))


def test_an_existing_tag_is_never_pushed_again(setup) -> None:
    r = setup["release"]()
    r.run(only=("stacks", "image"))
    pushes = [c for c in setup["tools"].calls if c[1][:2] == ("docker", "buildx")]
    assert len(pushes) == 1
    setup["tools"].calls.clear()
    assert setup["release"]().run(only=("image",)) == {"image": "done"}
    assert setup["tools"].calls == []


def _edit_base(catalog: Path, **fields) -> None:
    cat = yaml.safe_load(catalog.read_text())
    cat["base_models"]["qwen3-4b"].update(fields)
    catalog.write_text(yaml.safe_dump(cat, sort_keys=False))


def test_a_digest_that_is_not_in_the_repository_fails_with_a_clear_message(setup) -> None:
    _edit_base(
        setup["catalog"], image={"repository": "lora-runtime", "digest": "sha256:" + "e" * 64}
    )
    r = setup["release"]()
    r.run(only=("stacks",))
    with pytest.raises(ReleaseError, match=r"digest sha256:e+ .* not there"):
        r.run(only=("image",))


def test_a_tokenizer_that_differs_from_the_pinned_hash_is_refused(setup) -> None:
    _edit_base(setup["catalog"], tokenizer_sha256="0" * 64)
    r = setup["release"]()
    r.run(only=("stacks",))
    with pytest.raises(ReleaseError, match=r"tokenizer sha256 .* the catalog pins 0{64}"):
        r.run(only=("weights",))


def test_a_release_in_ci_refuses_an_unpinned_tokenizer_and_says_how_to_pin_it(
    setup, monkeypatch
) -> None:
    """A digest written on the runner is never committed: the next synth would replace the
    model and roll the base component again."""
    monkeypatch.setenv("CI", "true")
    with pytest.raises(ReleaseError, match="tokenizer_sha256") as refused:
        setup["release"]().run()
    assert _fake_tokenizer_sha256() in str(refused.value)
    cat = yaml.safe_load(setup["catalog"].read_text())
    assert cat["base_models"]["qwen3-4b"].get("tokenizer_sha256") is None  # nothing written


def test_adapters_without_archive_or_training_role_name_themselves(setup) -> None:
    r = setup["release"]()
    r.run(only=("stacks",))
    r.training_role = None
    with pytest.raises(ReleaseError, match=r"no archive for .*--training-role"):
        r.run(only=("adapters",))


def test_credentials_of_another_account_are_refused(setup, tmp_path) -> None:
    envs = tmp_path / "environments"
    data = yaml.safe_load((envs / "dev.yaml").read_text())
    data["account"] = "999999999999"
    (envs / "dev.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(ReleaseError, match="account 999999999999"):
        setup["release"]()


def test_an_archive_whose_job_recorded_a_failed_gate_is_not_published(setup, monkeypatch) -> None:
    """The archive's manifest says publishable; SageMaker's record of its job says not."""
    first = setup["with_archive"][0]

    described = setup["tools"].training_job

    def recorded(name: str, region: str) -> dict:
        record = described(name, region)
        if name == job_name(first):
            for m in record["FinalMetricDataList"]:
                if m["MetricName"] == "gate:publishable":
                    m["Value"] = 0.0
        return record

    monkeypatch.setattr(setup["tools"], "training_job", recorded)
    with pytest.raises(ReleaseError, match=f"{first}: adapter '{first}' is not publishable"):
        setup["release"]().run(only=("stacks", "adapters"))


def test_a_release_after_a_plain_cdk_deploy_of_the_stateful_stack_goes_on_and_then_does_nothing(
    setup, tmp_path
) -> None:
    """``cdk deploy PREFIX-stateful`` from a shell deploys the CLI's synth, which carries every
    resource's aws:cdk:path and a CDKMetadata resource; the release's own synth has neither.
    The stack is the same stack: the release must see it as done, not build and push into an
    immutable tag and then fail."""
    release = setup["release"]()
    cli = synth_in_process(setup["catalog"], tmp_path / "environments", cli=True)
    stateful = cli["lora-dev-stateful"]
    assert "aws:cdk:path" in json.dumps(stateful) and "CDKMetadata" in stateful["Resources"]
    setup["tools"].deployed_elsewhere("lora-dev-stateful", stateful)
    assert release.stack_state("lora-dev-stateful") == "done"
    assert release.run(STEPS[:4])["image"] == "ran"
    assert released(setup)["deploy"] == "ran"
    setup["tools"].calls.clear()
    assert setup["release"]().run() == dict.fromkeys(STEPS, "done")
    assert setup["tools"].calls == [], "a second release changes nothing"


def test_stacks_the_pipeline_deployed_are_done(setup, tmp_path) -> None:
    """CDK Pipelines deploys its own synth: the stage's stacks, with stage-prefixed paths."""
    from aws_cdk import App
    from aws_cdk import Environment as CdkEnvironment

    from config import PIPELINE_PATH, load_pipeline
    from infra import nag
    from infra.pipeline import PipelineStack
    from tests.infra.conftest import CLI_CONTEXT
    from tests.infra.test_pipeline import ENABLED

    cfg_file = tmp_path / "pipeline.yaml"
    cfg_file.write_text(
        yaml.safe_dump(
            {
                **yaml.safe_load(PIPELINE_PATH.read_text()),
                **ENABLED,
                "stages": ["dev"],
                "approval_before": [],
            }
        )
    )
    cfg = load_pipeline(cfg_file)
    nag.ACKNOWLEDGEMENTS.clear()
    context = json.loads((CONFIG.parent / "cdk.json").read_text())["context"]
    app = App(outdir=str(tmp_path / "pipeline.out"), context={**context, **CLI_CONTEXT})
    dep = load_deployment("dev", setup["catalog"], tmp_path / "environments")
    PipelineStack(
        app,
        "lora-fleet-pipeline",
        config=cfg,
        deployments={"dev": dep},
        env=CdkEnvironment(region=cfg.region),
    )
    out = Path(app.synth().directory) / "assembly-lora-fleet-pipeline-dev"
    manifest = json.loads((out / "manifest.json").read_text())
    staged = {
        a["properties"]["stackName"]: json.loads(
            (out / a["properties"]["templateFile"]).read_text()
        )
        for a in manifest["artifacts"].values()
        if a["type"] == "aws:cloudformation:stack"
    }
    release = setup["release"]()
    for name in release.foundation_stacks():
        template = staged[name]
        assert "lora-fleet-pipeline/dev/" in json.dumps(template), "stage-prefixed paths"
        setup["tools"].deployed_elsewhere(name, template)
    # What the image and weights steps need is there: the stacks step is done, though the
    # network's synth names its security group rules by the stage's construct paths.
    assert release.status("stacks") == []
    assert release.run(only=("stacks",)) == {"stacks": "done"}
    assert release.stack_state("lora-dev-stateful") == "done"  # metadata aside, the same


def test_publish_registers_each_version_pending_with_its_evaluation_and_tuple(setup) -> None:
    """Model Registry holds the release evidence (seed 002): the gate's figures as the
    package's model-quality report, the compatibility tuple and the archive's identity."""
    release = setup["release"]()
    release.run(STEPS[:4])
    sm = boto3.client("sagemaker", region_name=REGION)
    s3 = boto3.client("s3", region_name=REGION)
    cat = {e["name"]: e for e in yaml.safe_load(setup["catalog"].read_text())["adapters"]}
    dep = release.dep
    for a in dep.adapters:
        (summary,) = sm.list_model_packages(
            ModelPackageGroupName=a.component_name, ModelPackageType="Versioned"
        )["ModelPackageSummaryList"]
        pkg = sm.describe_model_package(ModelPackageName=summary["ModelPackageArn"])
        assert pkg["ModelApprovalStatus"] == "PendingManualApproval"
        meta = pkg["CustomerMetadataProperties"]
        assert meta["version"] == a.entry.version
        assert (meta["base_model_id"], meta["base_revision"]) == (
            dep.base.model_id,
            dep.base.revision,
        )
        assert meta["tokenizer_sha256"] == _fake_tokenizer_sha256()
        assert meta["image"] == f"lora-runtime:{dep.base.image.tag}"
        assert meta["archive_sha256"] == cat[a.name]["sha256"]
        assert meta["archive_uri"] == (
            f"s3://{release.bucket}/adapters/{a.name}/{a.entry.version}/adapter.tar.gz"
        )
        assert meta["weights_sha256"] == cat[a.name]["weights_sha256"]
        assert float(meta["ci_low"]) == GATE["bootstrap"]["ci_low"]
        stats = pkg["ModelMetrics"]["ModelQuality"]["Statistics"]
        bucket, key = stats["S3Uri"].removeprefix("s3://").split("/", 1)
        report = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        assert stats["ContentDigest"] == "sha256:" + hashlib.sha256(report).hexdigest()
        assert json.loads(report)["publishable"] is True
        # What the approval check trusts: the archive's digest in ModelMetrics, which no
        # UpdateModelPackage field reaches (the customer metadata is writable).
        archive = pkg["ModelMetrics"]["ModelQuality"]["Constraints"]
        assert archive["ContentDigest"] == f"sha256:{cat[a.name]['sha256']}"
        assert archive["S3Uri"] == meta["archive_uri"]
        assert "ModelLifeCycle" not in pkg, "a stable version is never in the shadow stage"


def test_rewritten_customer_metadata_does_not_change_what_was_approved(setup) -> None:
    """A writer of customer metadata (the router's registry permission)
    that sets another archive_sha256 on an approved version does not make the release accept
    another archive, nor refuse the approved one."""
    released(setup)
    release = setup["release"]()
    sm = boto3.client("sagemaker", region_name=REGION)
    a = release.dep.adapters[0]
    (summary,) = sm.list_model_packages(
        ModelPackageGroupName=a.component_name, ModelPackageType="Versioned"
    )["ModelPackageSummaryList"]
    meta = sm.describe_model_package(ModelPackageName=summary["ModelPackageArn"])[
        "CustomerMetadataProperties"
    ]
    sm.update_model_package(
        ModelPackageArn=summary["ModelPackageArn"],
        CustomerMetadataProperties={**meta, "archive_sha256": "f" * 64},
        # moto drops the status of a package updated without one; SageMaker keeps it.
        ModelApprovalStatus="Approved",
    )
    from training.registry import approval_problems

    assert approval_problems(sm, release.dep, "dev") == []
    data = yaml.safe_load(setup["catalog"].read_text())
    data["adapters"][0]["sha256"] = "f" * 64
    setup["catalog"].write_text(yaml.safe_dump(data, sort_keys=False))
    problems = approval_problems(sm, setup["release"]().dep, "dev")
    assert problems == [
        f"{a.name} {a.entry.version}: the registered archive is not the one the catalog pins"
    ]


def test_an_unapproved_version_stops_the_release_by_name_and_approving_it_lets_it_through(
    setup,
) -> None:
    from training import approve as approve_cli

    release = setup["release"]()
    release.run(STEPS[:4])
    dep = release.dep
    first, *rest = dep.adapters
    sm = boto3.client("sagemaker", region_name=REGION)
    from training.registry import approve

    for a in rest:
        approve(sm, dep, a.name, a.entry.version, by="jane@example.com")
    with pytest.raises(ReleaseError) as exc:
        setup["release"]().run()
    assert f"{first.name} {first.entry.version}: PendingManualApproval" in str(exc.value)
    assert not any(a.name in str(exc.value) for a in rest)
    assert not [c for c in setup["tools"].calls if c[0] == "smoke"], "nothing deployed"

    # The command a reviewer runs (it reads the shipped catalog: the same names and versions).
    with pytest.raises(SystemExit):
        approve_cli.main(["--env", "dev", "--adapter", first.name])  # --by is required
    assert (
        approve_cli.main(
            [
                "--env",
                "dev",
                "--adapter",
                first.name,
                "--by",
                "Jane Doe",
                "--note",
                "read the evaluation report",
            ]
        )
        == 0
    )
    (summary,) = sm.list_model_packages(
        ModelPackageGroupName=first.component_name, ModelPackageType="Versioned"
    )["ModelPackageSummaryList"]
    pkg = sm.describe_model_package(ModelPackageName=summary["ModelPackageArn"])
    assert pkg["ModelApprovalStatus"] == "Approved"
    assert pkg["CustomerMetadataProperties"]["approved_by"] == "Jane Doe"
    assert pkg["ApprovalDescription"] == "approved by Jane Doe: read the evaluation report"
    assert setup["release"]().run()["deploy"] == "ran"


def test_an_approval_for_other_weights_does_not_count(setup) -> None:
    """A package approved for one archive does not approve another under the same version."""
    release = setup["release"]()
    release.run(STEPS[:4])
    approve_all(setup)
    a = release.dep.adapters[0]
    from config.writer import update_adapter

    update_adapter(a.name, {"sha256": "f" * 64}, setup["catalog"])
    problems = setup["release"]().status("approval")
    assert problems == [
        f"{a.name} {a.entry.version}: the registered archive is not the one the catalog pins"
    ]


def test_a_canary_must_be_published_and_approved_before_the_release_deploys_it(setup) -> None:
    release = setup["release"]()
    release.run(STEPS[:4])
    approve_all(setup)
    dep = release.dep
    a = dep.adapters[0]
    from config.writer import update_adapter

    update_adapter(a.name, {"canary": {"version": "1.1.0", "weight": 10}}, setup["catalog"])
    with pytest.raises(ReleaseError, match=rf"{a.name} canary 1.1.0: no archive in the bucket"):
        setup["release"]().run()
    # Its archive, published by hand as the canary (a training job's, with its gate).
    archive = make_archive(setup["tmp"] / "canary", a.name, setup["release"]().dep)
    from training.package import read_manifest, write_manifest

    work = setup["tmp"] / "canary" / a.name
    manifest = read_manifest(archive)
    write_manifest(work, manifest.model_copy(update={"version": "1.1.0"}))
    pack(work, archive)
    from training.publish import publish

    r = setup["release"]()
    publish(
        archive,
        a.name,
        "dev",
        bucket=r.bucket,
        s3=r.s3,
        catalog=setup["catalog"],
        environments_dir=r.environments_dir,
        record_uri=False,
        kms_key=r._kms_key(),
        describe_job=lambda name, region: job_record(
            name, region, r.bucket, HyperParameters={"adapter": a.name, "version": "1.1.0"}
        ),
        job_archive=lambda uri, adapter, region: sha256_file(archive),
        canary=True,
        registry=r.sm,
    )
    entry = setup["release"]().dep.adapter(a.name).entry
    assert entry.canary is not None and entry.canary.sha256 is not None
    assert entry.version == "1.0.0" and entry.canary.weight == 10
    assert setup["release"]().status("approval") == [
        f"{a.name} 1.1.0: PendingManualApproval (python -m training.approve --env dev "
        f"--adapter {a.name} --version 1.1.0 --by NAME)"
    ]
    approve_all(setup)
    assert setup["release"]().run()["deploy"] == "ran"


def test_a_merged_entry_is_merged_and_staged_in_the_adapters_step(setup) -> None:
    """``serving: merged``: the published archive merged into the base (training.merge) and
    staged under merged/NAME/VERSION/ with its manifest, once."""
    from config.writer import update_adapter

    name = setup["dep"].adapters[0].name
    update_adapter(name, {"serving": "merged"}, setup["catalog"])
    env_file = setup["catalog"].parent / "environments" / "dev.yaml"
    env = yaml.safe_load(env_file.read_text())
    env["serving"]["max_instance_count"] = 5
    env_file.write_text(yaml.safe_dump(env))
    release = setup["release"]()
    assert any(
        m.startswith(f"{name}: merged weights not staged") for m in release.status("adapters")
    )
    release.run(STEPS[:4])
    assert [c for c in setup["tools"].calls if c[0] == "merge"] == [("merge", f"{name}.tar.gz")]
    entry = setup["release"]().dep.adapter(name).entry
    s3 = boto3.client("s3", region_name=REGION)
    prefix = f"merged/{name}/{entry.version}/"
    keys = sorted(
        o["Key"] for o in s3.list_objects_v2(Bucket=release.bucket, Prefix=prefix)["Contents"]
    )
    assert keys == [prefix + "merged_manifest.json", prefix + "model.safetensors"]
    head = s3.head_object(Bucket=release.bucket, Key=prefix + "model.safetensors")
    assert head["ServerSideEncryption"] == "aws:kms"
    staged = json.loads(
        s3.get_object(Bucket=release.bucket, Key=prefix + "merged_manifest.json")["Body"].read()
    )
    assert staged["adapter"]["sha256"] == entry.sha256
    setup["tools"].calls.clear()
    assert setup["release"]().run(STEPS[:4])["adapters"] == "done"
    assert not [c for c in setup["tools"].calls if c[0] == "merge"], "staged once"


def add_entry(setup: dict) -> None:
    """One new catalog entry, as a user commits it: a task of the built-in set, a tenant."""
    data = yaml.safe_load(setup["catalog"].read_text())
    data["adapters"].append(
        {
            "name": "contracts-summary",
            "version": "1.0.0",
            "base": "qwen3-4b",
            "task": "style_transfer",
            "rank": 16,
            "alpha": 32,
            "allow": {"tenants": ["legal"]},
        }
    )
    setup["catalog"].write_text(yaml.safe_dump(data, sort_keys=False))


def test_adding_an_adapter_to_a_released_environment_releases_it_to_the_end(setup) -> None:
    """The new entry's model package group is in no deployed template yet, and
    CreateModelPackage never creates a group; the stacks step deploys the registry shards again
    before publish registers the new version."""
    released(setup)
    add_entry(setup)
    setup["tools"].calls.clear()
    outcome = released(setup)
    assert outcome["stacks"] == "done" and outcome["deploy"] == "ran", outcome
    sm = boto3.client("sagemaker", region_name=REGION)
    packages = sm.list_model_packages(
        ModelPackageGroupName="lora-dev-contracts-summary", ModelPackageType="Versioned"
    )
    assert len(packages["ModelPackageSummaryList"]) == 1
    assert setup["release"]().run() == dict.fromkeys(STEPS, "done")


@pytest.mark.parametrize(
    ("status", "remedy"),
    [
        ("UPDATE_ROLLBACK_FAILED", "continue-update-rollback"),
        ("ROLLBACK_COMPLETE", "delete-stack"),
        ("DELETE_FAILED", "ENIs SageMaker"),
        ("UPDATE_IN_PROGRESS", "wait for it to end"),
        ("DELETE_IN_PROGRESS", "wait for it to end"),
    ],
)
def test_a_stuck_stack_state_names_its_remedy(setup, status, remedy) -> None:
    """Each state no deploy can go on from says what clears it."""
    from moto.cloudformation.models import cloudformation_backends

    release = setup["release"](dry_run=True)
    boto3.client("cloudformation", region_name=REGION).create_stack(
        StackName="lora-dev-network",
        TemplateBody=json.dumps(
            {"Resources": {"H": {"Type": "AWS::CloudFormation::WaitConditionHandle"}}}
        ),
    )
    backend = cloudformation_backends[ACCOUNT][REGION]
    (stack,) = [s for s in backend.stacks.values() if s.name == "lora-dev-network"]
    stack.status = status
    state = release.stack_deployed("lora-dev-network")
    assert state.startswith(f"in state {status}: ") and remedy in state, state


def test_a_failed_first_create_of_a_protected_stack_names_turning_protection_off(setup) -> None:
    """Lora-fleet-account, and staging's and prod's stateful stacks, are
    termination-protected; DeleteStack refuses them, so the remedy turns protection off first."""
    from moto.cloudformation.models import cloudformation_backends

    release = setup["release"](dry_run=True)
    boto3.client("cloudformation", region_name=REGION).create_stack(
        StackName="lora-fleet-account",
        TemplateBody=json.dumps(
            {"Resources": {"H": {"Type": "AWS::CloudFormation::WaitConditionHandle"}}}
        ),
        EnableTerminationProtection=True,
    )
    backend = cloudformation_backends[ACCOUNT][REGION]
    (stack,) = [s for s in backend.stacks.values() if s.name == "lora-fleet-account"]
    stack.status = "ROLLBACK_COMPLETE"
    state = release.stack_deployed("lora-fleet-account")
    assert "update-termination-protection --no-enable-termination-protection" in state, state
    assert state.index("update-termination-protection") < state.index("delete-stack")


def test_an_external_image_is_looked_up_in_its_own_region_and_never_pushed(setup) -> None:
    """An image the catalog names by another account's address was looked up in
    the environment's region, found missing, then built and pushed into a registry nobody of
    this environment owns."""
    seen: list[str] = []
    _edit_base(
        setup["catalog"],
        image={
            "repository": "444455556666.dkr.ecr.us-west-2.amazonaws.com/team/runtime",
            "tag": "1.0",
        },
    )
    release = setup["release"]()
    release.run(only=("stacks",))
    release = setup["release"]()
    release.image_registry().meta.events.register(
        "before-call.ecr.*", lambda context, **_: seen.append(context["client_region"])
    )
    with pytest.raises(ReleaseError, match="push it there yourself"):
        release.run(only=("image",))
    assert seen and set(seen) == {"us-west-2"}, seen
    assert not [c for c in setup["tools"].calls if c[1][:2] == ("docker", "buildx")]


def test_a_dry_run_goes_on_past_a_failed_preflight_and_lists_every_step(setup) -> None:
    """A first dry run stopped at the preflight, so a new user learned one
    problem at a time. A dry run changes nothing, so it lists the preflight's findings and then
    every step; a release still stops there."""
    setup["tools"].preflight = lambda *a, **k: ["the credentials are another account's"]
    assert setup["release"](dry_run=True).run() == dict.fromkeys(STEPS, "missing")
    assert any("preflight: 1 to fix" in line for line in setup["logs"])
    with pytest.raises(ReleaseError, match="preflight: the credentials are another account's"):
        setup["release"]().run()


def test_a_changed_runtime_under_a_pushed_tag_is_refused_naming_the_tag(setup, monkeypatch) -> None:
    """An immutable tag that exists is never pushed again, so a change to what
    the image is built from, under the same tag, was silently never deployed."""
    from ops import release as module

    release = setup["release"]()
    release.run(only=("stacks", "image"))
    assert setup["release"]().run(only=("image",)) == {"image": "done"}
    monkeypatch.setattr(module, "image_inputs_sha256", lambda root=None: "0" * 64)
    with pytest.raises(ReleaseError, match="give the catalog's image a new tag"):
        setup["release"]().run(only=("image",))
