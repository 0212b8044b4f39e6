"""Every cdk-nag acknowledgement, listed: a new or widened one fails here until reviewed.

The list is per construct (never per stack) with the environments that need it; names are
normalized to ``PREFIX`` so one entry covers dev, staging and prod. Reasons are checked for
substance where they are recorded (``infra.nag.acknowledge``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from aws_cdk import App

import infra.nag as nag
from config import environment_names, load_deployment
from infra.stacks import build

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.synth
ALL = ("dev", "prod", "staging")
SERVING_POLICY = "PREFIX-serving/Serving/ExecutionPolicy"
ROUTER_POLICY = "PREFIX-router/Router/Policy"
#: AwsCustomResource's shared provider function (a SingletonFunction with a fixed uuid).
PROVIDER = "AWS679f53fac002430cb0da5b7982bd2287"
ARTIFACT_BUCKET = "arn:<AWS::Partition>:s3:::PREFIX-artifacts-<AWS::AccountId>-<AWS::Region>"

REVIEWED: dict[tuple[str, str], tuple[str, ...]] = {
    # ElastiCache AUTH tokens have no managed rotation (the reason names the manual procedure).
    ("PREFIX-cache/Cache/AuthToken", "AwsSolutions-SMG4"): ALL,
    ("PREFIX-cache/Cache/AuthToken", "HIPAA.Security-SecretsManagerRotationEnabled"): ALL,
    ("PREFIX-cache/Cache/AuthToken", "NIST.800.53.R5-SecretsManagerRotationEnabled"): ALL,
    # Single-AZ cache only where the environment file says so.
    ("PREFIX-cache/Cache/ReplicationGroup", "AwsSolutions-AEC4"): ("dev",),
    # Rules that cannot resolve security-group ids at synth (ingress is SG-to-SG on 443).
    ("PREFIX-network/Network/EndpointsSg", "AwsSolutions-EC23"): ALL,
    ("PREFIX-network/Network/EndpointsSg", "HIPAA.Security-EC2RestrictedCommonPorts"): ALL,
    ("PREFIX-network/Network/EndpointsSg", "HIPAA.Security-EC2RestrictedSSH"): ALL,
    ("PREFIX-network/Network/EndpointsSg", "NIST.800.53.R5-EC2RestrictedCommonPorts"): ALL,
    ("PREFIX-network/Network/EndpointsSg", "NIST.800.53.R5-EC2RestrictedSSH"): ALL,
    # IAM-signed API (no Cognito), caching in ElastiCache, Lambda proxy backend.
    ("PREFIX-router/Router/Api", "AwsSolutions-COG4"): ALL,
    # API Gateway's account-wide logging role, once per account and region, AWS's own policy.
    (
        "lora-fleet-account/ApiGateway/CloudWatchRole",
        "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:"
        "policy/service-role/AmazonAPIGatewayPushToCloudWatchLogs]",
    ): ALL,
    # The S3 prefix-list lookup (AwsCustomResource): a read-only call with no resource form,
    # and the construct library's provider function, run by CloudFormation at deploy time.
    ("PREFIX-network/Network/S3PrefixList", "HIPAA.Security-IAMNoInlinePolicy"): ALL,
    ("PREFIX-network/Network/S3PrefixList", "NIST.800.53.R5-IAMNoInlinePolicy"): ALL,
    ("PREFIX-network/Network/S3PrefixList", "AwsSolutions-IAM5[Resource::*]"): ALL,
    (
        f"PREFIX-network/{PROVIDER}",
        "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:"
        "policy/service-role/AWSLambdaBasicExecutionRole]",
    ): ALL,
    **{
        (f"PREFIX-network/{PROVIDER}", f"{pack}-{rule}"): ALL
        for pack in ("HIPAA.Security", "NIST.800.53.R5")
        for rule in ("LambdaConcurrency", "LambdaDLQ", "LambdaInsideVPC")
    },
    # The rollback alarm is read by SageMaker's rolling update; paging is observability's.
    **{
        (f"PREFIX-serving/Serving/{alarm}", f"{pack}-CloudWatchAlarmAction"): ALL
        for alarm in ("RollbackAlarm", "BaseRollbackAlarm")
        for pack in ("HIPAA.Security", "NIST.800.53.R5")
    },
    # ml.g5 instances have NVMe storage, for which SageMaker refuses an endpoint KMS key.
    **{
        (
            "PREFIX-serving/Serving/EndpointConfig",
            f"{pack}-SageMakerEndpointConfigurationKMSKeyConfigured",
        ): ALL
        for pack in ("HIPAA.Security", "NIST.800.53.R5")
    },
    ("PREFIX-router/Router/Api", "HIPAA.Security-APIGWCacheEnabledAndEncrypted"): ALL,
    ("PREFIX-router/Router/Api", "HIPAA.Security-APIGWSSLEnabled"): ALL,
    ("PREFIX-router/Router/Api", "NIST.800.53.R5-APIGWCacheEnabledAndEncrypted"): ALL,
    ("PREFIX-router/Router/Api", "NIST.800.53.R5-APIGWSSLEnabled"): ALL,
    # Synchronous invocations only: no DLQ.
    ("PREFIX-router/Router/Function", "HIPAA.Security-LambdaDLQ"): ALL,
    ("PREFIX-router/Router/Function", "NIST.800.53.R5-LambdaDLQ"): ALL,
    # Wildcard resources: X-Ray / ENI (no resource form).
    (ROUTER_POLICY, "AwsSolutions-IAM5[Resource::*]"): ALL,
    (SERVING_POLICY, "AwsSolutions-IAM5[Resource::*]"): ALL,
    (
        SERVING_POLICY,
        "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:logs:us-east-1:"
        "<AWS::AccountId>:log-group:/aws/sagemaker/InferenceComponents/PREFIX-base:*]",
    ): ALL,
    (
        SERVING_POLICY,
        "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:logs:us-east-1:"
        "<AWS::AccountId>:log-group:/aws/sagemaker/Endpoints/PREFIX-endpoint:*]",
    ): ALL,
    (SERVING_POLICY, f"AwsSolutions-IAM5[Resource::{ARTIFACT_BUCKET}/adapters/*]"): ALL,
    (SERVING_POLICY, f"AwsSolutions-IAM5[Resource::{ARTIFACT_BUCKET}/base/*]"): ALL,
    (SERVING_POLICY, f"AwsSolutions-IAM5[Resource::{ARTIFACT_BUCKET}/merged/*]"): ALL,
    # The access-log bucket itself (S3 log delivery needs SSE-S3; logs are not replicated).
    ("PREFIX-stateful/Storage/AccessLogs", "HIPAA.Security-S3BucketReplicationEnabled"): ALL,
    ("PREFIX-stateful/Storage/AccessLogs", "HIPAA.Security-S3DefaultEncryptionKMS"): ALL,
    ("PREFIX-stateful/Storage/AccessLogs", "NIST.800.53.R5-S3BucketReplicationEnabled"): ALL,
    ("PREFIX-stateful/Storage/AccessLogs", "NIST.800.53.R5-S3DefaultEncryptionKMS"): ALL,
    # Versioned, KMS-encrypted artifacts are re-creatable from training; no second region.
    ("PREFIX-stateful/Storage/Artifacts", "HIPAA.Security-S3BucketReplicationEnabled"): ALL,
    ("PREFIX-stateful/Storage/Artifacts", "NIST.800.53.R5-S3BucketReplicationEnabled"): ALL,
    # The ENI drain (infra/eni_drain.py): aws-cdk-lib's provider framework, run only while the
    # serving stack changes, outside the VPC, reading network interfaces on delete.
    **{
        ("PREFIX-serving/Serving/EniDrain", finding): ALL
        for finding in (
            "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/"
            "AWSLambdaBasicExecutionRole]",
            "AwsSolutions-IAM5[Resource::*]",
            "AwsSolutions-SF2",
            "HIPAA.Security-IAMNoInlinePolicy",
            "NIST.800.53.R5-IAMNoInlinePolicy",
            "HIPAA.Security-LambdaConcurrency",
            "NIST.800.53.R5-LambdaConcurrency",
            "HIPAA.Security-LambdaDLQ",
            "NIST.800.53.R5-LambdaDLQ",
            "HIPAA.Security-LambdaInsideVPC",
            "NIST.800.53.R5-LambdaInsideVPC",
            *(
                f"AwsSolutions-IAM5[Resource::<ServingEniDrain{fn}.Arn>:*]"
                for fn in (
                    "OnEventE8C49FC8",
                    "IsComplete174D36C9",
                    "ProviderframeworkonEvent5A721125",
                    "ProviderframeworkisCompleteE5A7F4A9",
                    "ProviderframeworkonTimeoutC5147942",
                )
            ),
        )
    },
}


@pytest.fixture(scope="module")
def acknowledged() -> dict[tuple[str, str], tuple[str, ...]]:
    found: dict[tuple[str, str], set[str]] = {}
    context = json.loads((ROOT / "cdk.json").read_text())["context"]
    for env in environment_names(deployable=True):
        nag.ACKNOWLEDGEMENTS.clear()
        app = App(context=context)
        dep = load_deployment(env)
        build(app, dep)
        nag.add_nag_packs(app)
        app.synth()  # raises on any finding that is not acknowledged
        for path, finding, reason in nag.ACKNOWLEDGEMENTS:
            assert len(reason) >= 40, (path, finding)
            key = (
                path.replace(dep.env.prefix, "PREFIX"),
                finding.replace(dep.env.prefix, "PREFIX"),
            )
            found.setdefault(key, set()).add(env)
    return {k: tuple(sorted(v)) for k, v in found.items()}


def test_every_acknowledgement_is_in_the_reviewed_list(acknowledged) -> None:
    new = {k: v for k, v in acknowledged.items() if REVIEWED.get(k) != v}
    assert not new, f"new or widened cdk-nag acknowledgements, review them here: {new}"


def test_no_reviewed_acknowledgement_is_stale(acknowledged) -> None:
    stale = set(REVIEWED) - set(acknowledged)
    assert not stale, f"no longer needed; remove from REVIEWED: {stale}"
