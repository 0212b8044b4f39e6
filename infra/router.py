"""The router: the Lambda (in the VPC) behind API Gateway REST with IAM auth and WAF.

The function's code is the directory ``infra/bundle.py`` builds (no Docker); it ships the routing
table generated from the catalog. Requests reach a ``live`` alias so provisioned concurrency,
when an environment asks for it, keeps warm exactly the version the API calls.

Answers stream. Every integration uses API Gateway's response transfer mode STREAM (the Lambda is
invoked with ``InvokeWithResponseStream``; docs.aws.amazon.com/apigateway/latest/developerguide/
response-transfer-mode-lambda.html), and the function runs AWS's Lambda Web Adapter in
``response_stream`` mode in front of the router's web app (``lambda_proxy/web.py``), because
Python's managed runtimes do not stream a response themselves. A buffered answer is then one
piece of a stream; ``stream: true`` becomes server-sent events, no longer cut at 29 s.
"""

from __future__ import annotations

import re

from aws_cdk import ArnFormat, AssetHashType, Duration, Stack
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_wafv2 as wafv2
from constructs import Construct

from config import Deployment, layout
from config.processes import router_settings
from contracts.api import ROUTES
from contracts.metrics import NAMESPACE
from contracts.registry import SHADOW_STAGE, SHADOW_STATUS, SHADOW_TAG
from infra.bundle import router_bundle
from infra.lifecycle import removal_policy, retention
from infra.nag import acknowledge, checkov_skip, nag_arn
from infra.registry import canary_groups

STAGE = "live"
#: The port the router's web app listens on inside the function (the adapter's default).
WEB_PORT = 8080
#: awslabs/aws-lambda-web-adapter publishes its layers from this account.
WEB_ADAPTER_ACCOUNT = "753240598075"
_ACCOUNT_IN_ARN = re.compile(r"^arn:aws[a-z-]*:(?:iam|sts)::(\d{12}):")

#: A coarse gateway-level check; the Lambda's pydantic schema is the precise one (bounds from
#: the environment file). Rejecting non-objects and unknown top-level keys here saves a Lambda
#: invocation for the commonest client mistakes.
REQUEST_SCHEMA = apigw.JsonSchema(
    schema=apigw.JsonSchemaVersion.DRAFT4,
    title="GenerateRequest",
    type=apigw.JsonSchemaType.OBJECT,
    additional_properties=False,
    properties={
        "inputs": apigw.JsonSchema(type=apigw.JsonSchemaType.STRING, min_length=1),
        "messages": apigw.JsonSchema(
            type=apigw.JsonSchemaType.ARRAY,
            min_items=1,
            max_items=64,
            items=apigw.JsonSchema(type=apigw.JsonSchemaType.OBJECT),
        ),
        "parameters": apigw.JsonSchema(type=apigw.JsonSchemaType.OBJECT),
        "stream": apigw.JsonSchema(type=apigw.JsonSchemaType.BOOLEAN),
    },
)


def caller_accounts(dep: Deployment) -> list[str]:
    """Accounts of the principals the catalog names, for the API's resource policy."""
    accounts = set()
    for a in dep.adapters:
        for arn in (*a.entry.allow.principals, *dep.env.router.operators):
            if m := _ACCOUNT_IN_ARN.match(arn):
                accounts.add(m.group(1))
        # Tenants of other accounts are named ACCOUNT:NAME; bare names are this account's.
        accounts.update(t.split(":", 1)[0] for t in a.entry.allow.tenants if ":" in t)
    return sorted(accounts)


