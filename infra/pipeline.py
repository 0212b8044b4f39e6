"""The optional CDK Pipelines stack: source -> the CI checks + synth -> dev -> staging -> prod.

``npx cdk deploy -c pipeline=true`` (with ``enabled: true`` in ``config/pipeline.yaml``) creates
it once; it then updates itself from the repository. Each environment is one ``Stage`` holding
exactly the stacks ``cdk deploy -c env=NAME`` deploys, under the same stack names, so a team can
move between GitHub Actions and the pipeline without renaming anything. A manual approval runs
before the environments the file lists (prod), and after each stage a CodeBuild step invokes
every adapter once through that environment's router (``make smoke``).

The pipeline's artifacts live in a bucket of its own (KMS with rotation, versioned, SSL-only,
access-logged) instead of the construct library's default. The roles CDK Pipelines generates are
acknowledged finding by finding: the ids are computed from the generated projects' logical ids,
so a new wildcard anywhere else still fails synth.
"""

from __future__ import annotations

import functools

from aws_cdk import ArnFormat, Duration, Environment, RemovalPolicy, Stack, Stage, pipelines
from aws_cdk import aws_codebuild as codebuild
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from config import Deployment, layout
from config.schema import PipelineConfig
from infra.nag import acknowledge, nag_account, nag_arn
from infra.stacks import build


def smoke_role_name(region: str) -> str:
    """IAM role names are per account: a second pipeline of the same account (in another
    region) would collide on a name without its region."""
    return f"lora-fleet-pipeline-smoke-{region}"


def release_role_name(region: str) -> str:
    return f"lora-fleet-pipeline-release-{region}"


#: The CI script the synth step runs is the one pull requests run (.ci/run).
SYNTH_COMMANDS = ["bash .ci/run", "npx --no-install cdk synth -c pipeline=true -q"]
#: CodeBuild's standard 7.0 image carries several Pythons; the project needs 3.11 or newer
#: (``requires-python``), so every step names its runtime instead of taking the image default.
RUNTIMES = codebuild.BuildSpec.from_object(
    {"phases": {"install": {"runtime-versions": {"python": "3.12", "nodejs": "20"}}}}
)
#: What the pipeline leaves to ``make release`` before each environment's serving stack: the
#: image, the base weights, the adapter archives (merged ones staged), and the Model Registry's
#: approval of every version the stage deploys (CDK Pipelines deploys the stacks itself).
RELEASE_STEPS = "image,weights,adapters,approval"

#: Action wildcards in the policies CDK Pipelines writes for its roles: object- and key-level
#: verbs on the pipeline's own artifact bucket and key (``grantReadWrite`` and friends).
_GENERATED_ACTIONS = (
    "s3:GetObject*",
    "s3:GetBucket*",
    "s3:List*",
    "s3:DeleteObject*",
    "s3:Abort*",
    "kms:ReEncrypt*",
    "kms:GenerateDataKey*",
)


class EnvironmentStage(Stage):
    def __init__(self, scope: Construct, id: str, *, dep: Deployment, account_stack: bool) -> None:
        env = Environment(account=dep.env.account, region=dep.env.region)
        super().__init__(scope, id, env=env)
        self.stacks = build(self, dep, account_stack=account_stack)


