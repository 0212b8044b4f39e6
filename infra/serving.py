"""The inference-component endpoint: execution role, model, endpoint config, endpoint, base IC.

The production variant carries no ``ModelName``: the endpoint hosts inference components, the
base IC owns the accelerator and runs the container, and each adapter IC (``adapters.py``)
points at the base by name. Component names are set explicitly because CloudFormation has no
GetAtt for an IC's name (``Ref`` is its ARN) and adapter shards refer to the base by that name.

The model is *not* named: every ``AWS::SageMaker::Model`` property is create-only
(CloudFormation's resource schema, ``createOnlyProperties``), so a new image, base revision or
``OPTION_*`` value replaces it, and CloudFormation cannot replace a resource whose name is fixed.
The base component reads the generated name through ``GetAtt ModelName`` and rolls the new model
across its copies (``DeploymentConfig``), rolling back on the endpoint's 5xx alarm.
"""

from __future__ import annotations

from aws_cdk import ArnFormat, Aws, Duration, Stack
from aws_cdk import aws_applicationautoscaling as appscaling
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sagemaker as sm
from constructs import Construct

from config import Deployment, ResolvedAdapter
from config.layout import ADAPTER_PREFIX, BASE_PREFIX, MERGED_PREFIX, base_prefix, merged_prefix
from config.processes import merged_runtime_settings, runtime_settings
from config.schema import ROLLOUT_BATCH_PERCENT
from infra.adapters import construct_id as id_of
from infra.eni_drain import EniDrain
from infra.lifecycle import removal_policy, retention
from infra.nag import acknowledge, checkov_skip, nag_account
from infra.network import external_model_data

VARIANT = "AllTraffic"
#: The image runs vLLM 0.32.0's CUDA build, whose torch 2.13.0 is built on CUDA 13.0
#: (``cuda-toolkit==13.0.3`` in its requirements), and CUDA 13.0 needs an NVIDIA driver of the
#: 580 series. AWS's inference-gpu-drivers page lists the default real-time drivers as "470,
#: CUDA 11.4" for ml.g5 (and 535 / 550 for p5 and g6): none runs it. botocore's SageMaker model
#: (ProductionVariant.InferenceAmiVersion) documents "al2023-ami-sagemaker-inference-gpu-4-1:
#: NVIDIA driver version: 580, CUDA version: 13.0", and cfn-lint's AWS::SageMaker::EndpointConfig
#: schema lists it among the allowed values.
INFERENCE_AMI_VERSION = "al2023-ami-sagemaker-inference-gpu-4-1"
#: Namespace of the metrics SageMaker publishes per inference component (CloudWatch docs,
#: "Amazon SageMaker AI metrics": inference component metrics).


def component_log_group_name(component_name: str) -> str:
    """Where an inference component's container writes stdout (one stream per copy)."""
    return f"/aws/sagemaker/InferenceComponents/{component_name}"


def endpoint_log_group_name(endpoint_name: str) -> str:
    """The endpoint's group, which SageMaker's logging page documents for every endpoint."""
    return f"/aws/sagemaker/Endpoints/{endpoint_name}"


def base_log_groups(dep: Deployment) -> list[str]:
    """Both groups the base container's lines may land in: components log to their own group,
    and AWS's logging page still documents only the endpoint's; the adapter metric filters
    read both (adapters load in the base container)."""
    return [
        component_log_group_name(dep.base_component_name),
        endpoint_log_group_name(dep.endpoint_name),
    ]


def container_log_groups(dep: Deployment) -> list[str]:
    """Every group a container writes to, each created encrypted with retention: the base's,
    then each merged entry's component's own."""
    return [
        *base_log_groups(dep),
        *(component_log_group_name(a.serving_component) for a in merged_adapters(dep)),
    ]


def merged_adapters(dep: Deployment) -> list[ResolvedAdapter]:
    """The entries with ``serving: merged``: each a base component of its own."""
    return [a for a in dep.adapters if a.merged]


def merged_environment(dep: Deployment) -> dict[str, str]:
    """A merged model's server: the base's options without LoRA (no slots preallocated, no
    adapter registered; ``runtime.merged``)."""
    return merged_runtime_settings(dep).to_env()