class Router(Construct):
    """The router: its function, the REST API in front of it, and the WAF in front of that.

    Each part is built by a method of this one construct rather than a construct of its own:
    a resource moved under a child construct gets a new logical id, which CloudFormation meets
    by replacing it (a new function, a new API and with it a new URL for every client), and
    ``ops.replacements`` refuses such a change.
    """

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
        cache_url: str,
        cache_secret_arn: str,
    ) -> None:
        super().__init__(scope, id)
        self.dep, self.key = dep, key
        self.function_name = f"{dep.env.prefix}-router"
        self._function(vpc, subnets, security_group, cache_url, cache_secret_arn)
        self._api()
        self._waf()

    def _log_group(self, cid: str, name: str | None = None) -> logs.LogGroup:
        env = self.dep.env
        return logs.LogGroup(
            self,
            cid,
            log_group_name=name,
            retention=retention(env.observability.log_retention_days),
            encryption_key=self.key,
            removal_policy=removal_policy(env),
        )

    def _function(
        self,
        vpc: ec2.IVpc,
        subnets: ec2.SubnetSelection,
        security_group: ec2.ISecurityGroup,
        cache_url: str,
        cache_secret_arn: str,
    ) -> None:
        """The function (the router's bundle behind AWS's Lambda Web Adapter), its role and
        log group, and the alias the API calls."""
        dep, key, stack = self.dep, self.key, Stack.of(self)
        env, r = dep.env, dep.env.router
        self.log_group = self._log_group("FunctionLogs", f"/aws/lambda/{self.function_name}")
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"{env.prefix}: router Lambda",
        )
        self.policy = router_policy(
            self, stack, key=key, log_group=self.log_group, secret_arn=cache_secret_arn
        )
        self.role.add_managed_policy(self.policy)
        self.invoke_policies = invoke_policies(self, stack, dep)
        for invoke in self.invoke_policies:
            self.role.add_managed_policy(invoke)
        self.registry_policy = registry_policy(self, stack, dep)
        if self.registry_policy is not None:
            self.role.add_managed_policy(self.registry_policy)

        code_dir, code_hash = router_bundle(dep.routing_table())
        self.function = lambda_.Function(
            self,
            "Function",
            function_name=self.function_name,
            description=f"{env.prefix}: routes adapter requests to {dep.endpoint_name}",
            runtime=lambda_.Runtime.PYTHON_3_14,
            architecture=lambda_.Architecture.ARM_64,
            # The Lambda Web Adapter (the layer, started by the exec wrapper) runs this script,
            # which serves lambda_proxy.web with uvicorn; the adapter relays each invocation.
            handler="run.sh",
            layers=[
                web_adapter_layer(self, stack, r.web_adapter_layer_version, r.web_adapter_layer_arn)
            ],
            code=lambda_.Code.from_asset(
                str(code_dir), asset_hash=code_hash, asset_hash_type=AssetHashType.CUSTOM
            ),
            # Every permission the function needs is in the managed policy above; CDK's own
            # additions (X-Ray for tracing) would land in an inline policy, so they are refused.
            role=self.role.without_policy_updates(),
            memory_size=r.memory_mb,
            timeout=Duration.seconds(r.timeout_s),
            vpc=vpc,
            vpc_subnets=subnets,
            security_groups=[security_group],
            log_group=self.log_group,
            tracing=lambda_.Tracing.ACTIVE,
            environment_encryption=key,
            reserved_concurrent_executions=r.reserved_concurrency,
            environment={
                "AWS_LAMBDA_EXEC_WRAPPER": "/opt/bootstrap",
                "AWS_LWA_INVOKE_MODE": "response_stream",
                "AWS_LWA_PORT": str(WEB_PORT),
                "AWS_LWA_READINESS_CHECK_PATH": "/_lwa/ready",
                # The service dimension of every metric, per environment (config.layout).
                "POWERTOOLS_SERVICE_NAME": layout.router_service(dep.env.prefix),
                "POWERTOOLS_METRICS_NAMESPACE": NAMESPACE,
                "POWERTOOLS_LOG_LEVEL": "INFO",
                **router_settings(dep)
                .model_copy(update={"redis_url": cache_url, "redis_secret_arn": cache_secret_arn})
                .to_env(),
            },
        )
        self.function.node.add_dependency(
            self.policy,
            *self.invoke_policies,
            *([self.registry_policy] if self.registry_policy is not None else []),
        )
        synchronous = (
            "Invoked synchronously by API Gateway only; a dead-letter queue applies to "
            "asynchronous invocations, and failures are returned to the caller."
        )
        for finding in ("HIPAA.Security-LambdaDLQ", "NIST.800.53.R5-LambdaDLQ"):
            acknowledge(self.function, finding, synchronous)
        checkov_skip(self.function.node.default_child, CKV_AWS_116=synchronous)
        self.alias = lambda_.Alias(
            self,
            "Live",
            alias_name=STAGE,
            version=self.function.current_version,
            provisioned_concurrent_executions=r.provisioned_concurrency or None,
        )

    def _api(self) -> None:
        """The REST API (IAM-signed, regional, resource policy by account), its stage's access
        logs, and the routes; streams pass through (``ResponseTransferMode.STREAM``)."""
        dep, stack = self.dep, Stack.of(self)
        env, r = dep.env, dep.env.router
        self.access_logs = self._log_group("AccessLogs")
        accounts = [stack.account, *caller_accounts(dep)]
        self.api = apigw.RestApi(
            self,
            "Api",
            rest_api_name=f"{env.prefix}-router",
            description=f"{env.prefix}: adapter requests, IAM-signed",
            endpoint_types=[apigw.EndpointType.REGIONAL],
            # The account's CloudWatch role is one per account and region: infra/account.py.
            cloud_watch_role=False,
            policy=iam.PolicyDocument(
                statements=[
                    iam.PolicyStatement(
                        actions=["execute-api:Invoke"],
                        principals=[iam.AccountPrincipal(a) for a in dict.fromkeys(accounts)],
                        resources=["execute-api:/*"],
                    )
                ]
            ),
            deploy_options=apigw.StageOptions(
                stage_name=STAGE,
                throttling_rate_limit=r.throttle_rate,
                throttling_burst_limit=r.throttle_burst,
                access_log_destination=apigw.LogGroupLogDestination(self.access_logs),
                access_log_format=apigw.AccessLogFormat.json_with_standard_fields(
                    caller=True,
                    http_method=True,
                    ip=True,
                    protocol=True,
                    request_time=True,
                    resource_path=True,
                    response_length=True,
                    status=True,
                    user=True,
                ),
                logging_level=apigw.MethodLoggingLevel.ERROR,
                # Bodies carry user text (PII); execution logs keep errors, never payloads.
                data_trace_enabled=False,
                metrics_enabled=True,
                tracing_enabled=True,
            ),
            default_method_options=apigw.MethodOptions(
                authorization_type=apigw.AuthorizationType.IAM
            ),
        )
        # API Gateway creates the execution-log group itself when a stage logs, unencrypted and
        # kept forever, outside every template ("API Gateway automatically creates and manages
        # a CloudWatch Logs log group ... named API-Gateway-Execution-Logs_{rest-api-id}/
        # {stage_name}": developer guide, set-up-logging). Declared here first, with the key,
        # the retention and the removal policy of every other group.
        self.execution_logs = self._log_group(
            "ExecutionLogs", f"API-Gateway-Execution-Logs_{self.api.rest_api_id}/{STAGE}"
        )
        self.api.deployment_stage.node.add_dependency(self.execution_logs)
        checkov_skip(
            self.api.deployment_stage.node.default_child,
            CKV_AWS_120="Answers depend on the caller (tenant, IAM identity) and carry user "
            "text; API Gateway's stage cache keys on the request alone, so the router's own "
            "tenant-aware Redis cache caches instead.",
        )
        self._acknowledge_api()

        validator = self.api.add_request_validator(
            "Body", validate_request_body=True, validate_request_parameters=True
        )
        model = self.api.add_model(
            "GenerateRequest", content_type="application/json", schema=REQUEST_SCHEMA
        )
        integration = apigw.LambdaIntegration(
            self.alias,
            proxy=True,
            timeout=Duration.seconds(r.gateway_timeout_s),
            response_transfer_mode=apigw.ResponseTransferMode.STREAM,
        )
        # Every route of contracts.api, one resource per path segment. The OpenAI door
        # validates its own bodies (lambda_proxy/openai_api.py answers in OpenAI's error
        # format, which a gateway model's 400 would not).
        resources: dict[tuple[str, ...], apigw.IResource] = {(): self.api.root}
        for route in ROUTES:
            for depth in range(1, len(route.segments) + 1):
                path = route.segments[:depth]
                if path not in resources:
                    resources[path] = resources[path[:-1]].add_resource(path[-1])
            options: dict = {"request_validator": validator}
            if route.gateway_model:
                options["request_models"] = {"application/json": model}
            if route.parameters:
                options["request_parameters"] = {
                    f"method.request.path.{name}": True for name in route.parameters
                }
            resources[route.segments].add_method(route.method, integration, **options)
        self.url = self.api.url_for_path("/")

    def _acknowledge_api(self) -> None:
        """The API's cdk-nag findings that do not apply, each with why."""
        for finding in ("AwsSolutions-COG4",):
            acknowledge(
                self.api,
                finding,
                "Callers are AWS principals (services and roles of the platform's users) that "
                "sign with SigV4; every method uses AWS_IAM authorization, not Cognito.",
            )
        for finding in (
            "HIPAA.Security-APIGWCacheEnabledAndEncrypted",
            "NIST.800.53.R5-APIGWCacheEnabledAndEncrypted",
        ):
            acknowledge(
                self.api,
                finding,
                "Responses are cached per adapter version in the encrypted ElastiCache group, "
                "keyed on the normalized request; the stage cache cannot key on adapter "
                "version or skip sampled requests.",
            )
        for finding in ("HIPAA.Security-APIGWSSLEnabled", "NIST.800.53.R5-APIGWSSLEnabled"):
            acknowledge(
                self.api,
                finding,
                "A client certificate authenticates API Gateway to an HTTP backend; this API's "
                "only backend is a Lambda proxy integration, called over AWS's signed API.",
            )

    def _waf(self) -> None:
        """AWS WAF on the stage (``web_acl``: a per-IP rate limit and AWS's known-bad-inputs
        rules), with its own log group."""
        env, stack = self.dep.env, Stack.of(self)
        self.waf_logs = self._log_group("WafLogs", f"aws-waf-logs-{env.prefix}-router")
        self.web_acl = web_acl(self, env.prefix, env.router.waf_rate_limit_per_5min)
        wafv2.CfnWebACLAssociation(
            self,
            "WafAssociation",
            resource_arn=self.api.deployment_stage.stage_arn,
            web_acl_arn=self.web_acl.attr_arn,
        )
        wafv2.CfnLoggingConfiguration(
            self,
            "WafLogging",
            resource_arn=self.web_acl.attr_arn,
            log_destination_configs=[
                stack.format_arn(
                    service="logs",
                    resource="log-group",
                    resource_name=self.waf_logs.log_group_name,
                    arn_format=ArnFormat.COLON_RESOURCE_NAME,
                )
            ],
        )


