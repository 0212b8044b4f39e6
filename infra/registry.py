"""The Model Registry's model package groups: one per adapter, where ``training.publish``
registers every version with its gate's evaluation and compatibility tuple, and
``training.approve`` approves it (``training.registry``).

In the stateful stack: a group holds release evidence, which outlives every redeploy of the
serving stacks. Its removal policy is the environment's (``infra.lifecycle``): kept where the
environment protects its data. AWS's API reference lists a ``ConflictException`` for
``DeleteModelPackageGroup`` without saying when; the README's teardown notes say what to do if
a group with packages fails a disposable environment's deletion.
"""

from __future__ import annotations

from aws_cdk import aws_sagemaker as sm
from constructs import Construct

from config import Deployment
from infra.adapters import construct_id
from infra.lifecycle import removal_policy


class ModelRegistry(Construct):
    def __init__(self, scope: Construct, id: str, *, dep: Deployment) -> None:
        super().__init__(scope, id)
        self.groups: dict[str, sm.CfnModelPackageGroup] = {}
        for a in dep.adapters:
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