#: Instance families with local NVMe instance storage (EC2's instance-store table; SageMaker's
#: ml. families of the same names).
_LOCAL_STORAGE_FAMILIES = frozenset(
    {
        "g4dn",
        "g5",
        "g6",
        "g6e",
        "gr6",
        "p3dn",
        "p4d",
        "p4de",
        "p5",
        "p5e",
        "p5en",
        "trn1",
        "trn1n",
    }
)


def has_local_storage(instance_type: str) -> bool:
    """Whether ``ml.FAMILY.SIZE`` comes with NVMe instance storage (GPU families above, and
    every family whose name ends in ``d``: m5d, c5d, r5d, m6gd ...)."""
    family = instance_type.split(".")[1]
    if family in _LOCAL_STORAGE_FAMILIES:
        return True
    return family.endswith("gd") or (family.endswith("d") and family[-2:-1].isdigit())


def rollback_alarm_name(dep: Deployment) -> str:
    return f"{dep.env.prefix}-endpoint-5xx-rollback"


def container_environment(dep: Deployment) -> dict[str, str]:
    """Serving options (LMI-style names; runtime/vllm_args.py maps each to vLLM's argument),
    and vLLM's engine start-up limit inside SageMaker's (``config.processes``)."""
    return runtime_settings(dep).to_env()


class Image:
    """The container image the model runs, and the ECR repository ARN its pull needs.

    The catalog's image: the environment's own repository (``PREFIX/NAME``, by name, so no
    cross-stack export) or an external ECR address as given.
    """

    def __init__(self, scope: Construct, dep: Deployment) -> None:
        stack = Stack.of(scope)
        ref = dep.base.image
        if (m := ref.external) is not None:
            self.uri = f"{ref.repository}{ref.reference}"
            self.repository_arn = stack.format_arn(
                service="ecr",
                account=m["account"],
                region=m["region"],
                resource="repository",
                resource_name=m["name"],
            )
            return
        repo = ecr.Repository.from_repository_name(
            scope, "RuntimeRepository", ref.repository_name(dep.env.prefix)
        )
        # repository_uri_for_tag / _for_digest add the ':' or '@' themselves.
        self.uri = (
            repo.repository_uri_for_digest(ref.digest)
            if ref.digest
            else repo.repository_uri_for_tag(ref.tag)
        )
        self.repository_arn = repo.repository_arn


