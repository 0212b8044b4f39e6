"""A custom resource that, when its stack deletes, waits until SageMaker has removed the
endpoint's network interfaces (the handlers' docstring has AWS's words). Built on aws-cdk-lib's
provider framework (``custom_resources.Provider``), whose waiter state machine polls
``is_complete`` for longer than one Lambda invocation may run.

Its place in the deletion order is the caller's to set: the resource depends on what must
outlive the interfaces (the execution role and its policy), and the endpoint depends on it.
"""

from __future__ import annotations

from pathlib import Path

from aws_cdk import CustomResource, Duration, RemovalPolicy, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import custom_resources as cr
from constructs import Construct

from infra.nag import acknowledge, checkov_skip

RUNTIME_DIR = Path(__file__).with_name("eni_drain_runtime")
#: How often the waiter asks, and how long it waits in all. CloudFormation waits up to an hour
#: for a custom resource's answer (its ``ServiceTimeout`` default, 3,600 s, CloudFormation's
#: AWS::CloudFormation::CustomResource reference); the waiter gives up a little earlier so that
#: the stack reports the framework's own timeout message.
QUERY_INTERVAL = Duration.seconds(30)
TOTAL_TIMEOUT = Duration.minutes(55)

DELETE_ONLY = (
    "Runs only while CloudFormation creates, updates or deletes this stack (a few calls per "
    "deploy), so it cannot exhaust the account's concurrency; reserving some would take from "
    "the router."
)
SYNCHRONOUS = (
    "Invoked by the custom-resource provider framework, which reports a failure back to the "
    "stack; there is no asynchronous event to dead-letter."
)
INLINE = (
    "The construct library's provider framework grants its functions and state machine their "
    "invoke and log permissions in policies of their own roles; each policy belongs to one role."
)
OUTSIDE_VPC = (
    "It calls the EC2 API (DescribeNetworkInterfaces), which the isolated VPC has no endpoint "
    "for, and answers CloudFormation's pre-signed S3 URL; it reads interface ids, nothing else."
)


