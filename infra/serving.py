"""The inference-component endpoint: execution role, model, endpoint config, endpoint, base IC.

The production variant carries no ``ModelName``: the endpoint hosts inference components, the
base IC owns the accelerator and runs the container, and each adapter IC (``adapters.py``)
points at the base by name. Names are set explicitly because CloudFormation has no GetAtt for
an IC's name (``Ref`` is its ARN) and adapter shards refer to the base by that name.
"""

from __future__ import annotations

from aws_cdk import ArnFormat, Aws, Stack
from aws_cdk import aws_applicationautoscaling as appscaling
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sagemaker as sm
from constructs import Construct

from config import Deployment
from config.plan import plan
from config.schema import Engine
from infra.lifecycle import removal_policy, retention
from infra.nag import acknowledge
from infra.storage import ADAPTER_PREFIX, BASE_PREFIX

VARIANT = "AllTraffic"
#: AWS's LMI (DJL Serving + vLLM) image, used when an environment picks engine: lmi.
LMI_IMAGE = "763104351884.dkr.ecr.{region}.amazonaws.com/djl-inference:0.33.0-lmi15.0.0-cu128"


def endpoint_log_group_name(endpoint_name: str) -> str:
    """The group SageMaker writes the container's stdout to (one stream per instance/copy)."""
    return f"/aws/sagemaker/Endpoints/{endpoint_name}"


def container_environment(dep: Deployment) -> dict[str, str]:
    """Serving options; the names follow LMI's so both engines read the same settings."""
    s, base, p = dep.env.serving, dep.base, plan(dep)
    env = {
        "OPTION_MAX_LORAS": str(p.max_loras),
        "OPTION_MAX_CPU_LORAS": str(s.max_cpu_loras),
        "OPTION_MAX_LORA_RANK": str(base.max_lora_rank),
        "OPTION_ENABLE_LORA": "true",
    }
    if dep.env.engine is Engine.lmi:
        env |= {
            "OPTION_ROLLING_BATCH": "vllm",
            "OPTION_MAX_ROLLING_BATCH_SIZE": str(s.max_batch_size),
        }
        return env
    env |= {
        "OPTION_VRAM_HEADROOM": str(s.vram_headroom),
        "OPTION_MAX_BATCH_SIZE": str(s.max_batch_size),
        "OPTION_DTYPE": base.dtype,
        "OPTION_QUANTIZATION": base.quantization,
        "BASE_MODEL_ID": base.model_id,
        "BASE_REVISION": base.revision,
    }
    if base.tokenizer_sha256:
        env["BASE_TOKENIZER_SHA256"] = base.tokenizer_sha256
    return env


