"""Stacks per environment, in deploy order.

``lora-fleet-account`` (API Gateway's account-wide logging role, shared by every environment of
an account and region) ->
``PREFIX-stateful`` (key, buckets, repository) -> ``PREFIX-registry-NN`` shards (Model Registry
groups) -> ``PREFIX-network`` -> ``PREFIX-cache``
(stateful too, kept apart because it lives in the VPC) -> ``PREFIX-serving`` (endpoint and base
component) -> ``PREFIX-adapters-NN`` shards -> ``PREFIX-router`` -> ``PREFIX-observability``.
Stateful stacks get termination protection where the environment asks for deletion protection.
"""

from __future__ import annotations

from aws_cdk import CfnOutput, Environment, Fn, Stack, Tags
from aws_cdk import aws_s3 as s3
from constructs import Construct

from config import Deployment
from infra.account import ACCOUNT_STACK, ApiGatewayAccount
from infra.adapters import AdapterComponents, artifact_bucket_name, shards
from infra.cache import ResponseCacheCluster
from infra.network import Network
from infra.observability import Observability
from infra.registry import ModelRegistry, registry_stack_name
from infra.router import STAGE, Router
from infra.serving import Serving
from infra.storage import Storage


class EnvironmentStack(Stack):
    """A stack named exactly by its id, also inside a pipeline Stage (whose default would prefix
    the stage name), so ``cdk deploy -c env=NAME``, the pipeline and ``make smoke`` agree.

    Its availability zones are the environment's choice, never a synth-time lookup: a stack
    whose environment names an account otherwise asks the CDK CLI to look them up, and a synth
    outside the CLI (the release's, ``ops.snapshots.synth``) gets CDK's placeholders
    ``dummy1a``/``dummy1b``, which EC2 refuses (CDK API reference, ``Stack.availabilityZones``:
    "To specify a different strategy for selecting availability zones override this method").
    ``zones``: the environment's ``network.availability_zones``, or a count: the first N zones
    ``Fn::GetAZs`` lists in the account and region at deploy time, as an account-agnostic
    stack does.
    """

    def __init__(self, scope: Construct, id: str, *, zones: list[str] | int = 2, **kw) -> None:
        super().__init__(scope, id, stack_name=id, **kw)
        self._zones = zones

    @property
    def availability_zones(self) -> list[str]:
        zones = getattr(self, "_zones", 2)
        if isinstance(zones, int):
            return [Fn.select(i, Fn.get_azs()) for i in range(zones)]
        return list(zones)


class AccountStack(EnvironmentStack):
    """Account-wide settings; identical for every environment, so never tagged per environment."""

    def __init__(self, scope: Construct, id: str, **kw) -> None:
        super().__init__(scope, id, **kw)
        self.api_gateway = ApiGatewayAccount(self, "ApiGateway")


class StatefulStack(EnvironmentStack):
    """What must outlive every redeploy: the key, the buckets and the image repository."""

    def __init__(self, scope: Construct, id: str, *, dep: Deployment, **kw) -> None:
        super().__init__(scope, id, **kw)
        self.storage = Storage(self, "Storage", dep=dep)
        self.storage.artifacts.node.default_child.add_property_override(  # type: ignore[union-attr]
            "BucketName", artifact_bucket_name(dep)
        )


class NetworkStack(EnvironmentStack):
    def __init__(
        self, scope: Construct, id: str, *, dep: Deployment, stateful: StatefulStack, **kw
    ):
        super().__init__(scope, id, **kw)
        self.network = Network(
            self, "Network", dep=dep, flow_log_bucket=stateful.storage.access_logs
        )


class CacheStack(EnvironmentStack):
    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        dep: Deployment,
        stateful: StatefulStack,
        network: NetworkStack,
        **kw,
    ) -> None:
        super().__init__(scope, id, **kw)
        net = network.network
        self.cache = ResponseCacheCluster(
            self,
            "Cache",
            dep=dep,
            vpc=net.vpc,
            subnets=net.subnets,
            security_group=net.cache_sg,
            key=stateful.storage.key,
        )


class RouterStack(EnvironmentStack):
    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        dep: Deployment,
        stateful: StatefulStack,
        network: NetworkStack,
        cache: CacheStack,
        **kw,
    ) -> None:
        super().__init__(scope, id, **kw)
        net = network.network
        self.router = Router(
            self,
            "Router",
            dep=dep,
            vpc=net.vpc,
            subnets=net.subnets,
            security_group=net.router_sg,
            key=stateful.storage.key,
            cache_url=cache.cache.url,
            cache_secret_arn=cache.cache.secret.secret_arn,
        )
        self.router_url = CfnOutput(
            self,
            "RouterUrl",
            value=self.router.url,
            description="POST {url}v1/adapters/NAME/generate, SigV4-signed",
        )


