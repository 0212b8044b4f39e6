"""The VPC: isolated subnets only, VPC endpoints instead of a NAT, flow logs, security groups."""

from __future__ import annotations

from aws_cdk import Aws, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from aws_cdk import custom_resources as cr
from constructs import Construct

from config import Deployment
from infra.adapters import artifact_bucket_name
from infra.nag import acknowledge, checkov_skip
from infra.registry import canary_groups

#: Interface endpoints, each with who calls it from inside the VPC; an endpoint nobody in the
#: VPC calls costs an ENI-hour per AZ for nothing (sagemaker.api and sts
#: had no caller: the router assumes no role and calls no control-plane API, and the
#: endpoint's containers run network-isolated). The caller of each is tested
#: (tests/infra/test_network.py).
INTERFACE_ENDPOINTS = {
    "SageMakerRuntime": ec2.InterfaceVpcEndpointAwsService.SAGEMAKER_RUNTIME,
    "EcrApi": ec2.InterfaceVpcEndpointAwsService.ECR,
    "EcrDocker": ec2.InterfaceVpcEndpointAwsService.ECR_DOCKER,
    "Logs": ec2.InterfaceVpcEndpointAwsService.CLOUDWATCH_LOGS,
    "SecretsManager": ec2.InterfaceVpcEndpointAwsService.SECRETS_MANAGER,
    "Monitoring": ec2.InterfaceVpcEndpointAwsService.CLOUDWATCH_MONITORING,
    "XRay": ec2.InterfaceVpcEndpointAwsService.XRAY,
}
#: Endpoints made only while something calls them: the SageMaker API while some adapter has a
#: canary, whose decisions the router records (``infra.registry.canary_groups``).
SHADOW_ENDPOINTS = {"SageMakerApi": ec2.InterfaceVpcEndpointAwsService.SAGEMAKER_API}
#: What the router calls there (``lambda_proxy.registry``), all its endpoint policy admits.
REGISTRY_ACTIONS = (
    "sagemaker:ListModelPackages",
    "sagemaker:DescribeModelPackage",
    "sagemaker:UpdateModelPackage",
)
#: Who calls each endpoint from the VPC's subnets.
ENDPOINT_CALLERS = {
    "SageMakerApi": "the router Lambda, while a canary is a shadow: its decision into the "
    "version's Model Registry record (lambda_proxy.registry: ListModelPackages, "
    "DescribeModelPackage, UpdateModelPackage)",
    "SageMakerRuntime": "the router Lambda: InvokeEndpoint(WithResponseStream)",
    "EcrApi": "SageMaker hosting in the VPC: the runtime image's manifest (ECR user guide, "
    "interface endpoints for private subnets)",
    "EcrDocker": "SageMaker hosting in the VPC: the runtime image's layers",
    "Logs": "SageMaker hosting in the VPC: the containers' logs",
    "SecretsManager": "the router Lambda: the cache's AUTH token (Powertools get_secret)",
    "Monitoring": "SageMaker hosting in the VPC: the components' metrics",
    "XRay": "the router Lambda: its traces (Powertools tracer)",
}


