"""How long logs are kept and what happens to stateful resources when a stack goes.

Both follow the environment file (``observability.log_retention_days``, ``deletion_protection``),
so every construct asks here rather than deciding for itself.
"""

from __future__ import annotations

from aws_cdk import CfnResource, RemovalPolicy
from aws_cdk import aws_logs as logs
from constructs import Construct

from config import Environment


def removal_policy(env: Environment) -> RemovalPolicy:
    """Keep data resources when the environment protects them (prod), else delete with the stack.

    Kept as CloudFormation's ``RetainExceptOnCreate``, never plain ``Retain``: "If the stack
    operation that created the resource is rolled back, CloudFormation deletes the resource"
    (CDK's ``CfnDeletionPolicy.RETAIN_EXCEPT_ON_CREATE``). With ``Retain`` a failed first create
    (a GPU quota, a health-check timeout) keeps the bucket, the repository, the named log groups
    and the model package groups, and the retry then fails on "already exists"."""
    return (
        RemovalPolicy.RETAIN_ON_UPDATE_OR_DELETE
        if env.deletion_protection
        else RemovalPolicy.DESTROY
    )


def share_removal(scope: Construct, policy: RemovalPolicy) -> None:
    """The policy of a kept key or bucket for what only means something beside it: a key's
    alias and a bucket's policy (its TLS-only rule). A teardown with protection lifted would
    otherwise delete them and leave the retained bucket without its policy."""
    for child in scope.node.find_all():
        if isinstance(child, CfnResource) and child.cfn_resource_type in (
            "AWS::KMS::Alias",
            "AWS::S3::BucketPolicy",
        ):
            child.apply_removal_policy(policy)


_RETENTION = {
    1: logs.RetentionDays.ONE_DAY,
    3: logs.RetentionDays.THREE_DAYS,
    5: logs.RetentionDays.FIVE_DAYS,
    7: logs.RetentionDays.ONE_WEEK,
    14: logs.RetentionDays.TWO_WEEKS,
    30: logs.RetentionDays.ONE_MONTH,
    60: logs.RetentionDays.TWO_MONTHS,
    90: logs.RetentionDays.THREE_MONTHS,
    180: logs.RetentionDays.SIX_MONTHS,
    365: logs.RetentionDays.ONE_YEAR,
    731: logs.RetentionDays.TWO_YEARS,
    1827: logs.RetentionDays.FIVE_YEARS,
    3653: logs.RetentionDays.TEN_YEARS,
}


def retention(days: int) -> logs.RetentionDays:
    """The shortest CloudWatch retention that keeps logs at least ``days`` days."""
    return _RETENTION[min((d for d in _RETENTION if d >= days), default=3653)]
