"""The Model Registry's model package groups: one per adapter, where ``training.publish``
registers every version with its gate's evaluation and compatibility tuple, and
``training.approve`` approves it (``training.registry``).

In registry shard stacks (``PREFIX-registry-NN``), deployed with the stateful ones: a group
holds release evidence, which outlives every redeploy of the serving stacks, and one group per
adapter in one stack passed CloudFormation's 500 resources at about 490 adapters (1,000 gave
``TooManyResourcesInStack``). The groups are sharded exactly as the
adapter components are (``infra.adapters.shard_of``, a function of the adapter's own name), so
adding adapters never moves a group between stacks, which would delete and recreate it. They
stay in CloudFormation rather than being created by ``training.publish`` so that a release's
roles need no ``CreateModelPackageGroup``, and a teardown deletes them with their stacks. Their
removal policy is the environment's (``infra.lifecycle``): kept where the environment protects
its data. AWS's API reference lists a ``ConflictException`` for
``DeleteModelPackageGroup`` without saying when; the README's teardown notes say what to do if
a group with packages fails a disposable environment's deletion.
"""

from __future__ import annotations

from aws_cdk import CfnWaitConditionHandle
from aws_cdk import aws_sagemaker as sm
from constructs import Construct

from config import Deployment, ResolvedAdapter
from infra.adapters import construct_id
from infra.lifecycle import removal_policy


def canary_groups(dep: Deployment) -> list[str]:
    """The groups whose canary version the router judges (in shadow mode on quality, and on its
    5xx rule either way), and so records its decisions in and reads them back from
    (``lambda_proxy.registry``): the stable component's name, as
    ``training.registry.group_name``."""
    return [a.component_name for a in dep.adapters if a.entry.canary is not None]


def registry_stack_name(dep: Deployment, index: int) -> str:
    return f"{dep.env.prefix}-registry-{index:02d}"


class ModelRegistry(Construct):
    """The groups of one shard's adapters (``members``)."""

    def __init__(
        self, scope: Construct, id: str, *, dep: Deployment, members: list[ResolvedAdapter]
    ) -> None:
        super().__init__(scope, id)
        self.groups: dict[str, sm.CfnModelPackageGroup] = {}
        if not members:
            # A template needs one resource; this one costs nothing and creates nothing.
            CfnWaitConditionHandle(self, "EmptyShard")
        for a in members:
            group = sm.CfnModelPackageGroup(
                self,
                construct_id(a.name),
                # training.registry.group_name: the stable component's name.
                model_package_group_name=a.component_name,
                model_package_group_description=f"Versions of adapter {a.name} on "
                f"{dep.base.model_id}, with their gate's evaluation and compatibility tuple",
            )
            group.apply_removal_policy(removal_policy(dep.env))
            self.groups[a.name] = group