class Network(Construct):
    def __init__(
        self, scope: Construct, id: str, *, dep: Deployment, flow_log_bucket: s3.IBucket
    ) -> None:
        super().__init__(scope, id)
        net = dep.env.network
        self.vpc = ec2.Vpc(
            self,
            "Vpc",
            ip_addresses=ec2.IpAddresses.cidr(net.cidr),
            max_azs=net.max_azs,
            nat_gateways=0,
            subnet_configuration=[
                ec2.SubnetConfiguration(
                    name="isolated", subnet_type=ec2.SubnetType.PRIVATE_ISOLATED, cidr_mask=20
                )
            ],
            flow_logs={
                "all": ec2.FlowLogOptions(
                    # Delivered to the access-log bucket: S3 delivery needs no IAM role.
                    destination=ec2.FlowLogDestination.to_s3(flow_log_bucket, "vpc-flow-logs/"),
                    traffic_type=ec2.FlowLogTrafficType.ALL,
                )
            },
            restrict_default_security_group=True,
        )
        # CDK's own provider for restrict_default_security_group (a CustomResourceProvider).
        restrict = Stack.of(self).node.find_child(
            "Custom::VpcRestrictDefaultSGCustomResourceProvider"
        )
        checkov_skip(
            restrict.node.find_child("Handler"),
            CKV_AWS_115=DEPLOY_TIME_ONLY,
            CKV_AWS_116=SYNCHRONOUS,
            CKV_AWS_117="CDK's provider removes the default security group's rules through the "
            "EC2 API when the VPC is created, before any endpoint exists inside it.",
        )
        self.subnets = ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_ISOLATED)
        self.s3_endpoint = self.vpc.add_gateway_endpoint(
            "S3", service=ec2.GatewayVpcEndpointAwsService.S3
        )
        for statement in s3_endpoint_statements(Stack.of(self), model_buckets(dep)):
            self.s3_endpoint.add_to_policy(statement)

        # Who talks to whom: the router to the cache and to the endpoints; SageMaker to endpoints.
        self.router_sg = ec2.SecurityGroup(
            self, "RouterSg", vpc=self.vpc, description="router Lambda", allow_all_outbound=False
        )
        self.sagemaker_sg = ec2.SecurityGroup(
            self,
            "SageMakerSg",
            vpc=self.vpc,
            description="SageMaker endpoint",
            allow_all_outbound=False,
        )
        self.cache_sg = ec2.SecurityGroup(
            self, "CacheSg", vpc=self.vpc, description="response cache", allow_all_outbound=False
        )
        self.endpoints_sg = ec2.SecurityGroup(
            self,
            "EndpointsSg",
            vpc=self.vpc,
            description="VPC interface endpoints",
            allow_all_outbound=False,
        )
        for finding in (
            "AwsSolutions-EC23",
            "HIPAA.Security-EC2RestrictedCommonPorts",
            "HIPAA.Security-EC2RestrictedSSH",
            "NIST.800.53.R5-EC2RestrictedCommonPorts",
            "NIST.800.53.R5-EC2RestrictedSSH",
        ):
            acknowledge(
                self.endpoints_sg,
                finding,
                "Ingress comes only from the router and SageMaker security groups on TCP 443; "
                "the rule cannot resolve those group ids at synth and reports an error instead.",
            )
        port = dep.env.cache.port
        self.cache_sg.add_ingress_rule(self.router_sg, ec2.Port.tcp(port), "router to cache")
        self.router_sg.add_egress_rule(self.cache_sg, ec2.Port.tcp(port), "router to cache")
        for sg, who in ((self.router_sg, "router"), (self.sagemaker_sg, "SageMaker")):
            self.endpoints_sg.add_ingress_rule(sg, ec2.Port.tcp(443), f"{who} to AWS APIs")
            sg.add_egress_rule(self.endpoints_sg, ec2.Port.tcp(443), "AWS APIs over endpoints")
        # Model data, adapter archives and ECR's image layers come from S3 through the gateway
        # endpoint, which a security group reaches by the region's S3 prefix list (VPC user
        # guide, "Gateway endpoints": outbound rules must allow traffic to the service's prefix
        # list). CloudFormation has no attribute for that list's id, so it is looked up.
        self.s3_prefix_list_id = s3_prefix_list_id(self)
        self.sagemaker_sg.add_egress_rule(
            ec2.Peer.prefix_list(self.s3_prefix_list_id),
            ec2.Port.tcp(443),
            "S3 through the gateway endpoint (model data, adapters, image layers)",
        )
        wanted = {**INTERFACE_ENDPOINTS, **(SHADOW_ENDPOINTS if canary_groups(dep) else {})}
        for name, service in wanted.items():
            endpoint = self.vpc.add_interface_endpoint(
                name,
                service=service,
                private_dns_enabled=True,
                security_groups=[self.endpoints_sg],
                subnets=self.subnets,
                # aws-cdk-lib's InterfaceVpcEndpointOptions.open: "If enabled, all traffic to
                # the endpoint from within the VPC will be automatically allowed ... based on
                # the VPC's CIDR range. @default true". Only the router and SageMaker groups
                # get in (the ingress rules above).
                open=False,
            )
            if name in SHADOW_ENDPOINTS:
                # Its one caller makes three calls (lambda_proxy.registry); the endpoint's
                # policy admits those, by this account's principals, and nothing else of the
                # SageMaker API, whoever reaches the endpoint.
                endpoint.add_to_policy(
                    iam.PolicyStatement(
                        principals=[iam.AnyPrincipal()],
                        actions=list(REGISTRY_ACTIONS),
                        resources=["*"],
                        conditions={"StringEquals": {"aws:PrincipalAccount": Aws.ACCOUNT_ID}},
                    )
                )


def external_model_data(dep: Deployment) -> list[str]:
    """S3 URIs of model data outside the environment's bucket: the base's ``model_data`` and
    any ``artifact`` an adapter or its canary names (a canary's archive counts: its component
    downloads it through the same endpoint with the same role)."""
    uris = [
        dep.base.model_data,
        *(a.entry.artifact for a in dep.adapters),
        *(a.entry.canary.artifact for a in dep.adapters if a.entry.canary is not None),
    ]
    own = f"s3://{artifact_bucket_name(dep)}/"
    return sorted({u for u in uris if u and not u.startswith(own)})


def model_buckets(dep: Deployment) -> list[str]:
    """Every bucket SageMaker reads model data from: the environment's artifact bucket, and any
    other that the catalog's base ``model_data`` or an adapter's (or canary's) ``artifact``
    names."""
    others = {u.removeprefix("s3://").split("/", 1)[0] for u in external_model_data(dep)}
    return [artifact_bucket_name(dep), *sorted(others - {artifact_bucket_name(dep)})]


