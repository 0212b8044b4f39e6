"""Adapter inference components, sharded into stacks with a stable assignment.

An adapter's shard is ``crc32(name) % SHARD_COUNT``: a function of its own name only, so adding
or removing other adapters never moves it (moving would delete and recreate its component).
Each adapter IC carries exactly the four properties the adapter contract names; the endpoint
and base component are referred to by plain-string names, never by cross-stack exports.
"""

from __future__ import annotations

import zlib

from aws_cdk import Aws, CfnWaitConditionHandle
from aws_cdk import aws_sagemaker as sm
from constructs import Construct

from config import Deployment, ResolvedAdapter
from config.layout import adapter_key, artifact_bucket, s3_uri

SHARD_COUNT = 16
#: CloudFormation allows 500 resources and 1 MB; we keep a margin under both.
MAX_RESOURCES_PER_TEMPLATE = 400
MAX_TEMPLATE_BYTES = 800 * 1024


def shard_of(adapter_name: str) -> int:
    return zlib.crc32(adapter_name.encode()) % SHARD_COUNT


def shards(dep: Deployment) -> dict[int, list[ResolvedAdapter]]:
    """Every shard, empty or not: a stack that left the app would never be deleted (neither
    ``cdk deploy --all`` nor CDK Pipelines removes a stack that is no longer synthesized), so the
    last adapter of a shard could not be removed from the account."""
    out: dict[int, list[ResolvedAdapter]] = {i: [] for i in range(SHARD_COUNT)}
    for a in dep.adapters:
        out.setdefault(shard_of(a.name), []).append(a)
    for index, members in out.items():
        # A canary is a component of its own in its entry's shard.
        components = sum(len(a.component_names) for a in members if not a.merged)
        if components > MAX_RESOURCES_PER_TEMPLATE:
            raise ValueError(
                f"adapter shard {index} of environment {dep.env.name!r} holds {components} "
                f"components, over {MAX_RESOURCES_PER_TEMPLATE} per template; raise SHARD_COUNT"
            )
    return dict(sorted(out.items()))


def artifact_bucket_name(dep: Deployment) -> str:
    """Deterministic bucket name, so any stack can form artifact URLs without an export."""
    return artifact_bucket(dep.env.prefix, Aws.ACCOUNT_ID, Aws.REGION, dep.env.artifact_bucket)


def artifact_url(dep: Deployment, a: ResolvedAdapter, *, canary: bool = False) -> str:
    """The archive of the stable version, or of the canary's with ``canary``."""
    published = a.entry.canary if canary and a.entry.canary else a.entry
    if published.artifact:
        return published.artifact
    version = a.entry.canary.version if canary and a.entry.canary else a.entry.version
    return s3_uri(artifact_bucket_name(dep), adapter_key(a.name, version))


def construct_id(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("-") if part)


class AdapterComponents(Construct):
    def __init__(
        self, scope: Construct, id: str, *, dep: Deployment, members: list[ResolvedAdapter]
    ):
        super().__init__(scope, id)
        self.components: dict[str, sm.CfnInferenceComponent] = {}
        # A merged entry is a base component of its own, in the serving stack (infra.serving).
        members = [a for a in members if not a.merged]
        if not members:
            # A template needs one resource; this one costs nothing and creates nothing.
            CfnWaitConditionHandle(self, "EmptyShard")
        for a in members:
            self.components[a.name] = self._component(
                dep, construct_id(a.name), a.component_name, artifact_url(dep, a)
            )
            if a.canary_component_name:
                # A canary is a component of its own beside the stable one, which it never
                # touches; promoting it updates the stable one's artifact and removes this.
                self.components[a.canary_component_name] = self._component(
                    dep,
                    construct_id(a.name) + "Canary",
                    a.canary_component_name,
                    artifact_url(dep, a, canary=True),
                )

    def _component(
        self, dep: Deployment, cid: str, name: str, artifact: str
    ) -> sm.CfnInferenceComponent:
        return sm.CfnInferenceComponent(
            self,
            cid,
            endpoint_name=dep.endpoint_name,
            inference_component_name=name,
            specification=sm.CfnInferenceComponent.InferenceComponentSpecificationProperty(
                base_inference_component_name=dep.base_component_name,
                container=sm.CfnInferenceComponent.InferenceComponentContainerSpecificationProperty(
                    artifact_url=artifact
                ),
            ),
        )
