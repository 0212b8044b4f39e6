"""First-day failures a template settles, each read off the synthesized templates, as
CloudFormation and IAM will read them."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

from tests.infra.conftest import resources

ROOT = Path(__file__).resolve().parents[2]


def _statements(template: dict) -> list[dict]:
    out = []
    for rtype in ("AWS::IAM::ManagedPolicy", "AWS::IAM::Policy"):
        for r in resources(template, rtype).values():
            out += r["Properties"]["PolicyDocument"]["Statement"]
    return out


def test_the_router_may_never_invoke_the_base_component(dev_templates) -> None:
    """InvokeEndpoint's inference-component resource is optional, so the endpoint's
    ARN alone may admit a call that names the base component; an explicit Deny settles it."""
    denies = [s for s in _statements(dev_templates["lora-dev-router"]) if s["Effect"] == "Deny"]
    assert denies, "no explicit Deny in the router's policies"
    text = json.dumps(denies)
    assert "inference-component/lora-dev-base" in text
    assert set(denies[0]["Action"]) == {
        "sagemaker:InvokeEndpoint",
        "sagemaker:InvokeEndpointWithResponseStream",
    }
    allows = json.dumps(
        [s for s in _statements(dev_templates["lora-dev-router"]) if s["Effect"] == "Allow"]
    )
    assert 'inference-component/lora-dev-base"' not in allows


def test_the_execution_role_has_aws_documented_logs_and_metrics_actions(dev_templates) -> None:
    """AWS's CreateModel execution-role set (sagemaker-roles.md): logs
    CreateLogGroup, CreateLogStream, PutLogEvents, DescribeLogStreams; cloudwatch:PutMetricData
    in SageMaker's namespaces."""
    statements = {s.get("Sid"): s for s in _statements(dev_templates["lora-dev-serving"])}
    logs = statements["ContainerLogs"]
    assert set(logs["Action"]) >= {
        "logs:CreateLogGroup",
        "logs:CreateLogStream",
        "logs:PutLogEvents",
        "logs:DescribeLogStreams",
    }
    metrics = statements["ComponentMetrics"]
    assert metrics["Condition"] == {"StringLike": {"cloudwatch:namespace": "/aws/sagemaker/*"}}


def test_api_gateways_execution_log_group_is_declared_encrypted_with_retention(
    dev_templates,
) -> None:
    """API Gateway would create it unencrypted and never expiring, outside the
    stack; declared first, the stage depends on it."""
    router = dev_templates["lora-dev-router"]
    groups = resources(router, "AWS::Logs::LogGroup")
    (rid, group) = next(
        (k, g)
        for k, g in groups.items()
        if "API-Gateway-Execution-Logs_" in json.dumps(g["Properties"].get("LogGroupName"))
    )
    assert "KmsKeyId" in group["Properties"] and "RetentionInDays" in group["Properties"]
    (stage,) = resources(router, "AWS::ApiGateway::Stage").values()
    assert rid in stage.get("DependsOn", [])
    assert "/live" in json.dumps(group["Properties"]["LogGroupName"])


def test_the_cache_sets_no_transit_encryption_mode_at_create(dev_templates) -> None:
    """TransitEncryptionEnabled already means required; CreateReplicationGroup
    makes required a two-step change."""
    (group,) = resources(
        dev_templates["lora-dev-cache"], "AWS::ElastiCache::ReplicationGroup"
    ).values()
    assert group["Properties"]["TransitEncryptionEnabled"] is True
    assert "TransitEncryptionMode" not in group["Properties"]


def test_every_interface_endpoint_has_a_caller_in_the_vpc(dev_templates) -> None:
    """An endpoint nobody in the VPC calls is billed per AZ-hour for nothing. Each
    endpoint names its caller, and each caller's code calls that service."""
    from infra.network import ENDPOINT_CALLERS, INTERFACE_ENDPOINTS, SHADOW_ENDPOINTS

    assert set(ENDPOINT_CALLERS) == set(INTERFACE_ENDPOINTS) | set(SHADOW_ENDPOINTS)
    services = {
        json.dumps(e["Properties"]["ServiceName"])
        for e in resources(dev_templates["lora-dev-network"], "AWS::EC2::VPCEndpoint").values()
        if e["Properties"].get("VpcEndpointType") == "Interface"
    }
    assert len(services) == len(INTERFACE_ENDPOINTS)
    assert not any(".sagemaker.api" in s or '.sts"' in s for s in services), services
    router = " ".join(p.read_text() for p in (ROOT / "lambda_proxy").glob("*.py"))
    assert '"sagemaker-runtime"' in router and "get_secret" in router and "tracer" in router
    # The router assumes no role and calls no SageMaker control-plane API, except to record a
    # shadow canary's decision (lambda_proxy.registry), whose endpoint exists only while a
    # canary is a shadow (infra.network.SHADOW_ENDPOINTS; tests/infra/test_canary.py).
    calls = {
        (p.name, n.args[0].value)
        for p in (ROOT / "lambda_proxy").glob("*.py")
        for n in ast.walk(ast.parse(p.read_text()))
        if isinstance(n, ast.Call)
        and getattr(n.func, "attr", "") == "client"
        and n.args
        and isinstance(n.args[0], ast.Constant)
    }
    assert {c for f, c in calls if f != "registry.py"} <= {"sagemaker-runtime", "secretsmanager"}
    assert {c for f, c in calls if f == "registry.py"} == {"sagemaker"}, calls
    assert not re.search(r"assume_role\(", router)