def web_adapter_layer(
    scope: Construct, stack: Stack, version: int, arn: str | None = None
) -> lambda_.ILayerVersion:
    """AWS's Lambda Web Adapter for arm64, in the function's region (or the copy ``arn`` names,
    where the public one is not published)."""
    arn = arn or stack.format_arn(
        service="lambda",
        account=WEB_ADAPTER_ACCOUNT,
        resource="layer",
        resource_name=f"LambdaAdapterLayerArm64:{version}",
        arn_format=ArnFormat.COLON_RESOURCE_NAME,
    )
    return lambda_.LayerVersion.from_layer_version_arn(scope, "WebAdapter", arn)


def web_acl(scope: Construct, prefix: str, rate_limit: int) -> wafv2.CfnWebACL:
    """Per-IP rate limit plus AWS's known-bad-inputs rules in front of the signed API.

    AWS's common rule set is left out on purpose: its SizeRestrictions_BODY rule blocks bodies
    over 8 KB, and adapter prompts (a page of clinical notes) are routinely larger.
    """

    def visibility(name: str) -> wafv2.CfnWebACL.VisibilityConfigProperty:
        return wafv2.CfnWebACL.VisibilityConfigProperty(
            cloud_watch_metrics_enabled=True, metric_name=name, sampled_requests_enabled=False
        )

    return wafv2.CfnWebACL(
        scope,
        "WebAcl",
        name=f"{prefix}-router",
        scope="REGIONAL",
        default_action=wafv2.CfnWebACL.DefaultActionProperty(allow={}),
        visibility_config=visibility(f"{prefix}-router"),
        rules=[
            wafv2.CfnWebACL.RuleProperty(
                name="RatePerIp",
                priority=0,
                action=wafv2.CfnWebACL.RuleActionProperty(block={}),
                statement=wafv2.CfnWebACL.StatementProperty(
                    rate_based_statement=wafv2.CfnWebACL.RateBasedStatementProperty(
                        limit=rate_limit, aggregate_key_type="IP"
                    )
                ),
                visibility_config=visibility("RatePerIp"),
            ),
            wafv2.CfnWebACL.RuleProperty(
                name="KnownBadInputs",
                priority=1,
                override_action=wafv2.CfnWebACL.OverrideActionProperty(none={}),
                statement=wafv2.CfnWebACL.StatementProperty(
                    managed_rule_group_statement=wafv2.CfnWebACL.ManagedRuleGroupStatementProperty(
                        vendor_name="AWS", name="AWSManagedRulesKnownBadInputsRuleSet"
                    )
                ),
                visibility_config=visibility("KnownBadInputs"),
            ),
        ],
    )