class PipelineStack(Stack):
    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        config: PipelineConfig,
        deployments: dict[str, Deployment],
        **kw,
    ) -> None:
        super().__init__(scope, id, **kw)
        self.key, self.artifacts = self._artifact_bucket()
        source = pipelines.CodePipelineSource.connection(
            config.repository, config.branch, connection_arn=config.connection_arn
        )
        synth = pipelines.CodeBuildStep(
            "Synth",
            input=source,
            commands=SYNTH_COMMANDS,
            primary_output_directory="cdk.out",
            partial_build_spec=RUNTIMES,
            # CodeBuild's default is 60 minutes (CreateProject, timeoutInMinutes), the whole
            # suite's run on a medium build host takes about as long.
            timeout=Duration.hours(2),
        )
        self.pipeline = pipelines.CodePipeline(
            self,
            "Pipeline",
            pipeline_name=f"lora-fleet-{config.region}",
            synth=synth,
            artifact_bucket=self.artifacts,
            code_build_defaults=pipelines.CodeBuildOptions(
                build_environment=codebuild.BuildEnvironment(
                    build_image=codebuild.LinuxBuildImage.STANDARD_7_0,
                    compute_type=codebuild.ComputeType.MEDIUM,
                )
            ),
        )
        self.smoke_role = iam.Role(
            self,
            "SmokeRole",
            role_name=smoke_role_name(config.region),
            assumed_by=iam.ServicePrincipal("codebuild.amazonaws.com"),
            description="Invokes every adapter through each environment's router after deploy",
        )
        self.release_role = iam.Role(
            self,
            "ReleaseRole",
            role_name=release_role_name(config.region),
            assumed_by=iam.ServicePrincipal("codebuild.amazonaws.com"),
            description="Pushes the runtime image, stages base weights and adapter archives",
        )
        self.stages: list[str] = []
        self._smoke_arns: list[str] = []
        self._release_arns: list[list[str]] = []
        # lora-fleet-account is one per account and region: deployed by the first stage there
        # only. Every stage deploying it would give it that stage's construct paths in turn, an
        # update on every run.
        accounts_seen: set[tuple[str, str]] = set()
        for name in config.stages:
            dep = deployments[name]
            refuse_cross_account(config, dep)
            # No account in the environment file: the pipeline's own (CDK deploys it there).
            where = (dep.env.account or self.account, dep.env.region)
            pre: list[pipelines.Step] = []
            if name in config.approval_before:
                comment = f"Promote to {name}: review the previous stage's smoke results"
                pre.append(pipelines.ManualApprovalStep(f"Approve-{name}", comment=comment))
            stage = EnvironmentStage(self, name, dep=dep, account_stack=where not in accounts_seen)
            accounts_seen.add(where)
            serving = next(s for s in stage.stacks if s.stack_name == f"{dep.env.prefix}-serving")
            # The serving stack needs the image and the weights, its shards need the archives:
            # they are staged after the stateful stack (repository, bucket) and before serving.
            release = pipelines.StackSteps(stack=serving, pre=[self._release(name, dep)])
            router = next(s for s in stage.stacks if s.stack_name == f"{dep.env.prefix}-router")
            self.pipeline.add_stage(
                stage, pre=pre, post=[self._smoke(name, dep, router)], stack_steps=[release]
            )
            self.stages.append(name)
        self.pipeline.build_pipeline()
        # cfn-lint's E3703 validates action configurations only in their literal form and reports
        # every RoleArn CDK Pipelines writes as Fn::Join; CloudFormation resolves them. Scoped to
        # this one resource so every other template keeps the rule.
        self.pipeline.pipeline.node.default_child.add_metadata(
            "cfn-lint", {"config": {"ignore_checks": ["E3703"]}}
        )
        self._acknowledge_generated()

    def _artifact_bucket(self) -> tuple[kms.Key, s3.Bucket]:
        key = kms.Key(
            self,
            "ArtifactKey",
            description="lora-fleet pipeline artifacts",
            enable_key_rotation=True,
            removal_policy=RemovalPolicy.RETAIN,
        )
        logs = s3.Bucket(
            self,
            "ArtifactAccessLogs",
            encryption=s3.BucketEncryption.S3_MANAGED,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            versioned=True,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            removal_policy=RemovalPolicy.RETAIN,
        )
        for finding in (
            "HIPAA.Security-S3DefaultEncryptionKMS",
            "NIST.800.53.R5-S3DefaultEncryptionKMS",
        ):
            reason = "S3 server access log delivery supports only SSE-S3 on the target bucket."
            acknowledge(logs, finding, reason)
        bucket = s3.Bucket(
            self,
            "Artifacts",
            encryption=s3.BucketEncryption.KMS,
            encryption_key=key,
            bucket_key_enabled=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            versioned=True,
            server_access_logs_bucket=logs,
            server_access_logs_prefix="pipeline-artifacts/",
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            removal_policy=RemovalPolicy.RETAIN,
        )
        for b in (logs, bucket):
            for finding in (
                "HIPAA.Security-S3BucketReplicationEnabled",
                "NIST.800.53.R5-S3BucketReplicationEnabled",
            ):
                acknowledge(
                    b,
                    finding,
                    "Pipeline artifacts and their access logs are intermediate build "
                    "outputs, re-created by every run from the repository; versioning "
                    "keeps their history in-region.",
                )
        return key, bucket

    def _release(self, name: str, dep: Deployment) -> pipelines.CodeBuildStep:
        """``make release --only image,weights,adapters`` as a least-privilege role: read the
        environment's stacks, push to its repository, write its bucket's staging prefixes."""
        stack = Stack.of(self)
        region, account = dep.env.region, dep.env.account or stack.account
        prefix = dep.env.prefix

        def arn(service: str, resource: str, name: str, sep=ArnFormat.SLASH_RESOURCE_NAME) -> str:
            return stack.format_arn(
                service=service,
                resource=resource,
                resource_name=name,
                region=region,
                account=account,
                arn_format=sep,
            )

        bucket = layout.artifact_bucket(prefix, account, region, dep.env.artifact_bucket)
        repository = dep.base.image.repository_name(prefix)
        stacks = [
            arn("cloudformation", "stack", f"{prefix}-*/*"),
            arn("cloudformation", "stack", "lora-fleet-account/*"),
        ]
        objects = [
            f"arn:{stack.partition}:s3:::{bucket}/{p}*"
            for p in (*layout.STAGED_PREFIXES, layout.RELEASE_PREFIX)
        ]
        packages = [
            arn("sagemaker", "model-package-group", f"{prefix}-*"),
            arn("sagemaker", "model-package", f"{prefix}-*/*"),
        ]
        quotas = arn("servicequotas", "sagemaker/*", "", ArnFormat.NO_RESOURCE_NAME)
        bootstrap = arn("cloudformation", "stack", "CDKToolkit/*")
        self._release_arns.append(
            [*stacks, *objects, arn("kms", "key", "*"), *packages, quotas, bootstrap]
        )
        statements = [
            iam.PolicyStatement(
                actions=["cloudformation:DescribeStacks", "cloudformation:GetTemplate"],
                resources=stacks,
            ),
            iam.PolicyStatement(actions=["s3:GetObject", "s3:PutObject"], resources=objects),
            iam.PolicyStatement(
                actions=["s3:ListBucket"], resources=[f"arn:{stack.partition}:s3:::{bucket}"]
            ),
            # Publish registers each version in its adapter's model package group, pending
            # approval; the release's approval step reads the packages (training.registry).
            # Approving is a person's (training.approve), so UpdateModelPackage is not here.
            # ListModelPackages is in the statement on "*" below.
            iam.PolicyStatement(
                actions=["sagemaker:CreateModelPackage", "sagemaker:DescribeModelPackage"],
                resources=packages,
            ),
            iam.PolicyStatement(
                actions=["kms:GenerateDataKey", "kms:Decrypt"],
                resources=[arn("kms", "key", "*")],
                conditions={
                    "ForAnyValue:StringEquals": {
                        "kms:ResourceAliases": layout.data_key_alias(prefix)
                    }
                },
            ),
            iam.PolicyStatement(
                actions=[
                    "ecr:BatchCheckLayerAvailability",
                    "ecr:InitiateLayerUpload",
                    "ecr:UploadLayerPart",
                    "ecr:CompleteLayerUpload",
                    "ecr:PutImage",
                    "ecr:DescribeImages",
                    "ecr:BatchGetImage",
                    # The image step asks whether the repository exists first (release.py
                    # repository_exists); no other ECR action grants it.
                    "ecr:DescribeRepositories",
                ],
                resources=[arn("ecr", "repository", repository)],
            ),
            *_preflight_statements(arn, prefix, bootstrap),
            # None has a resource-level form (Service Authorization Reference). SageMaker's
            # guide, "Amazon SageMaker API Permissions": "Except for the ListTags API,
            # resource-level restrictions are not available on List- calls", so a
            # ListModelPackages granted on group ARNs is denied.
            iam.PolicyStatement(
                actions=[
                    "ecr:GetAuthorizationToken",
                    "sts:GetCallerIdentity",
                    "servicequotas:ListServiceQuotas",
                    # A quota with no applied value is read from AWS's defaults (preflight).
                    "servicequotas:ListAWSDefaultServiceQuotas",
                    "servicequotas:GetAWSDefaultServiceQuota",
                    "lambda:GetAccountSettings",
                    "ec2:DescribeAvailabilityZones",
                    "sagemaker:ListModelPackages",
                ],
                resources=["*"],
            ),
        ]
        return pipelines.CodeBuildStep(
            f"Release-{name}",
            commands=["make setup", f"make release ENV={name} ARGS='--only {RELEASE_STEPS}'"],
            role=self.release_role,
            role_policy_statements=statements,
            partial_build_spec=RUNTIMES,
            # docker buildx needs the Docker daemon of a privileged build container.
            build_environment=codebuild.BuildEnvironment(privileged=True),
            # `make setup`, the vLLM-based image build and push and, on a first run, the base
            # weights' download and upload: past CodeBuild's 60-minute default
            # (CreateProject, timeoutInMinutes: "The default is 60 minutes").
            timeout=Duration.hours(3),
        )

    def _smoke(self, name: str, dep: Deployment, router: Stack) -> pipelines.CodeBuildStep:
        """The router's URL comes from its stack's output through the pipeline (CDK Pipelines'
        ``env_from_cfn_outputs``), not from DescribeStacks, which cannot read a stack in
        another account."""
        stack = Stack.of(self)
        region = dep.env.region
        account = dep.env.account or stack.account
        generate = stack.format_arn(
            service="execute-api",
            resource="*",
            region=region,
            account=account,
            resource_name="live/POST/v1/adapters/*/generate",
            arn_format=ArnFormat.SLASH_RESOURCE_NAME,
        )
        self._smoke_arns.append(generate)
        statements = [iam.PolicyStatement(actions=["execute-api:Invoke"], resources=[generate])]
        return pipelines.CodeBuildStep(
            f"Smoke-{name}",
            commands=["make setup", f'make smoke ENV={name} URL="$ROUTER_URL"'],
            env_from_cfn_outputs={"ROUTER_URL": router.router_url},  # type: ignore[attr-defined]
            role=self.smoke_role,
            role_policy_statements=statements,
            partial_build_spec=RUNTIMES,
        )

    def _acknowledge_generated(self) -> None:
        """The findings on what CDK Pipelines generates, each on its role, with its reason.

        Exactly the findings synth reports (checked by tests/infra/test_pipeline.py); a new
        wildcard in a generated policy therefore fails synth until it is reviewed here.
        """
        stack = Stack.of(self)
        region = stack.region
        arn = f"arn:<AWS::Partition>:%s:{region}:{nag_account(stack)}:%s"
        bucket = f"<{stack.get_logical_id(self.artifacts.node.default_child)}.Arn>"
        projects = [c for c in self.node.find_all() if isinstance(c, codebuild.CfnProject)]
        smoke = [stack.get_logical_id(c) for c in projects if "/Smoke-" in c.node.path]
        release = [stack.get_logical_id(c) for c in projects if "/Release-" in c.node.path]
        own = [
            stack.get_logical_id(c)
            for c in projects
            if c.node.path.endswith(("/Synth/CdkBuildProject/Resource", "/SelfMutation/Resource"))
        ]

        project_logs = functools.partial(_project_logs, arn)

        objects = {
            f"AwsSolutions-IAM5[Resource::{bucket}/*]": (
                "Objects of the pipeline's own artifact bucket: CodePipeline names each run's "
                "artifacts, so the keys are not known in advance."
            )
        }
        inline = {
            f: "CDK Pipelines attaches each generated role's grants as that role's default "
            "policy; every such policy belongs to exactly one pipeline role."
            for f in ("HIPAA.Security-IAMNoInlinePolicy", "NIST.800.53.R5-IAMNoInlinePolicy")
        }
        pipeline = {
            **verbs(_GENERATED_ACTIONS),
            **objects,
            **project_logs(own),
            **inline,
            "AwsSolutions-IAM5[Resource::*]": (
                "Generated without resource scoping by CDK Pipelines: self-mutation's "
                "cloudformation:DescribeStacks and s3:ListBucket (stacks and bootstrap buckets "
                "of the target accounts) and the asset role's codebuild StartBuild, StopBuild "
                "and BatchGetBuilds for the asset projects it creates."
            ),
            f"AwsSolutions-IAM5[Resource::arn:*:iam::{nag_account(stack)}:role/*]": (
                "Self-mutation assumes the CDK bootstrap roles, chosen by the generated "
                "statement's condition on the aws-cdk:bootstrap-role tag; their names carry each "
                "account's bootstrap qualifier."
            ),
            f"AwsSolutions-IAM5[Resource::{arn % ('codebuild', 'report-group/*')}]": (
                "Report groups of the asset-publishing projects CDK Pipelines creates per asset; "
                "their names are generated, within this account and region."
            ),
            f"AwsSolutions-IAM5[Resource::{arn % ('logs', 'log-group:/aws/codebuild/*')}]": (
                "Log groups of the asset-publishing projects CDK Pipelines creates per asset; "
                "their names are generated, within this account and region."
            ),
            "HIPAA.Security-CodeBuildProjectSourceRepoUrl": (
                "Projects take their input from the pipeline (source type CODEPIPELINE); the "
                "repository is reached only through the CodeConnections connection, so no "
                "project holds a repository URL or credentials."
            ),
        }
        smoke_role = {
            **verbs(
                (
                    "s3:GetObject*",
                    "s3:GetBucket*",
                    "s3:List*",
                    "kms:ReEncrypt*",
                    "kms:GenerateDataKey*",
                )
            ),
            **objects,
            **project_logs(smoke),
            **inline,
        }
        for generate in self._smoke_arns:
            smoke_role[f"AwsSolutions-IAM5[Resource::{nag_arn(stack, generate)}]"] = (
                "Only POST .../v1/adapters/*/generate on the live stage: one call per catalog "
                "adapter, on an API whose id exists only after that stage deploys."
            )
        release_role = {
            **verbs(
                (
                    "s3:GetObject*",
                    "s3:GetBucket*",
                    "s3:List*",
                    "kms:ReEncrypt*",
                    "kms:GenerateDataKey*",
                )
            ),
            **objects,
            **project_logs(release),
            **inline,
            "AwsSolutions-IAM5[Resource::*]": (
                "ecr:GetAuthorizationToken, sts:GetCallerIdentity, "
                "servicequotas:ListServiceQuotas and sagemaker:ListModelPackages (SageMaker's "
                "List- calls) have no resource-level form; everything else names its resource."
            ),
        }
        reasons = _RELEASE_RESOURCE_REASONS
        for arns in self._release_arns:
            for arn in arns:
                acked = nag_arn(stack, arn)
                service = next(k for k in reasons if f":{k}:" in acked)
                release_role[f"AwsSolutions-IAM5[Resource::{acked}]"] = reasons[service]
        for scope, findings in (
            (self.pipeline, pipeline),
            (self.smoke_role, smoke_role),
            (self.release_role, release_role),
        ):
            for finding, reason in findings.items():
                acknowledge(scope, finding, reason)


