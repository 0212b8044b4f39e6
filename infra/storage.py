"""Stateful storage: the KMS key, the artifact bucket (with its access-log bucket) and ECR."""

from __future__ import annotations

from aws_cdk import ArnFormat, Duration, RemovalPolicy, Stack
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from config import Deployment, layout
from infra.lifecycle import removal_policy, share_removal
from infra.nag import acknowledge, checkov_skip


class Storage(Construct):
    def __init__(self, scope: Construct, id: str, *, dep: Deployment) -> None:
        super().__init__(scope, id)
        removal = removal_policy(dep.env)
        # An environment that does not protect its data is deleted with its stack, objects and
        # images included: a versioned bucket that still holds objects fails the deletion
        # (DELETE_FAILED) however its removal policy reads.
        disposable = not dep.env.deletion_protection
        self._data_key(dep, removal)
        self._buckets(removal, disposable)
        share_removal(self, removal)
        self._repository(dep, removal, disposable)

    def _data_key(self, dep: Deployment, removal: RemovalPolicy) -> None:
        """The environment's key, which CloudWatch Logs may use for this account's groups."""
        self.key = kms.Key(
            self,
            "DataKey",
            alias=layout.data_key_alias(dep.env.prefix),
            description=f"{dep.env.prefix}: artifacts, logs, cache secret and endpoint volumes",
            enable_key_rotation=True,
            removal_policy=removal,
        )
        stack = Stack.of(self)
        # CloudWatch Logs encrypts this account's log groups (endpoint, router, API, WAF) with
        # the key; the condition limits that to log groups of this account and region.
        self.key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="CloudWatchLogsOfThisAccount",
                principals=[iam.ServicePrincipal(f"logs.{stack.region}.{stack.url_suffix}")],
                actions=[
                    "kms:Encrypt*",
                    "kms:Decrypt*",
                    "kms:ReEncrypt*",
                    "kms:GenerateDataKey*",
                    "kms:Describe*",
                ],
                resources=["*"],
                conditions={
                    "ArnLike": {
                        "kms:EncryptionContext:aws:logs:arn": stack.format_arn(
                            service="logs",
                            resource="log-group",
                            resource_name="*",
                            arn_format=ArnFormat.COLON_RESOURCE_NAME,
                        )
                    }
                },
            )
        )

    def _buckets(self, removal: RemovalPolicy, disposable: bool) -> None:
        """The artifact bucket (KMS) and the bucket its access logs go to (SSE-S3)."""
        self.access_logs = s3.Bucket(
            self,
            "AccessLogs",
            # S3 server access logging cannot deliver to an SSE-KMS bucket.
            encryption=s3.BucketEncryption.S3_MANAGED,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            versioned=True,
            # Log delivery is granted by bucket policy (cdk.json flag), not by the legacy ACL.
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            lifecycle_rules=[s3.LifecycleRule(expiration=Duration.days(365))],
            removal_policy=removal,
            auto_delete_objects=disposable,
        )
        checkov_skip(
            self.access_logs.node.default_child,
            CKV_AWS_18="This bucket is the target of the artifact bucket's server access logs and "
            "the VPC flow logs; logging it would need another bucket, whose logs would need "
            "another in turn.",
        )
        # cdk-nag recognizes a bucket that receives server access logs, so S1 and the packs'
        # logging rules do not fire on it; only encryption and replication need a reason.
        for finding in (
            "HIPAA.Security-S3DefaultEncryptionKMS",
            "NIST.800.53.R5-S3DefaultEncryptionKMS",
        ):
            acknowledge(
                self.access_logs,
                finding,
                "S3 server access log delivery supports only SSE-S3 on the target bucket.",
            )
        self.artifacts = s3.Bucket(
            self,
            "Artifacts",
            encryption=s3.BucketEncryption.KMS,
            encryption_key=self.key,
            bucket_key_enabled=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            versioned=True,
            server_access_logs_bucket=self.access_logs,
            server_access_logs_prefix="artifacts/",
            removal_policy=removal,
            auto_delete_objects=disposable,
        )
        if disposable:
            # CDK's provider that empties the buckets when the stack is deleted.
            provider = Stack.of(self).node.find_child(
                "Custom::S3AutoDeleteObjectsCustomResourceProvider"
            )
            checkov_skip(
                provider.node.find_child("Handler"),
                CKV_AWS_115="Runs only while CloudFormation deletes a bucket of an environment "
                "without deletion protection, so it cannot exhaust the account's concurrency; "
                "reserving some would take from the router.",
                CKV_AWS_116="Invoked synchronously by CloudFormation, which reports its failure "
                "on the stack; there is no asynchronous event to dead-letter.",
                CKV_AWS_117="It calls S3's API to empty the buckets while the stack is deleted, "
                "when this environment's VPC (a later stack) may already be gone, so it runs "
                "outside the VPC; it touches only this stack's buckets.",
            )
        for bucket in (self.artifacts, self.access_logs):
            for finding in (
                "HIPAA.Security-S3BucketReplicationEnabled",
                "NIST.800.53.R5-S3BucketReplicationEnabled",
            ):
                acknowledge(
                    bucket,
                    finding,
                    "Single-region platform: artifacts are reproducible from the catalog and "
                    "training code, and versioning keeps every published adapter.",
                )

    def _repository(self, dep: Deployment, removal: RemovalPolicy, disposable: bool) -> None:
        # The catalog's image repository, in this environment's namespace (``PREFIX/NAME``);
        # none when the image lives elsewhere (an external ECR address).
        image = dep.base.image
        self.repository: ecr.Repository | None = None
        if image.external:
            return
        self.repository = ecr.Repository(
            self,
            "RuntimeImages",
            repository_name=image.repository_name(dep.env.prefix),
            image_scan_on_push=True,
            image_tag_mutability=ecr.TagMutability.IMMUTABLE,
            encryption=ecr.RepositoryEncryption.KMS,
            encryption_key=self.key,
            removal_policy=removal,
            # AWS::ECR::Repository's EmptyOnDelete: a repository that still holds images would
            # otherwise fail the stack's deletion like a non-empty bucket.
            empty_on_delete=disposable,
        )