class ObservabilityStack(EnvironmentStack):
    def __init__(self, scope: Construct, id: str, *, dep: Deployment, **kw) -> None:
        super().__init__(scope, id, **kw)
        self.observability = Observability(
            self,
            "Observability",
            dep=dep,
            api_name=f"{dep.env.prefix}-router",
            stage=STAGE,
            function_name=f"{dep.env.prefix}-router",
        )


class ServingStack(EnvironmentStack):
    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        dep: Deployment,
        stateful: StatefulStack,
        network: NetworkStack,
        **kw,
    ) -> None:
        super().__init__(scope, id, **kw)
        st, net = stateful.storage, network.network
        self.serving = Serving(
            self,
            "Serving",
            dep=dep,
            vpc=net.vpc,
            subnets=net.subnets,
            security_group=net.sagemaker_sg,
            key=st.key,
            # By name, not by reference: the name is deterministic, so no export is needed.
            bucket=s3.Bucket.from_bucket_name(self, "ArtifactsByName", artifact_bucket_name(dep)),
        )


class RegistryShardStack(EnvironmentStack):
    """The Model Registry's groups (release evidence) of one shard's adapters."""

    def __init__(self, scope: Construct, id: str, *, dep: Deployment, members, **kw) -> None:
        super().__init__(scope, id, **kw)
        self.registry = ModelRegistry(self, "Registry", dep=dep, members=members)


class AdapterShardStack(EnvironmentStack):
    def __init__(self, scope: Construct, id: str, *, dep: Deployment, members, **kw) -> None:
        super().__init__(scope, id, **kw)
        self.adapters = AdapterComponents(self, "Adapters", dep=dep, members=members)


def build(app: Construct, dep: Deployment, *, account_stack: bool = True) -> list[Stack]:
    """The environment's stacks in ``app`` (an App, or a pipeline Stage: same stack names).
    ``account_stack=False``: leave out ``lora-fleet-account``, which another stage of the same
    account and region already deploys (one per account and region)."""
    # Every stack of the environment: its account and region, and its zones (EnvironmentStack).
    env: dict = {
        "env": Environment(account=dep.env.account, region=dep.env.region),
        "zones": dep.env.network.availability_zones or dep.env.network.max_azs,
    }
    p = dep.env.prefix
    protect = dep.env.deletion_protection
    account = (
        AccountStack(app, ACCOUNT_STACK, **env, termination_protection=True)
        if account_stack
        else None
    )
    stateful = StatefulStack(app, f"{p}-stateful", dep=dep, **env, termination_protection=protect)
    network = NetworkStack(app, f"{p}-network", dep=dep, stateful=stateful, **env)
    cache = CacheStack(
        app,
        f"{p}-cache",
        dep=dep,
        stateful=stateful,
        network=network,
        **env,
        termination_protection=protect,
    )
    serving = ServingStack(app, f"{p}-serving", dep=dep, stateful=stateful, network=network, **env)
    stacks: list[Stack] = [stateful, network, cache, serving]
    for index, members in shards(dep).items():
        registry = RegistryShardStack(
            app,
            registry_stack_name(dep, index),
            dep=dep,
            members=members,
            **env,
            termination_protection=protect,
        )
        # Deployed before serving, which the pipeline's release step (publish: the groups take
        # its versions) runs ahead of.
        serving.add_stack_dependency(registry, "publish registers versions in the groups")
        stacks.insert(stacks.index(serving), registry)
    for index, members in shards(dep).items():
        shard = AdapterShardStack(app, f"{p}-adapters-{index:02d}", dep=dep, members=members, **env)
        shard.add_stack_dependency(
            serving, "adapter components need the endpoint and base component"
        )
        stacks.append(shard)
    router = RouterStack(
        app, f"{p}-router", dep=dep, stateful=stateful, network=network, cache=cache, **env
    )
    router.add_stack_dependency(serving, "the router invokes the endpoint")
    if account is not None:
        router.add_stack_dependency(account, "API Gateway logs through the account's role")
    observability = ObservabilityStack(app, f"{p}-observability", dep=dep, **env)
    observability.add_stack_dependency(router, "alarms watch the router's API and function")
    observability.add_stack_dependency(
        serving, "metric filters read the base component's log group"
    )
    stacks += [router, observability]
    if account is not None:
        Tags.of(account).add("project", "lora-fleet")
    for stack in stacks:
        for key, value in (("project", "lora-fleet"), ("environment", dep.env.name)):
            # Adapter components carry exactly the four properties of the adapter contract.
            Tags.of(stack).add(
                key, value, exclude_resource_types=["AWS::SageMaker::InferenceComponent"]
            )
    return [account, *stacks] if account is not None else stacks