#: Why each service's resources in the release role's policy carry a wildcard.
_RELEASE_RESOURCE_REASONS = {
    "cloudformation": "The environment's own stacks by name prefix (and the shared "
    "account stack, and the CDK bootstrap stack the preflight reads): CloudFormation appends a "
    "generated id to stack ARNs; read only.",
    "s3": "Only the staging prefixes (base/, adapters/, merged/, release/) of the "
    "environment's artifact bucket, whose object keys carry revisions and versions.",
    "kms": "Any key id, but only the key whose alias is the environment's data key "
    "(kms:ResourceAliases condition); the key's id exists only after its stack deploys.",
    "servicequotas": "SageMaker's quotas of this account and region, read by the release's "
    "preflight; their codes differ per instance type.",
    "sagemaker": "The environment's model package groups (named PREFIX-ADAPTER, one per "
    "adapter) and their versions, whose ARNs end in a version number SageMaker assigns.",
}


def refuse_cross_account(config: PipelineConfig, dep: Deployment) -> None:
    """The pipeline deploys into its own account only. Its release step runs as a role of the
    pipeline's account, and another account's S3, ECR, CloudFormation and Model Registry cannot
    be reached through an identity policy alone; CDK Pipelines' cross-account stages would also
    need artifact keys that account can use. Refused here, at
    synth, rather than failing halfway through the first run; deploy other accounts with
    ``make release`` and their own credentials."""
    if dep.env.account is None or dep.env.account == config.account:
        return
    where = (
        f"account {config.account}"
        if config.account
        else "an account config/pipeline.yaml does not name"
    )
    raise ValueError(
        f"pipeline stage {dep.env.name!r} deploys to account {dep.env.account}, but the pipeline "
        f"runs in {where}: the pipeline releases into its own account only; set "
        f"config/pipeline.yaml account to {dep.env.account}, or remove {dep.env.name!r} from "
        "its stages and release it with make release and that account's credentials"
    )


