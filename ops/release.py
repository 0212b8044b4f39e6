"""``make release ENV=NAME`` (``python -m ops.release --env NAME``): a first deploy, or any later
one, in the only order that works, each step skipped when it is already done.

A plain ``cdk deploy --all`` creates the repository and the bucket and then, at once, the model
and the components that need an image, base weights and adapter archives nobody has put there.
This command does the steps in order (``ops.steps``, one module each):

1. ``stacks``   deploy the account, stateful, Model Registry and network stacks (repository,
                bucket, key, every adapter's model package group, VPC);
2. ``image``    build the runtime image for linux/amd64 and push it under the catalog's tag (an
                immutable tag that exists is never pushed again; a digest must already exist);
3. ``weights``  stage the base weights: the pinned revision from the Hugging Face Hub (weights,
                config and tokenizer files only), uploaded with SSE-KMS under the base prefix, with
                the tokenizer sha256 checked against the catalog, or written into it when unpinned;
4. ``adapters`` make every adapter archive present: upload an existing one through
                ``training.publish``'s gates, or train it (``training.launch``) and publish that,
                which registers it in the Model Registry pending approval (a canary's archive
                is published by hand, ``training.publish --canary``);
5. ``approval`` every version it deploys (stable and canary) approved in the Model Registry
                for the archive the catalog pins (``training.approve``); it stops here if not;
6. ``deploy``   deploy every other stack;
7. ``smoke``    invoke every adapter once through the router (``ops.smoke``).

``--dry-run`` prints each step as done or missing and changes nothing. Every outside tool
(docker, the CDK CLI, the hub, training jobs, the smoke check) is reached through ``Tools``, which
the tests replace; AWS is reached through one boto3 session (moto in the tests).

This is the one module of ``infra`` that drives ``training`` (its publish gates, its job launcher
and its archive hashing): a release stages what training produced. The CDK app never imports it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from config import CATALOG_PATH, ENVIRONMENTS_DIR, Deployment, layout, load_deployment
from config.aws import AccountMismatchError, AwsEnv
from contracts.manifests import MergedManifest
from ops import steps
from ops.steps.base import ROOT, ReleaseError, running_in_ci
from ops.steps.image import IMAGE_INPUTS, image_inputs_sha256
from ops.steps.weights import BASE_FILES, BASE_MANIFEST
from training.merge import MERGED_MANIFEST
from training.registry import delete_group_versions

__all__ = [
    "ARCHIVES",
    "BASE_FILES",
    "BASE_MANIFEST",
    "IMAGE_INPUTS",
    "STEPS",
    "Release",
    "ReleaseError",
    "Tools",
    "image_inputs_sha256",
    "running_in_ci",
]
STABLE = {"CREATE_COMPLETE", "UPDATE_COMPLETE", "UPDATE_ROLLBACK_COMPLETE", "IMPORT_COMPLETE"}
STEPS = steps.NAMES


def comparable(template: dict[str, Any]) -> dict[str, Any]:
    """A template without what says where it was synthesized rather than what it deploys: each
    resource's ``Metadata`` (``aws:cdk:path``, which CDK Pipelines prefixes with its stage, and
    the scanners' notes), and the ``AWS::CDK::Metadata`` resource with its condition, which the
    CLI adds (version reporting) and an in-process synth does not. CloudFormation creates
    nothing from either, so a stack deployed by ``cdk deploy`` or by the pipeline is the same
    stack as this command's synth."""
    out = {k: v for k, v in template.items() if k != "Metadata"}
    out["Resources"] = {
        rid: {k: v for k, v in r.items() if k != "Metadata"}
        for rid, r in template.get("Resources", {}).items()
        if r.get("Type") != "AWS::CDK::Metadata"
    }
    conditions = {
        k: v for k, v in template.get("Conditions", {}).items() if k != "CDKMetadataAvailable"
    }
    out.pop("Conditions", None)
    if conditions:
        out["Conditions"] = conditions
    return out


