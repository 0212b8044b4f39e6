"""The ``stacks`` step: the account, stateful, Model Registry and network stacks (repository,
bucket, key, every adapter's model package group, VPC), before anything needs them."""

from __future__ import annotations

from ops.steps.base import Release

NAME = "stacks"
SUMMARY = "deploy the account, stateful, Model Registry and network stacks"


def missing(r: Release) -> list[str]:
    return r.foundation_missing() or r.groups_missing()


def run(r: Release) -> None:
    r._before_registry_deploy()
    r._cdk_deploy(r.foundation_stacks())