def verbs(actions: tuple[str, ...]) -> dict[str, str]:
    """cdk-nag's findings for the verbs CDK Pipelines grants on its own bucket and key."""
    return {
        f"AwsSolutions-IAM5[Action::{a}]": (
            "Object- and key-level verbs CDK Pipelines grants on the pipeline's own "
            "artifact bucket and key only (grantRead / grantReadWrite)."
        )
        for a in actions
    }


def _preflight_statements(arn, prefix: str, bootstrap: str) -> list[iam.PolicyStatement]:
    """What make release's preflight (ops.preflight) reads, read-only, that has a resource: the
    bootstrap version and stack, SageMaker's quotas, the router's reserved concurrency (read
    back on a later release). Its calls without a resource form are in the ``*`` statement."""
    return [
        iam.PolicyStatement(
            actions=["ssm:GetParameter"],
            resources=[arn("ssm", "parameter", layout.bootstrap_parameter().lstrip("/"))],
        ),
        iam.PolicyStatement(actions=["cloudformation:DescribeStacks"], resources=[bootstrap]),
        iam.PolicyStatement(
            actions=["servicequotas:GetServiceQuota"],
            resources=[arn("servicequotas", "sagemaker/*", "", ArnFormat.NO_RESOURCE_NAME)],
        ),
        iam.PolicyStatement(
            actions=["lambda:GetFunctionConcurrency"],
            resources=[
                arn("lambda", "function", f"{prefix}-router", ArnFormat.COLON_RESOURCE_NAME)
            ],
        ),
    ]


def _project_logs(arn: str, ids: list[str]) -> dict[str, str]:
    """cdk-nag's findings for each CodeBuild project's own log group and report groups."""
    out = {}
    for p in ids:
        log_group = arn % ("logs", f"log-group:/aws/codebuild/<{p}>:*")
        reports = arn % ("codebuild", f"report-group/<{p}>-*")
        out[f"AwsSolutions-IAM5[Resource::{log_group}]"] = (
            "Log streams of this CodeBuild project's own log group, one per build."
        )
        out[f"AwsSolutions-IAM5[Resource::{reports}]"] = (
            "Test report groups CodeBuild creates for this project, named after it."
        )
    return out