class EniDrain(Construct):
    """``Custom::EniDrain`` over ``security_groups``: on delete, done when they hold no ENI."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        security_groups: list[ec2.ISecurityGroup],
        key: kms.IKey,
        log_retention: logs.RetentionDays,
        prefix: str,
    ) -> None:
        super().__init__(scope, id)
        # Under /aws/vendedlogs/: the waiter state machine logs here, and Step Functions' guide
        # ("Avoiding CloudWatch Logs resource policy size restrictions") asks for that prefix,
        # or every state machine's group is added to the account's 5,120-character log
        # delivery policy.
        self.log_group = logs.LogGroup(
            self,
            "Logs",
            log_group_name=f"/aws/vendedlogs/states/{prefix}-eni-drain",
            retention=log_retention,
            encryption_key=key,
            removal_policy=RemovalPolicy.DESTROY,
        )
        code = lambda_.Code.from_asset(str(RUNTIME_DIR))
        functions = {}
        for cid, handler in (("OnEvent", "on_event"), ("IsComplete", "is_complete")):
            functions[handler] = lambda_.Function(
                self,
                cid,
                description="Waits on delete for SageMaker to remove the endpoint's ENIs",
                runtime=lambda_.Runtime.PYTHON_3_14,
                architecture=lambda_.Architecture.ARM_64,
                handler=f"handler.{handler}",
                code=code,
                timeout=Duration.seconds(60),
                memory_size=128,
                log_group=self.log_group,
            )
        # DescribeNetworkInterfaces has no resource-level permissions (Service Authorization
        # Reference, Amazon EC2: its resource types column is empty), so only "*".
        functions["is_complete"].add_to_role_policy(
            iam.PolicyStatement(actions=["ec2:DescribeNetworkInterfaces"], resources=["*"])
        )
        self.provider = cr.Provider(
            self,
            "Provider",
            on_event_handler=functions["on_event"],
            is_complete_handler=functions["is_complete"],
            query_interval=QUERY_INTERVAL,
            total_timeout=TOTAL_TIMEOUT,
            log_group=self.log_group,
            disable_waiter_state_machine_logging=False,
            waiter_state_machine_log_options=cr.LogOptions(
                destination=self.log_group, level=sfn.LogLevel.ALL
            ),
        )
        self.resource = CustomResource(
            self,
            "Resource",
            service_token=self.provider.service_token,
            resource_type="Custom::EniDrain",
            properties={"SecurityGroupIds": [g.security_group_id for g in security_groups]},
        )
        self._explain(list(functions.values()))

    def _explain(self, functions: list[lambda_.Function]) -> None:
        """The provider framework's findings, acknowledged on this construct only."""
        stack = Stack.of(self)
        invoked = [*functions, *self._framework_functions()]
        reasons = {
            "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/"
            "AWSLambdaBasicExecutionRole]": "The drain's functions and the construct library's "
            "framework functions write only their own logs through AWS's basic execution policy.",
            "AwsSolutions-IAM5[Resource::*]": "ec2:DescribeNetworkInterfaces has no resource-level "
            "permissions (Service Authorization Reference, Amazon EC2), and the framework's "
            "waiter state machine writes to CloudWatch Logs' delivery API, which is granted on "
            "'*' only (Step Functions developer guide, logging IAM policy).",
            "AwsSolutions-SF2": "The construct library's waiter state machine has no tracing "
            "option; it only re-invokes the drain's isComplete function every 30 s on delete.",
            "HIPAA.Security-IAMNoInlinePolicy": INLINE,
            "NIST.800.53.R5-IAMNoInlinePolicy": INLINE,
            "HIPAA.Security-LambdaConcurrency": DELETE_ONLY,
            "NIST.800.53.R5-LambdaConcurrency": DELETE_ONLY,
            "HIPAA.Security-LambdaDLQ": SYNCHRONOUS,
            "NIST.800.53.R5-LambdaDLQ": SYNCHRONOUS,
            "HIPAA.Security-LambdaInsideVPC": OUTSIDE_VPC,
            "NIST.800.53.R5-LambdaInsideVPC": OUTSIDE_VPC,
        }
        for fn in invoked:
            arn = stack.resolve(fn.function_arn)["Fn::GetAtt"][0]
            reasons[f"AwsSolutions-IAM5[Resource::<{arn}.Arn>:*]"] = (
                "The provider framework invokes this drain's own function, any version of it "
                "(lambda:InvokeFunction on the function's ARN and its qualifiers)."
            )
        for finding, reason in reasons.items():
            acknowledge(self, finding, reason)
        # The waiter state machine's CloudWatch Logs delivery actions (CreateLogDelivery and the
        # rest), which the Step Functions developer guide grants on "*" only.
        waiter_policy = (
            self.provider.node.find_child("waiter-state-machine")
            .node.find_child("Role")
            .node.find_child("DefaultPolicy")
        )
        checkov_skip(
            waiter_policy.node.default_child,
            CKV_AWS_111="Step Functions' log delivery actions (logs:CreateLogDelivery, "
            "PutResourcePolicy and the rest) support no resource-level permissions; the Step "
            "Functions developer guide's logging policy grants them on '*'.",
        )
        for fn in invoked:
            checkov_skip(
                fn.node.default_child,
                CKV_AWS_115=DELETE_ONLY,
                CKV_AWS_116=SYNCHRONOUS,
                CKV_AWS_117=OUTSIDE_VPC,
                CKV_AWS_173="No environment variables of ours; nothing to encrypt beyond "
                "Lambda's default service key.",
            )

    def _framework_functions(self) -> list[lambda_.Function]:
        return [
            child for child in self.provider.node.find_all() if isinstance(child, lambda_.Function)
        ]