class Serving(Construct):
    """The endpoint, its base component and the merged entries' components.

    Each part is built by a method of this one construct (not a construct of its own, which
    would give its resources new logical ids and so replace them; see ``infra.router``)."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        dep: Deployment,
        vpc: ec2.IVpc,
        subnets: ec2.SubnetSelection,
        security_group: ec2.ISecurityGroup,
        key: kms.IKey,
        bucket: s3.IBucket,
    ) -> None:
        super().__init__(scope, id)
        self.dep = dep
        self.endpoint_name = dep.endpoint_name
        self.base_component_name = dep.base_component_name
        self._log_groups(key)
        self._execution_role(key, bucket)
        self._endpoint(vpc, subnets, security_group, key)
        self._drain(security_group, key)
        self._rollback_alarms()
        self._base_component()
        self._merged_components(bucket)

    def _log_groups(self, key: kms.IKey) -> None:
        """Containers of an inference-component endpoint log to the component's group; it is
        created here, before SageMaker would, to set retention and encryption on it."""
        dep, env = self.dep, self.dep.env
        self.log_groups = [
            logs.LogGroup(
                self,
                construct_id,
                log_group_name=name,
                retention=retention(env.observability.log_retention_days),
                encryption_key=key,
                removal_policy=removal_policy(env),
            )
            for construct_id, name in zip(
                (
                    "BaseComponentLogs",
                    "EndpointLogs",
                    *(f"{id_of(a.name)}MergedLogs" for a in merged_adapters(dep)),
                ),
                container_log_groups(dep),
                strict=True,
            )
        ]

    def _execution_role(self, key: kms.IKey, bucket: s3.IBucket) -> None:
        """The role SageMaker runs the containers with, and the model of the base."""
        dep, stack = self.dep, Stack.of(self)
        self.role = iam.Role(
            self,
            "ExecutionRole",
            assumed_by=sagemaker_principal(stack),
            description=f"{dep.env.prefix}: SageMaker endpoint execution role",
        )
        self.image = Image(self, dep)
        self.policy = execution_policy(
            self,
            stack,
            container_log_groups(dep),
            key,
            bucket,
            self.image.repository_arn,
            external_archives=[u for u in external_model_data(dep) if u.endswith(".tar.gz")],
        )
        self.role.add_managed_policy(self.policy)
        # The role may create its containers' log groups (AWS's CreateModel list), so it is
        # deleted before them: CloudFormation deletes a resource's dependents first, and the
        # ENI drain keeps the role for up to 55 minutes after the endpoint is gone. A group
        # deleted while the role lived could come back unencrypted and without retention, and
        # the next release's create of it would fail "already exists".
        self.role.node.add_dependency(*self.log_groups)
        self.policy.node.add_dependency(*self.log_groups)
        model_data = dep.base.model_data or bucket.s3_url_for_object(
            base_prefix(dep.base_key, dep.base.revision)
        )
        self.model = self._model("Model", model_data, container_environment(dep))

    def _endpoint(
        self,
        vpc: ec2.IVpc,
        subnets: ec2.SubnetSelection,
        security_group: ec2.ISecurityGroup,
        key: kms.IKey,
    ) -> None:
        """The endpoint and its config: one variant, in the VPC, network-isolated."""
        s = self.dep.env.serving
        # CreateEndpointConfig's EnableNetworkIsolation and VpcConfig (botocore's sagemaker
        # model): "whether all model containers deployed to the endpoint are isolated" and the
        # VPC the hosted models reach. Every property here is create-only; the config has no
        # fixed name, so a change makes a new config and updates the endpoint in place.
        self.endpoint_config = sm.CfnEndpointConfig(
            self,
            "EndpointConfig",
            execution_role_arn=self.role.role_arn,
            # SageMaker's CreateEndpointConfig refuses KmsKeyId "when using any nitro-based
            # instances with local storage" (its API reference); their NVMe volumes are
            # encrypted by the instance's own hardware module instead.
            kms_key_id=None if has_local_storage(s.instance_type) else key.key_arn,
            enable_network_isolation=True,
            vpc_config=sm.CfnEndpointConfig.VpcConfigProperty(
                security_group_ids=[security_group.security_group_id],
                subnets=vpc.select_subnets(subnet_type=subnets.subnet_type).subnet_ids,
            ),
            production_variants=[
                sm.CfnEndpointConfig.ProductionVariantProperty(
                    variant_name=VARIANT,
                    instance_type=s.instance_type,
                    initial_instance_count=s.initial_instance_count,
                    managed_instance_scaling=sm.CfnEndpointConfig.ManagedInstanceScalingProperty(
                        status="ENABLED",
                        min_instance_count=s.min_instance_count,
                        max_instance_count=s.max_instance_count,
                    ),
                    routing_config=sm.CfnEndpointConfig.RoutingConfigProperty(
                        routing_strategy="LEAST_OUTSTANDING_REQUESTS"
                    ),
                    inference_ami_version=INFERENCE_AMI_VERSION if s.accelerators else None,
                )
            ],
        )
        self.endpoint_config.node.add_dependency(self.policy)
        if has_local_storage(s.instance_type):
            local = (
                f"{s.instance_type} has NVMe instance storage, for which SageMaker refuses "
                "KmsKeyId (CreateEndpointConfig API reference) and encrypts the volumes with the "
                "instance's hardware module; model data and adapters stay KMS-encrypted in S3."
            )
            for pack in ("HIPAA.Security", "NIST.800.53.R5"):
                rule = f"{pack}-SageMakerEndpointConfigurationKMSKeyConfigured"
                acknowledge(self.endpoint_config, rule, local)
            checkov_skip(self.endpoint_config, CKV_AWS_98=local)
        self.endpoint = sm.CfnEndpoint(
            self,
            "Endpoint",
            endpoint_name=self.endpoint_name,
            endpoint_config_name=self.endpoint_config.attr_endpoint_config_name,
        )

    def _drain(self, security_group: ec2.ISecurityGroup, key: kms.IKey) -> None:
        """Deletion order: endpoint, then the wait for its ENIs, then the execution role: SageMaker
        removes the endpoint's ENIs after DeleteEndpoint returns. CloudFormation deletes a resource
        before what it depends on, so the drain depends on the role and its policy, and the endpoint
        on the drain. The router's Lambda needs none: CloudFormation itself "waits for Lambda to
        delete [the function's network interfaces] before proceeding" (AWS::Lambda::Function
        VpcConfig reference)."""
        self.drain = EniDrain(
            self,
            "EniDrain",
            security_groups=[security_group],
            key=key,
            log_retention=retention(self.dep.env.observability.log_retention_days),
            prefix=self.dep.env.prefix,
        )
        self.drain.node.add_dependency(self.role, self.policy)
        self.endpoint.node.add_dependency(self.drain)

    def _rollback_alarms(self) -> None:
        dep = self.dep
        # The alarms a rolling update of the base component watches: any 5xx during the rollout
        # sends the copies back to the previous model. Both the endpoint's and the base
        # component's own metric (AWS's rolling-update example for inference components uses
        # the InferenceComponentName dimension); either one rolls back.
        self.rollback_alarms = [
            cw.Alarm(
                self,
                construct_id,
                alarm_name=f"{rollback_alarm_name(dep)}{suffix}",
                alarm_description="Rolls a base-component update back on 5xx answers.",
                metric=cw.Metric(
                    namespace="AWS/SageMaker",
                    metric_name="Invocation5XXErrors",
                    statistic="Sum",
                    dimensions_map=dims,
                    period=Duration.minutes(1),
                ),
                threshold=1,
                evaluation_periods=1,
                comparison_operator=cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                treat_missing_data=cw.TreatMissingData.NOT_BREACHING,
            )
            for construct_id, suffix, dims in (
                ("RollbackAlarm", "", {"EndpointName": self.endpoint_name, "VariantName": VARIANT}),
                (
                    "BaseRollbackAlarm",
                    "-base",
                    {"InferenceComponentName": self.base_component_name},
                ),
            )
        ]
        # AWS's deployment-guardrails page: "Ensure that your IAM execution role has permission
        # to perform the cloudwatch:DescribeAlarms action on the auto-rollback alarms you
        # specify." Without it a rollout fails or loses its rollback.
        self.policy.add_statements(
            iam.PolicyStatement(
                sid="ReadRollbackAlarms",
                actions=["cloudwatch:DescribeAlarms"],
                resources=[a.alarm_arn for a in self.rollback_alarms],
            )
        )
        for alarm in self.rollback_alarms:
            for finding in (
                "HIPAA.Security-CloudWatchAlarmAction",
                "NIST.800.53.R5-CloudWatchAlarmAction",
            ):
                acknowledge(
                    alarm,
                    finding,
                    "SageMaker's rolling update reads this alarm's state to roll back; the "
                    "observability stack's endpoint 5xx alarm notifies on-call.",
                )

    def _base_component(self) -> None:
        dep = self.dep
        self.base_component = self._component(
            "BaseComponent",
            self.base_component_name,
            self.model,
            dep,
            [a.alarm_name for a in self.rollback_alarms],
        )
        for group in self.log_groups:
            self.base_component.node.add_dependency(group)
        self._copies("BaseCopies", self.base_component, dep)

    def _merged_components(self, bucket: s3.IBucket) -> None:
        dep = self.dep
        # The merged entries: each its own model (the merged weights, no LoRA), component and
        # scaling on this endpoint (seed 002's "dedicated serving path"); the router sends the
        # entry's requests there (its routing-table component).
        self.merged_components: dict[str, sm.CfnInferenceComponent] = {}
        for a in merged_adapters(dep):
            model = self._model(
                f"{id_of(a.name)}MergedModel",
                bucket.s3_url_for_object(merged_prefix(a.name, a.entry.version)),
                merged_environment(dep),
            )
            component = self._component(
                f"{id_of(a.name)}MergedComponent",
                a.serving_component,
                model,
                dep,
                [self.rollback_alarms[0].alarm_name],
            )
            for group in self.log_groups:
                component.node.add_dependency(group)
            self._copies(f"{id_of(a.name)}MergedCopies", component, dep)
            self.merged_components[a.name] = component

    def _model(self, cid: str, model_data: str, environment: dict[str, str]) -> sm.CfnModel:
        # No ModelName, no VpcConfig, no EnableNetworkIsolation: see the module docstring; the
        # VPC and isolation of an inference-component endpoint are the endpoint config's.
        model = sm.CfnModel(
            self,
            cid,
            execution_role_arn=self.role.role_arn,
            primary_container=sm.CfnModel.ContainerDefinitionProperty(
                image=self.image.uri,
                model_data_source=sm.CfnModel.ModelDataSourceProperty(
                    s3_data_source=sm.CfnModel.S3DataSourceProperty(
                        s3_uri=model_data, s3_data_type="S3Prefix", compression_type="None"
                    )
                ),
                environment=environment,
            ),
        )
        checkov_skip(
            model,
            CKV_AWS_370="The model is hosted by inference components, whose network isolation "
            "is the endpoint config's EnableNetworkIsolation (set to true below), per "
            "CreateEndpointConfig in SageMaker's API reference.",
        )
        # SageMaker checks the role's permissions when it creates the model.
        model.node.add_dependency(self.policy)
        return model

    def _component(
        self, cid: str, name: str, model: sm.CfnModel, dep: Deployment, alarms: list[str]
    ) -> sm.CfnInferenceComponent:
        s = dep.env.serving
        # Batches as a share of the copy count: SageMaker requires MaximumBatchSize to be 5% to
        # 50% of the component's copies (botocore's sagemaker model,
        # InferenceComponentRollingUpdatePolicy), which no whole number of copies is for one.
        half = sm.CfnInferenceComponent.InferenceComponentCapacitySizeProperty(
            type="CAPACITY_PERCENT", value=ROLLOUT_BATCH_PERCENT
        )
        component = sm.CfnInferenceComponent(
            self,
            cid,
            endpoint_name=self.endpoint_name,
            inference_component_name=name,
            variant_name=VARIANT,
            specification=sm.CfnInferenceComponent.InferenceComponentSpecificationProperty(
                model_name=model.attr_model_name,
                compute_resource_requirements=sm.CfnInferenceComponent.InferenceComponentComputeResourceRequirementsProperty(
                    number_of_accelerator_devices_required=s.accelerators,
                    number_of_cpu_cores_required=s.cpu_cores,
                    min_memory_required_in_mb=s.memory_mb,
                ),
                startup_parameters=sm.CfnInferenceComponent.InferenceComponentStartupParametersProperty(
                    model_data_download_timeout_in_seconds=s.startup_timeout_s,
                    container_startup_health_check_timeout_in_seconds=s.startup_timeout_s,
                ),
            ),
            runtime_config=sm.CfnInferenceComponent.InferenceComponentRuntimeConfigProperty(
                copy_count=s.base_copies
            ),
            # A new model (image, base revision, options) replaces copies in batches, so the
            # others keep serving; the 5xx alarms roll the update back.
            deployment_config=sm.CfnInferenceComponent.InferenceComponentDeploymentConfigProperty(
                rolling_update_policy=sm.CfnInferenceComponent.InferenceComponentRollingUpdatePolicyProperty(
                    maximum_batch_size=half,
                    rollback_maximum_batch_size=half,
                    wait_interval_in_seconds=s.rollout_wait_s,
                    maximum_execution_timeout_in_seconds=rollout_timeout_s(dep),
                ),
                auto_rollback_configuration=sm.CfnInferenceComponent.AutoRollbackConfigurationProperty(
                    alarms=[sm.CfnInferenceComponent.AlarmProperty(alarm_name=a) for a in alarms]
                ),
            ),
        )
        component.add_resource_dependency(self.endpoint)
        return component

    def _copies(self, cid: str, component: sm.CfnInferenceComponent, dep: Deployment) -> None:
        s = dep.env.serving
        stack = Stack.of(self)
        target = appscaling.ScalableTarget(
            self,
            cid,
            service_namespace=appscaling.ServiceNamespace.SAGEMAKER,
            resource_id=f"inference-component/{component.inference_component_name}",
            scalable_dimension="sagemaker:inference-component:DesiredCopyCount",
            min_capacity=s.base_copies,
            max_capacity=s.max_base_copies,
            # Application Auto Scaling acts for SageMaker through its service-linked role
            # (user guide, "Amazon SageMaker AI and Application Auto Scaling"); without a role
            # here CDK would create one that nothing uses. CloudFormation's ScalableTarget
            # schema: "To automatically create a service-linked role (recommended), specify the
            # full ARN of the service-linked role in your stack template."
            role=iam.Role.from_role_arn(
                self,
                f"{cid}ServiceLinkedRole",
                autoscaling_service_linked_role(stack),
                mutable=False,
            ),
        )
        target.node.add_dependency(component)
        target.scale_to_track_metric(
            "ConcurrentRequestsPerCopy",
            target_value=float(runtime_settings(dep).max_batch_size),
            predefined_metric=appscaling.PredefinedMetric.SAGEMAKER_INFERENCE_COMPONENT_CONCURRENT_REQUESTS_PER_COPY_HIGH_RESOLUTION,
        )


def sagemaker_principal(stack: Stack) -> iam.IPrincipal:
    """SageMaker, acting for this account and region only. The confused-deputy page of
    SageMaker's developer guide, for real-time inference: ``"ArnLike": {"aws:SourceArn":
    "arn:aws:sagemaker:REGION:ACCOUNT:*"}`` ("you do not need to specify an aws:SourceAccount
    value", since the account is in the ARN; the asterisk is required as written)."""
    source = f"arn:{stack.partition}:sagemaker:{stack.region}:{stack.account}:*"
    return iam.ServicePrincipal("sagemaker.amazonaws.com").with_conditions(
        {"ArnLike": {"aws:SourceArn": source}}
    )


def autoscaling_service_linked_role(stack: Stack) -> str:
    return (
        f"arn:{stack.partition}:iam::{stack.account}:role/aws-service-role/"
        "sagemaker.application-autoscaling.amazonaws.com/"
        "AWSServiceRoleForApplicationAutoScaling_SageMakerEndpoint"
    )


def rollout_timeout_s(dep: Deployment) -> int:
    """Room for every copy to download, start and pass its wait, within the schema's bounds
    (``MaximumExecutionTimeoutInSeconds``: 600 to 28,800)."""
    s = dep.env.serving
    per_copy = 2 * s.startup_timeout_s + s.rollout_wait_s
    return max(600, min(28800, per_copy * s.max_base_copies))


def execution_policy(
    scope: Construct,
    stack: Stack,
    log_groups: list[str],
    key: kms.IKey,
    bucket: s3.IBucket,
    repository_arn: str,
    external_archives: list[str] | None = None,
) -> iam.ManagedPolicy:
    """Read the base and adapter prefixes, pull the image, write the base component's logs.
    ``external_archives``: archives the catalog names outside the environment's bucket (an
    entry's or a canary's ``artifact``), each readable by its exact object ARN."""
    policy = iam.ManagedPolicy(
        scope,
        "ExecutionPolicy",
        statements=[
            iam.PolicyStatement(
                sid="ReadModelAndAdapterArtifacts",
                actions=["s3:GetObject"],
                resources=[
                    bucket.arn_for_objects(f"{BASE_PREFIX}*"),
                    bucket.arn_for_objects(f"{ADAPTER_PREFIX}*"),
                    bucket.arn_for_objects(f"{MERGED_PREFIX}*"),
                ],
            ),
            iam.PolicyStatement(
                sid="ListModelAndAdapterPrefixes",
                actions=["s3:ListBucket"],
                resources=[bucket.bucket_arn],
                conditions={
                    "StringLike": {
                        "s3:prefix": [f"{BASE_PREFIX}*", f"{ADAPTER_PREFIX}*", f"{MERGED_PREFIX}*"]
                    }
                },
            ),
            *(
                [
                    iam.PolicyStatement(
                        sid="ReadArchivesTheCatalogNamesElsewhere",
                        actions=["s3:GetObject"],
                        resources=[
                            f"arn:{stack.partition}:s3:::{u.removeprefix('s3://')}"
                            for u in external_archives
                        ],
                    )
                ]
                if external_archives
                else []
            ),
            iam.PolicyStatement(
                sid="DecryptArtifacts",
                actions=["kms:Decrypt", "kms:DescribeKey"],
                resources=[key.key_arn],
            ),
            iam.PolicyStatement(
                sid="PullRuntimeImage",
                actions=[
                    "ecr:BatchGetImage",
                    "ecr:GetDownloadUrlForLayer",
                    "ecr:BatchCheckLayerAvailability",
                ],
                resources=[repository_arn],
            ),
            iam.PolicyStatement(
                sid="EcrLogin", actions=["ecr:GetAuthorizationToken"], resources=["*"]
            ),
            # AWS's documented CreateModel set ("CreateModel API: Execution Role Permissions",
            # sagemaker-roles.md in awsdocs/amazon-sagemaker-developer-guide): logs
            # CreateLogGroup, CreateLogStream, PutLogEvents and DescribeLogStreams, and
            # cloudwatch:PutMetricData. A hosting agent that is refused one of them (AccessDenied,
            # not AlreadyExists) drops the containers' logs or metrics silently. Scoped to the
            # two groups the stack creates (encrypted, with retention) before any component
            # runs: CreateLogGroup on them answers ResourceAlreadyExists, as the agent expects.
            iam.PolicyStatement(
                sid="ContainerLogs",
                actions=[
                    "logs:CreateLogGroup",
                    "logs:CreateLogStream",
                    "logs:PutLogEvents",
                    "logs:DescribeLogStreams",
                ],
                resources=[
                    stack.format_arn(
                        service="logs",
                        resource="log-group",
                        resource_name=f"{group}:*",
                        arn_format=ArnFormat.COLON_RESOURCE_NAME,
                    )
                    for group in log_groups
                ],
            ),
            iam.PolicyStatement(
                sid="ComponentMetrics",
                actions=["cloudwatch:PutMetricData"],
                resources=["*"],
                # Instance metrics go to /aws/sagemaker/Endpoints, a component's enhanced
                # metrics to /aws/sagemaker/InferenceComponents/NAME: SageMaker's namespaces.
                conditions={"StringLike": {"cloudwatch:namespace": "/aws/sagemaker/*"}},
            ),
            iam.PolicyStatement(
                sid="VpcNetworkInterfaces",
                actions=[
                    "ec2:CreateNetworkInterface",
                    "ec2:CreateNetworkInterfacePermission",
                    "ec2:DeleteNetworkInterface",
                    "ec2:DeleteNetworkInterfacePermission",
                    "ec2:DescribeNetworkInterfaces",
                    "ec2:DescribeVpcs",
                    "ec2:DescribeDhcpOptions",
                    "ec2:DescribeSubnets",
                    "ec2:DescribeSecurityGroups",
                ],
                resources=["*"],
                conditions={"StringEquals": {"aws:RequestedRegion": stack.region}},
            ),
        ],
    )
    _acknowledge_execution_policy(policy, stack, log_groups, bucket)
    return policy


def _acknowledge_execution_policy(
    policy: iam.ManagedPolicy, stack: Stack, log_groups: list[str], bucket: s3.IBucket
) -> None:
    """The execution policy's wildcards, each with why it has no narrower form."""
    bucket_arn = f"arn:<AWS::Partition>:s3:::{_nag_name(bucket.bucket_name)}"
    reasons = {
        "AwsSolutions-IAM5[Resource::*]": "ecr:GetAuthorizationToken, cloudwatch:PutMetricData "
        "(limited by a namespace condition) and the ec2 ENI/Describe calls SageMaker makes for a "
        "VPC endpoint have no resource-level form.",
        f"AwsSolutions-IAM5[Resource::{bucket_arn}/base/*]": "Objects under the base/ "
        "prefix: the base weights, whose keys depend on the model revision.",
        f"AwsSolutions-IAM5[Resource::{bucket_arn}/adapters/*]": "Objects under the "
        "adapters/ prefix: one archive per adapter version, added without redeploying.",
        f"AwsSolutions-IAM5[Resource::{bucket_arn}/merged/*]": "Objects under the merged/ "
        "prefix: the weights of each serving: merged entry, keyed by adapter and version.",
        **{
            f"AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:logs:{stack.region}:"
            f"{nag_account(stack)}:log-group:{group}:*]": "Streams of this endpoint's own log "
            "group; SageMaker names them per instance and copy at run time."
            for group in log_groups
        },
    }
    for finding, reason in reasons.items():
        acknowledge(policy, finding, reason)


def _nag_name(value: str) -> str:
    """How cdk-nag prints a string holding pseudo-parameter tokens (``<AWS::AccountId>``)."""
    from aws_cdk import Token

    if not Token.is_unresolved(value):
        return value
    out = value
    for token, name in (
        (Aws.ACCOUNT_ID, "AWS::AccountId"),
        (Aws.REGION, "AWS::Region"),
        (Aws.PARTITION, "AWS::Partition"),
    ):
        out = out.replace(token, f"<{name}>")
    return out