class Serving(Construct):
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
        repository: ecr.IRepository,
    ) -> None:
        super().__init__(scope, id)
        env, s = dep.env, dep.env.serving
        stack = Stack.of(self)
        self.endpoint_name = dep.endpoint_name
        self.base_component_name = dep.base_component_name

        # Created here, before SageMaker would, to set retention and encryption on it.
        self.log_group = logs.LogGroup(
            self,
            "EndpointLogs",
            log_group_name=endpoint_log_group_name(self.endpoint_name),
            retention=retention(env.observability.log_retention_days),
            encryption_key=key,
            removal_policy=removal_policy(env),
        )  # fmt: skip
        self.role = iam.Role(
            self,
            "ExecutionRole",
            assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com"),
            description=f"{env.prefix}: SageMaker endpoint execution role",
        )
        self.policy = execution_policy(self, stack, self.endpoint_name, key, bucket, repository)
        self.role.add_managed_policy(self.policy)
        if env.engine is Engine.lmi:
            image = LMI_IMAGE.format(region=Aws.REGION)
        else:
            image = repository.repository_uri_for_tag_or_digest(dep.base.image.reference)
        model_data = dep.base.model_data or bucket.s3_url_for_object(
            f"{BASE_PREFIX}{dep.base_key}/{dep.base.revision}/"
        )
        self.model = sm.CfnModel(
            self,
            "Model",
            model_name=f"{env.prefix}-model",
            execution_role_arn=self.role.role_arn,
            enable_network_isolation=True,
            primary_container=sm.CfnModel.ContainerDefinitionProperty(
                image=image,
                model_data_source=sm.CfnModel.ModelDataSourceProperty(
                    s3_data_source=sm.CfnModel.S3DataSourceProperty(
                        s3_uri=model_data, s3_data_type="S3Prefix", compression_type="None"
                    )
                ),
                environment=container_environment(dep),
            ),
            vpc_config=sm.CfnModel.VpcConfigProperty(
                security_group_ids=[security_group.security_group_id],
                subnets=vpc.select_subnets(subnet_type=subnets.subnet_type).subnet_ids,
            ),
        )
        # SageMaker checks the role's permissions when it creates the model.
        self.model.node.add_dependency(self.policy)
        self.endpoint_config = sm.CfnEndpointConfig(
            self,
            "EndpointConfig",
            execution_role_arn=self.role.role_arn,
            kms_key_id=key.key_arn,
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
                )
            ],
        )
        self.endpoint_config.node.add_dependency(self.log_group)
        self.endpoint = sm.CfnEndpoint(
            self,
            "Endpoint",
            endpoint_name=self.endpoint_name,
            endpoint_config_name=self.endpoint_config.attr_endpoint_config_name,
        )
        self.base_component = sm.CfnInferenceComponent(
            self,
            "BaseComponent",
            endpoint_name=self.endpoint_name,
            inference_component_name=self.base_component_name,
            variant_name=VARIANT,
            specification=sm.CfnInferenceComponent.InferenceComponentSpecificationProperty(
                model_name=self.model.attr_model_name,
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
        )
        self.base_component.add_resource_dependency(self.endpoint)

        target = appscaling.ScalableTarget(
            self,
            "BaseCopies",
            service_namespace=appscaling.ServiceNamespace.SAGEMAKER,
            resource_id=f"inference-component/{self.base_component_name}",
            scalable_dimension="sagemaker:inference-component:DesiredCopyCount",
            min_capacity=s.base_copies,
            max_capacity=s.max_base_copies,
        )
        target.node.add_dependency(self.base_component)
        target.scale_to_track_metric(
            "ConcurrentRequestsPerCopy",
            target_value=float(s.max_batch_size),
            predefined_metric=appscaling.PredefinedMetric.SAGEMAKER_INFERENCE_COMPONENT_CONCURRENT_REQUESTS_PER_COPY_HIGH_RESOLUTION,
        )


def execution_policy(
    scope: Construct,
    stack: Stack,
    endpoint_name: str,
    key: kms.IKey,
    bucket: s3.IBucket,
    repository: ecr.IRepository,
) -> iam.ManagedPolicy:
    """Read the base and adapter prefixes, pull this repository, write this endpoint's logs."""
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
                ],
            ),
            iam.PolicyStatement(
                sid="ListModelAndAdapterPrefixes",
                actions=["s3:ListBucket"],
                resources=[bucket.bucket_arn],
                conditions={"StringLike": {"s3:prefix": [f"{BASE_PREFIX}*", f"{ADAPTER_PREFIX}*"]}},
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
                resources=[repository.repository_arn],
            ),
            iam.PolicyStatement(
                sid="EcrLogin", actions=["ecr:GetAuthorizationToken"], resources=["*"]
            ),
            iam.PolicyStatement(
                sid="EndpointLogs",
                actions=["logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents"],
                resources=[
                    stack.format_arn(
                        service="logs",
                        resource="log-group",
                        resource_name=f"/aws/sagemaker/Endpoints/{endpoint_name}:*",
                        arn_format=ArnFormat.COLON_RESOURCE_NAME,
                    )
                ],
            ),
            iam.PolicyStatement(
                sid="EndpointMetrics",
                actions=["cloudwatch:PutMetricData"],
                resources=["*"],
                conditions={"StringEquals": {"cloudwatch:namespace": "/aws/sagemaker/Endpoints"}},
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
    bucket_arn = f"arn:<AWS::Partition>:s3:::{_nag_name(bucket.bucket_name)}"
    reasons = {
        "AwsSolutions-IAM5[Resource::*]": "ecr:GetAuthorizationToken, cloudwatch:PutMetricData "
        "(limited by a namespace condition) and the ec2 ENI/Describe calls SageMaker makes for a "
        "VPC endpoint have no resource-level form.",
        f"AwsSolutions-IAM5[Resource::{bucket_arn}/base/*]": "Objects under the base/ "
        "prefix: the base weights, whose keys depend on the model revision.",
        f"AwsSolutions-IAM5[Resource::{bucket_arn}/adapters/*]": "Objects under the "
        "adapters/ prefix: one archive per adapter version, added without redeploying.",
        f"AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:logs:{stack.region}:<AWS::AccountId>:"
        f"log-group:/aws/sagemaker/Endpoints/{endpoint_name}:*]": "The endpoint's own log "
        "group; SageMaker names its streams per instance and component at run time.",
    }
    for finding, reason in reasons.items():
        acknowledge(policy, finding, reason)
    return policy


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