INVOKE_ACTIONS = ["sagemaker:InvokeEndpoint", "sagemaker:InvokeEndpointWithResponseStream"]
#: Adapter component ARNs per managed policy: IAM's 6,144-character limit on a managed
#: policy (IAM user guide, "IAM and AWS STS quotas") holds about 50 such ARNs; 40 leaves room.
COMPONENTS_PER_POLICY = 40
#: Managed invoke policies at most: IAM attaches 10 managed policies to a role by default, and
#: the role has others (its VPC access).
MAX_INVOKE_POLICIES = 8


def invoke_policies(scope: Construct, stack: Stack, dep: Deployment) -> list[iam.ManagedPolicy]:
    """Invoke this endpoint's adapter components, by name as the routing table lists them: a
    ``PREFIX-*`` pattern would also cover the base component and every environment whose prefix
    extends this one. The routing table ships in this stack, so a new catalog entry redeploys
    both together. One policy per ``COMPONENTS_PER_POLICY`` adapters (a role takes 10 managed
    policies by default)."""
    endpoint = stack.format_arn(
        service="sagemaker", resource="endpoint", resource_name=dep.endpoint_name
    )
    base = stack.format_arn(
        service="sagemaker", resource="inference-component", resource_name=dep.base_component_name
    )
    arns = [
        stack.format_arn(service="sagemaker", resource="inference-component", resource_name=name)
        for a in dep.adapters
        for name in a.component_names
    ]
    if len(arns) > COMPONENTS_PER_POLICY * MAX_INVOKE_POLICIES:
        # Past what IAM's default 10 managed policies per role hold (the synth-scale benchmark
        # counted 25 at 1,000 adapters): the environment's own components by pattern. The
        # Deny below keeps the base out, and `make check` refuses an environment whose prefix
        # extends another's, so the pattern covers no other environment of this repository.
        arns = [
            stack.format_arn(
                service="sagemaker",
                resource="inference-component",
                resource_name=f"{dep.env.prefix}-*",
            )
        ]
    chunks = [
        arns[i : i + COMPONENTS_PER_POLICY] for i in range(0, len(arns), COMPONENTS_PER_POLICY)
    ] or [[]]
    policies = [
        iam.ManagedPolicy(
            scope,
            "InvokePolicy" if i == 0 else f"InvokePolicy{i + 1}",
            statements=[
                iam.PolicyStatement(
                    sid="InvokeThisEndpointsAdapterComponents",
                    actions=INVOKE_ACTIONS,
                    resources=[endpoint, *chunk],
                ),
                # InvokeEndpoint's resources are the endpoint (required) and the inference
                # component (optional: Service Authorization Reference), so the endpoint's ARN
                # alone may admit a call naming the base component, which would serve without
                # an adapter's prompt or artifact binding. An explicit Deny settles it
                # .
                iam.PolicyStatement(
                    sid="NeverTheBaseComponent",
                    effect=iam.Effect.DENY,
                    actions=INVOKE_ACTIONS,
                    resources=[base],
                ),
            ],
        )
        for i, chunk in enumerate(chunks)
    ]
    if len(arns) == 1 and arns[0].endswith("-*"):
        acknowledge(
            policies[0],
            f"AwsSolutions-IAM5[Resource::{nag_arn(stack, arns[0])}]",
            "More adapter components than IAM's managed policies per role can list by name: "
            "this environment's own components by its prefix, with an explicit Deny on its base "
            "component; make check refuses an environment whose prefix extends another's.",
        )
    return policies