def s3_endpoint_statements(stack: Stack, buckets: list[str]) -> list[iam.PolicyStatement]:
    """What the isolated subnets may reach in S3: the model buckets (model data and adapter
    archives, which SageMaker reads through the VPC) and the bucket ECR serves image layers
    from. ECR's user guide, "Amazon ECR interface VPC endpoints": the layers are in
    ``arn:aws:s3:::prod-region-starport-layer-bucket/*``, and its minimal gateway-endpoint
    policy allows ``s3:GetObject`` on it for any principal (the principals' own policies still
    apply)."""
    partition, region = stack.partition, stack.region
    return [
        iam.PolicyStatement(
            sid="ModelBuckets",
            principals=[iam.AnyPrincipal()],
            actions=["s3:GetObject", "s3:ListBucket"],
            resources=[
                arn
                for b in buckets
                for arn in (f"arn:{partition}:s3:::{b}", f"arn:{partition}:s3:::{b}/*")
            ],
        ),
        iam.PolicyStatement(
            sid="EcrImageLayers",
            principals=[iam.AnyPrincipal()],
            actions=["s3:GetObject"],
            resources=[f"arn:{partition}:s3:::prod-{region}-starport-layer-bucket/*"],
        ),
    ]


DEPLOY_TIME_ONLY = (
    "Runs only when CloudFormation creates or updates the lookup (one call per deploy), so it "
    "cannot exhaust the account's concurrency; reserving some would take from the router."
)
SYNCHRONOUS = (
    "Invoked by CloudFormation through the custom-resource provider, which reports a failure "
    "back to the stack; there is no asynchronous event to dead-letter."
)
OUTSIDE_VPC = (
    "It must call the EC2 API and answer CloudFormation's pre-signed S3 URL before the "
    "isolated VPC's S3 egress exists (this lookup is what creates that rule), so it runs "
    "outside the VPC; it reads one AWS-managed prefix list id."
)


def s3_prefix_list_id(scope: Construct) -> str:
    """The AWS-managed prefix list ``com.amazonaws.REGION.s3``, by DescribeManagedPrefixLists at
    deploy time (a custom resource: the id differs per region and has no CloudFormation form)."""
    stack = Stack.of(scope)
    name = f"com.amazonaws.{stack.region}.s3"
    call = cr.AwsSdkCall(
        service="EC2",
        action="describeManagedPrefixLists",
        parameters={"Filters": [{"Name": "prefix-list-name", "Values": [name]}]},
        physical_resource_id=cr.PhysicalResourceId.of(name),
        output_paths=["PrefixLists.0.PrefixListId"],
    )
    lookup = cr.AwsCustomResource(
        scope,
        "S3PrefixList",
        on_create=call,
        on_update=call,
        # DescribeManagedPrefixLists has no resource-level permissions (Service Authorization
        # Reference, Amazon EC2: resource types column empty for this action).
        policy=cr.AwsCustomResourcePolicy.from_statements(
            [iam.PolicyStatement(actions=["ec2:DescribeManagedPrefixLists"], resources=["*"])]
        ),
        install_latest_aws_sdk=False,
        log_retention=None,
    )
    for finding in ("HIPAA.Security-IAMNoInlinePolicy", "NIST.800.53.R5-IAMNoInlinePolicy"):
        acknowledge(
            lookup,
            finding,
            "AwsCustomResource attaches its one statement (ec2:DescribeManagedPrefixLists) to its "
            "own provider role inline; the policy belongs to that role alone.",
        )
    acknowledge(
        lookup,
        "AwsSolutions-IAM5[Resource::*]",
        "ec2:DescribeManagedPrefixLists has no resource-level permissions (Service Authorization "
        "Reference, Amazon EC2), so it can only be granted on '*'; it reads, never writes.",
    )
    # The provider function AwsCustomResource shares across the stack (a SingletonFunction).
    provider = stack.node.find_child(
        "AWS" + cr.AwsCustomResource.PROVIDER_FUNCTION_UUID.replace("-", "")
    )
    reasons = {
        "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/"
        "AWSLambdaBasicExecutionRole]": "The construct library's provider function writes only "
        "its own logs through AWS's basic execution policy.",
        "HIPAA.Security-LambdaConcurrency": DEPLOY_TIME_ONLY,
        "NIST.800.53.R5-LambdaConcurrency": DEPLOY_TIME_ONLY,
        "HIPAA.Security-LambdaDLQ": SYNCHRONOUS,
        "NIST.800.53.R5-LambdaDLQ": SYNCHRONOUS,
        "HIPAA.Security-LambdaInsideVPC": OUTSIDE_VPC,
        "NIST.800.53.R5-LambdaInsideVPC": OUTSIDE_VPC,
    }
    for finding, reason in reasons.items():
        acknowledge(provider, finding, reason)
    checkov_skip(
        provider.node.default_child,
        CKV_AWS_115=DEPLOY_TIME_ONLY,
        CKV_AWS_116=SYNCHRONOUS,
        CKV_AWS_117=OUTSIDE_VPC,
        CKV_AWS_173="The provider function has no environment variables of ours; nothing to "
        "encrypt beyond Lambda's default service key.",
    )
    return lookup.get_response_field("PrefixLists.0.PrefixListId")
