"""What a teardown meets: an environment without deletion protection empties its buckets and
its image repository with the stack; a protected one keeps them. The flow-log bucket's policy
is the stack's, not one EC2 appends and the next update removes."""

from __future__ import annotations

import pytest

from tests.infra.conftest import resources

pytestmark = pytest.mark.synth


def _buckets(template: dict) -> dict[str, dict]:
    return resources(template, "AWS::S3::Bucket")


def test_an_unprotected_environment_empties_its_buckets_and_images_on_delete(
    dev_templates, assemblies
) -> None:
    dev = dev_templates["lora-dev-stateful"]
    buckets = _buckets(dev)
    assert len(buckets) == 2
    emptied = resources(dev, "Custom::S3AutoDeleteObjects")
    assert len(emptied) == 2, "both buckets are emptied before CloudFormation deletes them"
    for bucket in buckets.values():
        assert bucket["DeletionPolicy"] == "Delete"
    (repo,) = resources(dev, "AWS::ECR::Repository").values()
    assert repo["Properties"]["EmptyOnDelete"] is True and repo["DeletionPolicy"] == "Delete"
    # prod protects its data: nothing is emptied, everything is kept.
    prod = assemblies["prod"].templates["lora-prod-stateful"]
    assert not resources(prod, "Custom::S3AutoDeleteObjects")
    # RetainExceptOnCreate: kept, except when their first create rolls back.
    assert all(b["DeletionPolicy"] == "RetainExceptOnCreate" for b in _buckets(prod).values())
    (repo,) = resources(prod, "AWS::ECR::Repository").values()
    assert not repo["Properties"].get("EmptyOnDelete")
    assert repo["DeletionPolicy"] == "RetainExceptOnCreate"


def test_the_flow_log_bucket_policy_is_the_stacks_own(dev_templates) -> None:
    """Without ``@aws-cdk/aws-s3:createDefaultLoggingPolicy`` EC2 appends a statement for
    delivery.logs to the bucket policy, and the next stack update silently removes it."""
    policies = resources(dev_templates["lora-dev-stateful"], "AWS::S3::BucketPolicy")
    statements = [
        s for p in policies.values() for s in p["Properties"]["PolicyDocument"]["Statement"]
    ]
    delivery = [
        s
        for s in statements
        if s.get("Principal", {}).get("Service") == "delivery.logs.amazonaws.com"
    ]
    actions = {
        a
        for s in delivery
        for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])
    }
    assert {"s3:PutObject", "s3:GetBucketAcl"} <= actions
    for s in delivery:  # only this account's deliveries
        assert "aws:SourceAccount" in str(s.get("Condition"))