#: Shadow canaries' groups listed by name in the registry policy; past this many, the
#: environment's groups by its prefix. Two statements name each group (about 110 characters an
#: ARN at SageMaker's 63-character names): 15 stay well inside IAM's 6,144-character managed
#: policy (IAM user guide, "IAM and AWS STS quotas").
GROUPS_PER_POLICY = 15


def registry_policy(scope: Construct, stack: Stack, dep: Deployment) -> iam.ManagedPolicy | None:
    """Record a canary's decisions in its version's Model Registry record, and read them back
    (``lambda_proxy.registry``); no policy when no adapter has a canary.

    SageMaker's guide ("Amazon SageMaker API Permissions"): "Except for the ListTags API,
    resource-level restrictions are not available on List- calls", so ``ListModelPackages`` is
    granted on ``*``; it returns summaries only. Describing and updating are limited to the
    canaries' groups, and the update to what a decision writes, with the request and
    resource condition keys the Service Authorization Reference gives ``UpdateModelPackage``:
    no approval status (``sagemaker:ModelApprovalStatus`` absent: approving stays a person's,
    ``training.approve``), no metadata removed, the shadow canary's stage with one of its
    statuses, and only on a package publish tagged as a canary's (``aws:ResourceTag``;
    ``contracts.registry.SHADOW_TAG``), which a stable version never is."""
    groups = canary_groups(dep)
    if not groups:
        return None
    if len(groups) > GROUPS_PER_POLICY:
        groups = [f"{dep.env.prefix}-*"]
    packages = [
        stack.format_arn(service="sagemaker", resource="model-package", resource_name=f"{g}/*")
        for g in groups
    ]
    policy = iam.ManagedPolicy(
        scope,
        "RegistryPolicy",
        statements=[
            iam.PolicyStatement(
                sid="FindTheCanaryVersionsPackage",
                actions=["sagemaker:ListModelPackages"],
                resources=["*"],
            ),
            iam.PolicyStatement(
                sid="ReadShadowCanaryPackages",
                actions=["sagemaker:DescribeModelPackage"],
                resources=packages,
            ),
            iam.PolicyStatement(
                sid="RecordShadowCanaryDecisions",
                actions=["sagemaker:UpdateModelPackage"],
                resources=packages,
                conditions={
                    "Null": {
                        "sagemaker:ModelApprovalStatus": "true",
                        "sagemaker:CustomerMetadataPropertiesToRemove": "true",
                    },
                    # Only a package publish tagged as a shadow canary's: a stable version has
                    # no such tag, and the router may not tag. The resource tag is a condition
                    # key the Service Authorization Reference gives the model-package resource;
                    # a stage-based key (CurrentModelLifeCycleStage) is in none of AWS's pages
                    # we could read, and an IfExists on it admitted every stable version.
                    "StringEquals": {
                        "sagemaker:ModelLifeCycle:Stage": SHADOW_STAGE,
                        "sagemaker:ModelLifeCycle:StageStatus": sorted(SHADOW_STATUS.values()),
                        f"aws:ResourceTag/{SHADOW_TAG}": SHADOW_STAGE,
                    },
                },
            ),
        ],
    )
    acknowledge(
        policy,
        "AwsSolutions-IAM5[Resource::*]",
        "ListModelPackages: SageMaker's List- calls take no resource-level restriction "
        "(SageMaker developer guide, API permissions); it returns package summaries only.",
    )
    for package in packages:
        acknowledge(
            policy,
            f"AwsSolutions-IAM5[Resource::{nag_arn(stack, package)}]",
            "A version's package ARN ends in the number SageMaker gives it at registration, "
            "unknown at synth; limited to this shadow canary's group, and the update to a "
            "lifecycle record that sets no approval status.",
        )
    return policy