def stuck_remedy(stack: str, status: str, protected: bool = False) -> str:
    """What clears a stack state that no deploy can go on from (CloudFormation's stack status
    codes, user guide "Stack status codes"), in a sentence. The runbook in docs/operate.md says
    more. ``protected``: the stack has termination protection, which refuses DeleteStack
    ("Protect CloudFormation stacks from being deleted"), so it is turned off first."""
    unprotect = (
        f"turn its termination protection off (aws cloudformation update-termination-protection "
        f"--no-enable-termination-protection --stack-name {stack}), then "
        if protected
        else ""
    )
    if status == "UPDATE_ROLLBACK_FAILED":
        return (
            f"continue the rollback (aws cloudformation continue-update-rollback --stack-name "
            f"{stack}, with --resources-to-skip for a resource that cannot roll back), then run "
            "the release again"
        )
    if status in ("ROLLBACK_COMPLETE", "ROLLBACK_FAILED"):
        return (
            "its first create failed and cannot be updated: read why in its events, "
            f"{unprotect}delete it (aws cloudformation delete-stack --stack-name {stack}; "
            "nothing a failed create made is kept) and run the release again"
        )
    if status == "DELETE_FAILED":
        return (
            "a resource blocked its deletion (for the network stack, usually the ENIs SageMaker "
            f"removes after its endpoint: wait, then retry); see its events, then {unprotect}"
            f"delete it again (aws cloudformation delete-stack --stack-name {stack}) and run the "
            "release"
        )
    if status.endswith("_IN_PROGRESS"):
        return (
            "another operation on it is still running (a release, the pipeline, the console): "
            "wait for it to end and run the release again"
        )
    if status.endswith("_FAILED"):
        return (
            f"see why in its events (aws cloudformation describe-stack-events --stack-name "
            f"{stack}), clear it, and run the release again"
        )
    return "see its events before running the release again"


#: Where a release looks for ``BASE_KEY/NAME.tar.gz`` archives, and where a teardown keeps them
#: (``config.layout.archives_dir``: one folder per base, beside ``make up``'s own).
ARCHIVES = ROOT / ".artifacts" / "adapters"


adapter_key = layout.adapter_key


def _groups_in(template: dict) -> set[str]:
    return {
        r["Properties"]["ModelPackageGroupName"]
        for r in template.get("Resources", {}).values()
        if r.get("Type") == "AWS::SageMaker::ModelPackageGroup"
    }


def registry_stack_of(dep: Deployment, adapter: str) -> str:
    from infra.adapters import shard_of
    from infra.registry import registry_stack_name

    return registry_stack_name(dep, shard_of(adapter))


class Tools:
    """Everything outside this process and AWS's APIs. The tests pass a recording stand-in."""

    def run(self, argv: list[str], *, input: str | None = None) -> None:
        print("  $ " + " ".join(a if len(a) < 80 else a[:77] + "..." for a in argv), flush=True)
        proc = subprocess.run(argv, cwd=ROOT, input=input, text=True, check=False)
        if proc.returncode != 0:
            raise ReleaseError(
                f"{argv[0]} {argv[1] if len(argv) > 1 else ''} failed (exit {proc.returncode})"
            )

    def download_base(self, repo_id: str, revision: str, dest: Path) -> Path:
        from huggingface_hub import snapshot_download  # weights, config, tokenizer only

        return Path(
            snapshot_download(
                repo_id=repo_id, revision=revision, local_dir=dest, allow_patterns=BASE_FILES
            )
        )

    def merge(self, base_dir: Path, archive: Path, out: Path) -> MergedManifest:
        """The adapter merged into the base (``training.merge``); its merged manifest."""
        from training.merge import merge

        return merge(base_dir, archive, out)

    def train(self, adapter: str, aws: AwsEnv, dep: Deployment, role: str) -> str:
        """Run the adapter's SageMaker training job in the environment's account and region,
        reading the base from and writing to its bucket; the S3 URI of its output
        model.tar.gz."""
        from training.launch import launch

        uri = launch(
            adapter,
            dep.env.name,
            role,
            dry_run=False,
            wait=True,
            bucket=aws.bucket,
            session=aws.session,
            dep=dep,
        )
        return uri  # type: ignore[return-value]

    def training_job(self, name: str, region: str) -> dict[str, Any]:
        """DescribeTrainingJob: what publish checks an archive's recorded verdict against."""
        from training.publish import job_metrics

        return job_metrics(name, region)

    def job_archive(self, uri: str, adapter: str, region: str) -> str:
        """The sha256 of the adapter archive a training job wrote (publish ties the archive
        it is given to the job by it)."""
        from training.publish import job_archive_sha256

        return job_archive_sha256(uri, adapter, region)

    def base_image(self, *, ci: bool) -> str:
        """vLLM's image the runtime builds on, by its registry digest (``ops.base_image``):
        checked when the Dockerfile pins one (a tag moved upstream stops the release), pinned
        and written into the Dockerfile when it does not (commit it); in CI an unpinned
        Dockerfile is refused, since a file written on a runner is never committed."""
        from ops.base_image import BaseImageError, check, pin, pinned

        try:
            if pinned()[1] is not None:
                return check()
            if ci:
                raise BaseImageError(
                    "runtime/Dockerfile names its base without a digest: run `python -m "
                    "ops.base_image pin` where the registry is reachable and commit it"
                )
            ref = pin()
        except BaseImageError as exc:
            raise ReleaseError(str(exc)) from None
        print(f"  pinned the runtime's base to {ref} in runtime/Dockerfile (commit it)")
        return ref

    def smoke(self, env: str) -> int:
        from ops.smoke import main

        return main(["--env", env])

    def preflight(
        self,
        session: Any,
        dep: Deployment,
        environments_dir: Path,
        *,
        smoke: bool = True,
        training: bool = False,
    ) -> list[str]:
        """``make preflight``'s findings that stop a release (``ops.preflight``); ``smoke``:
        the release runs the smoke check, so its principal must be an operator; ``training``:
        it may start training jobs, so their quota is checked too."""
        from ops.preflight import run

        findings = run(session, dep, environments_dir, operator=smoke, training=training)
        for f in findings:
            print("  " + f.line(), flush=True)
        return [f.message for f in findings if not f.ok]


