"""The VPC: isolated subnets only, VPC endpoints instead of a NAT, flow logs, security groups."""

from __future__ import annotations

from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_s3 as s3
from constructs import Construct

from config import Deployment
from infra.nag import acknowledge

INTERFACE_ENDPOINTS = {
    "SageMakerRuntime": ec2.InterfaceVpcEndpointAwsService.SAGEMAKER_RUNTIME,
    "SageMakerApi": ec2.InterfaceVpcEndpointAwsService.SAGEMAKER_API,
    "EcrApi": ec2.InterfaceVpcEndpointAwsService.ECR,
    "EcrDocker": ec2.InterfaceVpcEndpointAwsService.ECR_DOCKER,
    "Logs": ec2.InterfaceVpcEndpointAwsService.CLOUDWATCH_LOGS,
    "Sts": ec2.InterfaceVpcEndpointAwsService.STS,
    "SecretsManager": ec2.InterfaceVpcEndpointAwsService.SECRETS_MANAGER,
    "Monitoring": ec2.InterfaceVpcEndpointAwsService.CLOUDWATCH_MONITORING,
    "XRay": ec2.InterfaceVpcEndpointAwsService.XRAY,
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
        self.subnets = ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_ISOLATED)
        self.vpc.add_gateway_endpoint("S3", service=ec2.GatewayVpcEndpointAwsService.S3)

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
            self, "EndpointsSg", vpc=self.vpc, description="VPC interface endpoints",
            allow_all_outbound=False,
        )  # fmt: skip
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
        for name, service in INTERFACE_ENDPOINTS.items():
            self.vpc.add_interface_endpoint(
                name,
                service=service,
                private_dns_enabled=True,
                security_groups=[self.endpoints_sg],
                subnets=self.subnets,
            )