def test_a_thousand_adapters_fit_the_routers_managed_policies() -> None:
    """IAM attaches 10 managed policies to a role by default; 1,000 adapters' component ARNs
    took 25 (synth-scale benchmark): past 8 the environment's own components go by pattern,
    with the base component denied."""
    import dataclasses

    from aws_cdk import App, Stack

    from config import load_deployment
    from infra.router import invoke_policies

    dep = load_deployment("dev")
    first = dep.adapters[0]
    many = [
        dataclasses.replace(first, entry=first.entry.model_copy(update={"name": f"a{i}"}))
        for i in range(1000)
    ]
    stack = Stack(App(), "s")
    policies = invoke_policies(stack, stack, dataclasses.replace(dep, adapters=many))
    assert len(policies) == 1
    doc = stack.resolve(policies[0].document.to_json())
    allow, deny = doc["Statement"]
    assert "lora-dev-*" in json.dumps(allow["Resource"]) and deny["Effect"] == "Deny"
    assert "inference-component/lora-dev-base" in json.dumps(deny["Resource"])


def test_check_refuses_a_prefix_that_extends_anothers(tmp_path) -> None:
    import shutil
    import subprocess
    import sys

    envs = tmp_path / "environments"
    shutil.copytree(ROOT / "config" / "environments", envs)
    text = (envs / "dev.yaml").read_text().replace("prefix: lora-dev", "prefix: lora-dev-eu")
    (envs / "dev-eu.yaml").write_text(text)
    proc = subprocess.run(
        [sys.executable, "-m", "config", "check", "--environments", str(envs)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1 and "extends environment 'dev'" in proc.stderr, proc.stderr[-800:]


def test_a_thousand_adapters_synthesize_within_cloudformations_limits(tmp_path) -> None:
    """Item 1: one model package group per adapter in one stack took it past 500 resources
    (TooManyResourcesInStack at 1,000 adapters). The whole app, cdk-nag on, as `make synth`."""
    from benchmarks.synth_scale import measure
    from infra.adapters import MAX_RESOURCES_PER_TEMPLATE, MAX_TEMPLATE_BYTES

    row = measure(1000, tmp_path)
    assert row["components"] == 1001
    assert row["max_resources"] <= MAX_RESOURCES_PER_TEMPLATE, row
    assert row["max_bytes"] <= MAX_TEMPLATE_BYTES, row
    assert row["router_invoke_policies"] <= 8, row


def _depends_on(resource: dict) -> set[str]:
    return set(resource.get("DependsOn", []))


def _reaches(template: dict, start: str, goal: str) -> bool:
    """Whether ``start`` depends on ``goal``, through DependsOn, Ref or GetAtt, transitively."""
    seen, todo = set(), [start]
    while todo:
        name = todo.pop()
        if name == goal:
            return True
        if name in seen or name not in template["Resources"]:
            continue
        seen.add(name)
        body = template["Resources"][name]
        text = json.dumps(body)
        todo += list(_depends_on(body))
        todo += [k for k in template["Resources"] if f'"{k}"' in text]
    return False


def test_the_execution_role_outlives_the_endpoints_network_interfaces(dev_templates) -> None:
    """SageMaker removes the endpoint's ENIs after DeleteEndpoint
    returns, with the execution role. CloudFormation deletes a resource before the ones it
    depends on, so the endpoint must depend on the ENI drain, and the drain on the role and its
    policy; the drain watches the endpoint's own security group."""
    serving = dev_templates["lora-dev-serving"]
    [endpoint] = resources(serving, "AWS::SageMaker::Endpoint")
    [config] = resources(serving, "AWS::SageMaker::EndpointConfig").values()
    role = config["Properties"]["ExecutionRoleArn"]["Fn::GetAtt"][0]
    drains = resources(serving, "Custom::EniDrain")
    assert len(drains) == 1, "the serving stack needs one ENI drain"
    [(drain, body)] = drains.items()
    assert _reaches(serving, endpoint, drain), "the endpoint must be deleted before the drain"
    assert _reaches(serving, drain, role), "the role must be deleted after the drain"
    policies = [
        arn["Ref"]
        for arn in serving["Resources"][role]["Properties"]["ManagedPolicyArns"]
        if isinstance(arn, dict) and "Ref" in arn
    ]
    assert policies, "the execution role's own managed policy"
    for policy in policies:
        assert _reaches(serving, drain, policy), "the role's policy must outlive the drain"
    [vpc_config] = [config["Properties"]["VpcConfig"]]
    assert body["Properties"]["SecurityGroupIds"] == vpc_config["SecurityGroupIds"]


def _listed(value: str | list[str]) -> list[str]:
    return [value] if isinstance(value, str) else value


def test_the_eni_drains_functions_may_only_describe_network_interfaces(dev_templates) -> None:
    serving = dev_templates["lora-dev-serving"]
    actions = {
        action
        for name, policy in resources(serving, "AWS::IAM::Policy").items()
        if "EniDrain" in name
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
        for action in _listed(statement["Action"])
        if not action.startswith(("lambda:", "logs:", "states:"))
    }
    assert actions == {"ec2:DescribeNetworkInterfaces"}


def test_the_eni_drains_logs_are_encrypted_and_expire(dev_templates) -> None:
    serving = dev_templates["lora-dev-serving"]
    drains = {k: v for k, v in resources(serving, "AWS::Logs::LogGroup").items() if "EniDrain" in k}
    assert drains, "the drain's functions and waiter log to a group of the stack's own"
    for body in drains.values():
        assert "KmsKeyId" in body["Properties"] and body["Properties"]["RetentionInDays"] >= 30
        # Step Functions' guide: a state machine's log group under /aws/vendedlogs/ keeps the
        # account's log delivery resource policy under its 5,120 characters.
        assert body["Properties"]["LogGroupName"].startswith("/aws/vendedlogs/states/")