@dataclass
class Release:
    env: str
    session: Any
    tools: Tools = field(default_factory=Tools)
    catalog: Path = CATALOG_PATH
    environments_dir: Path = ENVIRONMENTS_DIR
    archives: Path = ARCHIVES
    training_role: str | None = None
    #: The base weights, for publish to evaluate archives again (those of training jobs carry
    #: the job's recorded metrics instead).
    base_dir: Path | None = None
    dry_run: bool = False
    synth: Callable[[Path], dict[str, dict]] | None = None
    log: Callable[[str], None] = print

    def __post_init__(self) -> None:
        self.dep = self._load()
        self.region = self.dep.env.region
        # One session in the environment's region (config.aws), never the shell's.
        self.aws = AwsEnv(self.dep.env, self.session)
        self.session = self.aws.session
        try:
            self.account = self.aws.account
        except AccountMismatchError as exc:
            raise ReleaseError(str(exc)) from None
        self.bucket = self.aws.bucket
        self.s3 = self.aws.client("s3")
        self.ecr = self.aws.client("ecr")
        self.cfn = self.aws.client("cloudformation")
        self.kms = self.aws.client("kms")
        self.sm = self.aws.client("sagemaker")
        self._templates: dict[str, dict] | None = None
        self._image_ecr: Any = None
        self._outdir = Path(tempfile.mkdtemp(prefix=f"release-{self.env}-"))

    # -- configuration --------------------------------------------------------------------------

    def _load(self) -> Deployment:
        return load_deployment(self.env, self.catalog, self.environments_dir)

    def _catalog_changed(self) -> None:
        """A step wrote into the catalog (a hash): reload it, and synthesize again."""
        self.dep = self._load()
        self._templates = None

    @property
    def templates(self) -> dict[str, dict]:
        if self._templates is None:
            if self.synth is not None:
                self._templates = self.synth(self._outdir)
            else:
                from ops.snapshots import synth

                self.log(f"  synthesizing {self.env} ...")
                self._templates = synth(self.env, self._outdir, self.catalog, self.environments_dir)
        return self._templates

    def foundation_stacks(self) -> list[str]:
        from infra.account import ACCOUNT_STACK
        from infra.adapters import SHARD_COUNT
        from infra.registry import registry_stack_name

        p = self.dep.env.prefix
        registry = [registry_stack_name(self.dep, i) for i in range(SHARD_COUNT)]
        return [ACCOUNT_STACK, f"{p}-stateful", *registry, f"{p}-network"]

    def groups_missing(self) -> list[str]:
        """Adapters whose model package group is not in the account: a catalog entry added
        since the registry shards were deployed. Publish registers versions in the group
        (CreateModelPackage never creates one), so the ``stacks`` step deploys the shards
        again first."""
        from botocore.exceptions import ClientError

        missing = []
        for a in self.dep.adapters:
            try:
                self.sm.describe_model_package_group(ModelPackageGroupName=a.component_name)
            except ClientError as exc:
                if exc.response["Error"]["Code"] not in ("ValidationException", "ResourceNotFound"):
                    raise
                missing.append(f"model package group {a.component_name} does not exist")
        return missing

    def _deployed_groups(self) -> dict[str, set[str]]:
        """The model package groups each deployed registry shard declares, by stack."""
        from botocore.exceptions import ClientError

        from infra.adapters import SHARD_COUNT
        from infra.registry import registry_stack_name

        out = {}
        for i in range(SHARD_COUNT):
            name = registry_stack_name(self.dep, i)
            try:
                body = self.cfn.get_template(StackName=name)["TemplateBody"]
            except ClientError as exc:
                # Only a stack that does not exist is skipped: an AccessDenied read as "no
                # stack" would call every group outside one.
                if exc.response["Error"]["Code"] != "ValidationError":
                    raise
                continue
            out[name] = _groups_in(json.loads(body) if isinstance(body, str) else body)
        return out

    def groups_removed(self, deployed: dict[str, set[str]]) -> list[str]:
        """Groups a deployed registry shard holds whose entry has left the catalog since."""
        return sorted(
            g
            for stack, groups in deployed.items()
            for g in groups - _groups_in(self.templates.get(stack, {}))
        )

    def groups_outside_stacks(self, deployed: dict[str, set[str]]) -> list[str]:
        """Catalog entries whose group exists in the account but in no deployed registry
        stack: kept when a protected environment dropped the entry, and now added back. The
        shard's create would fail "already exists"; only ``cdk import`` adopts it."""
        from botocore.exceptions import ClientError

        held = set().union(*deployed.values())
        out = []
        for a in self.dep.adapters:
            if a.component_name in held:
                continue
            try:
                self.sm.describe_model_package_group(ModelPackageGroupName=a.component_name)
            except ClientError as exc:
                if exc.response["Error"]["Code"] not in ("ValidationException", "ResourceNotFound"):
                    raise
                continue
            out.append(
                f"model package group {a.component_name} exists outside any stack (kept when "
                f"its entry was removed): adopt it with `npx cdk import --app "
                f"{self._outdir} {registry_stack_of(self.dep, a.name)}` before releasing (the "
                "CLI asks for the group's ARN, its primary identifier)"
            )
        return out

    def _before_registry_deploy(self) -> None:
        """What a deploy of the registry shards needs first: no catalog entry whose group is
        kept outside any stack, and the removed entries' versions gone (the deployed shards
        read once for both)."""
        deployed = self._deployed_groups()
        if problems := self.groups_outside_stacks(deployed):
            raise ReleaseError("; ".join(problems))
        self._retire_removed_groups(deployed)

    def _retire_removed_groups(self, deployed: dict[str, set[str]]) -> None:
        """Before a deploy drops removed entries' groups: in an environment without deletion
        protection their versions are deleted first, since a group that holds versions cannot
        be deleted and its shard would end UPDATE_ROLLBACK_COMPLETE; with deletion protection
        the group is kept (RetainExceptOnCreate), versions and approvals included."""
        for group in self.groups_removed(deployed):
            if self.dep.env.deletion_protection:
                self.log(
                    f"  {group}: its entry left the catalog; the group and its versions stay "
                    "(deletion protection); adding the entry back later needs `npx cdk import`"
                )
                continue
            n = delete_group_versions(self.sm, group)
            self.log(
                f"  {group}: its entry left the catalog; deleted its {n} version(s) so its "
                "registry stack can delete the group"
            )

    # -- state checks ---------------------------------------------------------------------------

    def stack_deployed(self, name: str) -> str:
        """``done`` when deployed and stable, by whichever synth; else why not."""
        from botocore.exceptions import ClientError

        try:
            (stack,) = self.cfn.describe_stacks(StackName=name)["Stacks"]
        except ClientError:
            return "not deployed"
        if (status := stack["StackStatus"]) not in STABLE:
            protected = bool(stack.get("EnableTerminationProtection"))
            return f"in state {status}: {stuck_remedy(name, status, protected)}"
        return "done"

    def foundation_missing(self) -> list[str]:
        """What the image and weights steps need from the foundation stacks: the stacks
        deployed and stable, and the bucket, the key alias and the image repository in them.
        Not their templates: a stack CDK Pipelines or a shell's ``cdk deploy`` deployed is the
        same stack, though its synth names some resources by another construct path (a
        security group rule's logical id holds its peer's path, which a pipeline stage
        prefixes), and the ``deploy`` step brings every template to this synth anyway."""
        from botocore.exceptions import ClientError

        missing = [
            f"{n}: {s}" for n in self.foundation_stacks() if (s := self.stack_deployed(n)) != "done"
        ]
        if missing:
            return missing
        try:
            self.s3.head_bucket(Bucket=self.bucket)
        except ClientError:
            missing.append(f"bucket {self.bucket} does not exist")
        try:
            self.kms.describe_key(KeyId=self._kms_key())
        except ClientError:
            missing.append(f"key {self._kms_key()} does not exist")
        if not self.dep.base.image.external and not self.repository_exists():
            missing.append(f"repository {self.image_uri()[1]} does not exist")  # type: ignore[index]
        return missing

    def repository_exists(self) -> bool:
        from botocore.exceptions import ClientError

        registry, repo, _ = self.image_uri()  # type: ignore[misc]
        try:
            self.image_registry().describe_repositories(registryId=registry, repositoryNames=[repo])
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "RepositoryNotFoundException":
                return False
            raise
        return True

    def stack_state(self, name: str) -> str:
        """``done`` when deployed, stable and identical to the synth (``comparable``); else
        why not."""
        if (deployed := self.stack_deployed(name)) != "done":
            return deployed
        body = self.cfn.get_template(StackName=name)["TemplateBody"]
        deployed = json.loads(body) if isinstance(body, str) else body
        if comparable(json.loads(json.dumps(deployed))) != comparable(self.templates[name]):
            return "deployed template differs from the synth"
        return "done"

    def _stacks_missing(self, names: list[str]) -> list[str]:
        return [f"{n}: {s}" for n in names if (s := self.stack_state(n)) != "done"]

    def image_uri(self) -> tuple[str, str, str] | None:
        """(registry id, repository, reference) of the runtime image."""
        ref = self.dep.base.image
        m = ref.external
        registry = m["account"] if m else self.account
        return registry, ref.repository_name(self.dep.env.prefix), ref.reference

    def image_registry(self) -> Any:
        """ECR where the image lives: the environment's region, or an external address's own
        (an image in another account's registry in another region is looked up there)."""
        m = self.dep.base.image.external
        if m is None or m["region"] == self.region:
            return self.ecr
        if self._image_ecr is None:
            from botocore.config import Config

            from config.aws import RETRIES

            self._image_ecr = self.session.client(
                "ecr", region_name=m["region"], config=Config(retries=RETRIES)
            )
        return self._image_ecr

    def image_present(self) -> bool:
        from botocore.exceptions import ClientError

        registry, repo, _ = self.image_uri()  # type: ignore[misc]
        ref = self.dep.base.image
        image_id = {"imageDigest": ref.digest} if ref.digest else {"imageTag": ref.tag}
        try:
            found = self.image_registry().describe_images(
                registryId=registry, repositoryName=repo, imageIds=[image_id]
            )["imageDetails"]
        except ClientError as exc:
            code = exc.response["Error"]["Code"]
            if code in ("ImageNotFoundException", "RepositoryNotFoundException"):
                return False
            raise
        return bool(found)

    def base_prefix(self) -> str:
        return layout.base_prefix(self.dep.base_key, self.dep.base.revision)

    def base_manifest(self) -> dict[str, Any] | None:
        return self._get_json(self.base_prefix() + BASE_MANIFEST)

    def _get_json(self, key: str) -> dict[str, Any] | None:
        from botocore.exceptions import ClientError

        try:
            body = self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        except ClientError as exc:
            if exc.response["Error"]["Code"] in ("NoSuchKey", "NoSuchBucket", "404"):
                return None
            raise
        return json.loads(body)

    def adapter_key(self, name: str, version: str) -> str:
        return adapter_key(name, version)

    def adapter_state(self, name: str, canary: bool = False) -> str:
        """``done`` when the archive is in the bucket with the catalog's hash (when pinned);
        ``canary``: the entry's canary version's archive."""
        from botocore.exceptions import ClientError

        entry = self.dep.adapter(name).entry
        published = entry.canary if canary and entry.canary else entry
        version = entry.version_made(canary)
        if published.artifact:
            return (
                "done (external artifact)"
                if self._object_exists(published.artifact)
                else (f"{published.artifact} not found")
            )
        try:
            head = self.s3.head_object(Bucket=self.bucket, Key=self.adapter_key(name, version))
        except ClientError:
            return "no archive in the bucket"
        digest = head.get("Metadata", {}).get("sha256")
        if published.sha256 and digest != published.sha256:
            return f"the bucket's archive has sha256 {digest}, the catalog pins {published.sha256}"
        return "done"

    def merged_key(self, name: str, version: str) -> str:
        return layout.merged_prefix(name, version) + MERGED_MANIFEST

    def merged_missing(self) -> list[str]:
        """``serving: merged`` entries whose merged weights are not staged for the archive the
        catalog pins (the merged manifest records the archive's sha256)."""
        out = []
        for a in self.dep.adapters:
            if not a.merged:
                continue
            key = self.merged_key(a.name, a.entry.version)
            staged = self._get_json(key)
            if staged is None:
                out.append(f"{a.name}: merged weights not staged")
            elif a.entry.sha256 and MergedManifest.parse(staged, key).adapter.sha256 != (
                a.entry.sha256
            ):
                out.append(f"{a.name}: the staged merged weights are of another archive")
        return out

    def canaries_missing(self) -> list[str]:
        """Canary versions whose archive is not published: deliberate releases, published by
        hand (``training.publish --canary``), never trained by a release."""
        return [
            f"{a.name} canary {a.entry.canary.version}: {s}"
            for a in self.dep.adapters
            if a.entry.canary is not None
            and not (s := self.adapter_state(a.name, canary=True)).startswith("done")
        ]

    def _object_exists(self, uri: str) -> bool:
        from botocore.exceptions import ClientError

        bucket, key = uri.removeprefix("s3://").split("/", 1)
        try:
            self.s3.head_object(Bucket=bucket, Key=key)
        except ClientError:
            return False
        return True

    def fingerprint(self) -> str:
        """What a passed smoke check vouches for: the templates and the adapters' versions."""
        h = hashlib.sha256(json.dumps(self.templates, sort_keys=True).encode())
        h.update(json.dumps({a.name: a.entry.version for a in self.dep.adapters}).encode())
        return h.hexdigest()

    def smoke_key(self) -> str:
        return f"{layout.RELEASE_PREFIX}{self.env}/smoke.json"

    def image_record_key(self) -> str:
        """What the image step pushed under the catalog's tag: the inputs' sha256."""
        tag = self.dep.base.image.tag
        return f"{layout.RELEASE_PREFIX}{self.env}/image-{tag}.json"

    def image_drift(self) -> str | None:
        """Why the image in ECR under the catalog's tag is not what runtime/ builds now."""
        if self.dep.base.image.external is not None or self.dep.base.image.digest:
            return None
        record = self._get_json(self.image_record_key())
        if record is None or record.get("inputs_sha256") == image_inputs_sha256():
            return None
        return (
            f"runtime/, contracts/ or pyproject.toml changed since the image tagged "
            f"{self.dep.base.image.tag} was pushed, and the tag is immutable: give the catalog's "
            "image a new tag"
        )

    # -- steps ----------------------------------------------------------------------------------

    def status(self, step: str) -> list[str]:
        """What is missing for ``step``; empty when it is done."""
        return steps.named(step).missing(self)

    @property
    def own_archives(self) -> Path:
        """The archives of this environment's base (``ARCHIVES/BASE_KEY``)."""
        return layout.archives_dir(self.archives, self.dep.base_key)

    def _cdk_deploy(self, stacks: list[str]) -> None:
        self.templates  # noqa: B018 - synthesize into the assembly that is deployed
        self.tools.run(
            [
                "npx",
                "--no-install",
                "cdk",
                "deploy",
                "--app",
                str(self._outdir),
                "--require-approval",
                "never",
                "--progress",
                "events",
                *stacks,
            ]
        )

    def _kms_key(self) -> str:
        return layout.data_key_alias(self.dep.env.prefix)

    def _put_json(self, key: str, data: dict[str, Any]) -> None:
        body = json.dumps(data, indent=1).encode()
        layout.put_encrypted(self.s3, self.bucket, key, body, self._kms_key())

    # -- the command ----------------------------------------------------------------------------

    def run(self, only: tuple[str, ...] = STEPS) -> dict[str, str]:
        """``make preflight`` first (it changes nothing), then each step: skipped when done,
        else run (or reported, in a dry run)."""
        self.log("preflight: account, bootstrap, quotas, operators")
        if problems := self.tools.preflight(
            self.session,
            self.dep,
            self.environments_dir,
            smoke="smoke" in only,
            training=self.training_role is not None,
        ):
            if not self.dry_run:
                raise ReleaseError("preflight: " + "; ".join(problems))
            # A dry run changes nothing: it goes on, so one run lists everything to fix.
            self.log(f"preflight: {len(problems)} to fix before a release; the steps anyway:")
        outcome: dict[str, str] = {}
        for n, each in enumerate(steps.STEPS, 1):
            step = each.name
            if step not in only:
                continue
            missing = each.missing(self)
            head = f"[{n}/{len(STEPS)}] {step:<9}"
            if not missing:
                self.log(f"{head} done, skipped")
                outcome[step] = "done"
                continue
            self.log(f"{head} missing: " + "; ".join(missing))
            if self.dry_run:
                outcome[step] = "missing"
                continue
            each.run(self)
            left = each.missing(self)
            if left:
                raise ReleaseError(f"{step} ran but is still not done: {'; '.join(left)}")
            self.log(f"{head} done")
            outcome[step] = "ran"
        return outcome


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m ops.release",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--env", required=True)
    ap.add_argument("--dry-run", action="store_true", help="print each step as done or missing")
    ap.add_argument("--only", help=f"comma-separated steps of {','.join(STEPS)}")
    ap.add_argument(
        "--training-role",
        default=os.environ.get("TRAINING_ROLE_ARN"),
        help="SageMaker execution role for adapters that have no archive",
    )
    ap.add_argument(
        "--archives",
        type=Path,
        default=ARCHIVES,
        help="where NAME.tar.gz archives are looked for",
    )
    ap.add_argument(
        "--base-dir",
        type=Path,
        default=None,
        help="the base weights, for publish to evaluate archives at hand again "
        "(a training job's archive: checked against its recorded metrics)",
    )
    ap.add_argument("--catalog", type=Path, default=CATALOG_PATH)
    ap.add_argument("--environments-dir", type=Path, default=ENVIRONMENTS_DIR)
    args = ap.parse_args(argv)
    only = tuple(args.only.split(",")) if args.only else STEPS
    if unknown := set(only) - set(STEPS):
        ap.error(f"unknown steps: {', '.join(sorted(unknown))}")
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        release = Release(
            args.env,
            None,
            catalog=args.catalog,
            environments_dir=args.environments_dir,
            archives=args.archives,
            training_role=args.training_role,
            base_dir=args.base_dir,
            dry_run=args.dry_run,
        )
        outcome = release.run(only)
    except ReleaseError as exc:
        print(f"release failed: {exc}", file=sys.stderr)
        return 1
    except (BotoCoreError, ClientError) as exc:
        print(f"release failed: AWS said: {exc}", file=sys.stderr)
        return 1
    if args.dry_run:
        missing = [s for s, o in outcome.items() if o == "missing"]
        print(
            f"dry run: {len(outcome) - len(missing)} of {len(outcome)} steps done"
            + (f"; missing: {', '.join(missing)}" if missing else "")
        )
    else:
        print(f"{args.env} released")
    return 0


if __name__ == "__main__":
    sys.exit(main())