def router_policy(
    scope: Construct,
    stack: Stack,
    *,
    key: kms.IKey,
    log_group: logs.ILogGroup,
    secret_arn: str,
) -> iam.ManagedPolicy:
    """Read the cache secret; write its own logs; trace; attach to the VPC."""
    region = stack.region
    policy = iam.ManagedPolicy(
        scope,
        "Policy",
        statements=[
            iam.PolicyStatement(
                sid="ReadCacheToken",
                actions=["secretsmanager:GetSecretValue", "secretsmanager:DescribeSecret"],
                resources=[secret_arn],
            ),
            iam.PolicyStatement(
                sid="DecryptCacheTokenAndEnvironment",
                actions=["kms:Decrypt"],
                resources=[key.key_arn],
            ),
            iam.PolicyStatement(
                sid="OwnLogs",
                actions=["logs:CreateLogStream", "logs:PutLogEvents"],
                resources=[log_group.log_group_arn],
            ),
            iam.PolicyStatement(
                sid="Tracing",
                actions=["xray:PutTraceSegments", "xray:PutTelemetryRecords"],
                resources=["*"],
            ),
            # The EC2 actions of AWS's managed AWSLambdaVPCAccessExecutionRole (version 3,
            # January 2024, AWS managed policy reference), which added ec2:DescribeSubnets.
            iam.PolicyStatement(
                sid="VpcNetworkInterfaces",
                actions=[
                    "ec2:CreateNetworkInterface",
                    "ec2:DescribeNetworkInterfaces",
                    "ec2:DescribeSubnets",
                    "ec2:DeleteNetworkInterface",
                    "ec2:AssignPrivateIpAddresses",
                    "ec2:UnassignPrivateIpAddresses",
                ],
                resources=["*"],
                conditions={"StringEquals": {"aws:RequestedRegion": region}},
            ),
        ],
    )
    acknowledge(
        policy,
        "AwsSolutions-IAM5[Resource::*]",
        "X-Ray's PutTraceSegments/PutTelemetryRecords and the ENI calls Lambda makes for a VPC "
        "function have no resource-level form; the ENI calls are limited to this region.",
    )
    return policy
