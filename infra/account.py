"""What API Gateway needs once per account and region: the role it writes CloudWatch Logs with.

``AWS::ApiGateway::Account`` is a regional, account-wide setting: one ``cloudWatchRoleArn`` for
every REST API in the region (API Gateway developer guide, "Set up CloudWatch logging for REST
APIs": the role is set "for your account" in each Region). If each environment's router stack set
it, destroying dev would remove the role prod's execution and access logs depend on. So it lives
in one stack, ``lora-fleet-account``, with the same template for every environment (deploying it
from dev, staging or prod is a no-op after the first), termination protection and retained
resources.
"""

from __future__ import annotations

from aws_cdk import RemovalPolicy
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_iam as iam
from constructs import Construct

from infra.nag import acknowledge

ACCOUNT_STACK = "lora-fleet-account"


class ApiGatewayAccount(Construct):
    def __init__(self, scope: Construct, id: str) -> None:
        super().__init__(scope, id)
        self.role = iam.Role(
            self,
            "CloudWatchRole",
            assumed_by=iam.ServicePrincipal("apigateway.amazonaws.com"),
            description="API Gateway writes REST API execution and access logs (account-wide)",
            managed_policies=[
                iam.ManagedPolicy.from_aws_managed_policy_name(
                    "service-role/AmazonAPIGatewayPushToCloudWatchLogs"
                )
            ],
        )
        self.role.apply_removal_policy(RemovalPolicy.RETAIN)
        acknowledge(
            self.role,
            "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/"
            "AmazonAPIGatewayPushToCloudWatchLogs]",
            "AWS's managed policy for exactly this role (API Gateway developer guide); API "
            "Gateway names its log groups per API and stage, so no narrower policy can be written.",
        )
        self.account = apigw.CfnAccount(self, "Account", cloud_watch_role_arn=self.role.role_arn)
        self.account.apply_removal_policy(RemovalPolicy.RETAIN)
