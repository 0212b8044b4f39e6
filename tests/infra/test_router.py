"""The router function gets the environment's quotas; the routing table gets an entry's own."""

from __future__ import annotations

import dataclasses

import pytest

from tests.infra.conftest import resolve, resources

pytestmark = pytest.mark.synth


def test_quotas_reach_the_router(synth_edited) -> None:
    def env(e: dict) -> None:
        e.setdefault("router", {})["quota"] = {
            "requests_per_minute": 120,
            "tokens_per_minute": 40000,
        }

    templates = synth_edited(environment=env)
    (fn,) = resources(templates["lora-dev-router"], "AWS::Lambda::Function").values()
    variables = fn["Properties"]["Environment"]["Variables"]
    assert variables["QUOTA_REQUESTS_PER_MINUTE"] == "120"
    assert variables["QUOTA_TOKENS_PER_MINUTE"] == "40000"


def test_an_entrys_quota_and_cache_mode_are_in_the_routing_table(tmp_path) -> None:
    from config import load_deployment
    from tests.infra.conftest import edited_config

    def cat(c: dict) -> None:
        c["adapters"][0]["quota"] = {"requests_per_minute": 5}
        c["adapters"][0]["cache"] = "off"

    catalog, environments = edited_config(tmp_path, catalog=cat)
    dep = load_deployment("dev", catalog, environments)
    route = dep.routing_table().as_json()["adapters"][dep.adapters[0].name]
    assert route["quota"] == {"requests_per_minute": 5} and route["cache"] == "off"
    other = dep.routing_table().as_json()["adapters"][dep.adapters[1].name]
    assert "quota" not in other and other["cache"] == "tenant"


def test_every_route_streams_through_the_web_adapter(dev_templates) -> None:
    """API Gateway's STREAM transfer mode on every integration, the Lambda Web Adapter in
    response-stream mode in front of the router's web app, and the API Gateway timeout set by
    the environment (up to 15 minutes in STREAM mode)."""
    from config import load_deployment

    router = load_deployment("dev").env.router
    template = dev_templates["lora-dev-router"]
    methods = resources(template, "AWS::ApiGateway::Method").values()
    integrations = [m["Properties"]["Integration"] for m in methods]
    assert len(integrations) == 6
    (alias,) = resources(template, "AWS::Lambda::Alias")
    for integration in integrations:
        assert integration["Type"] == "AWS_PROXY"
        assert integration["ResponseTransferMode"] == "STREAM"
        assert integration["TimeoutInMillis"] == router.gateway_timeout_s * 1000
        parts = integration["Uri"]["Fn::Join"][1]
        uri = "".join(p if isinstance(p, str) else "" for p in parts)
        assert "/2021-11-15/functions/" in uri and uri.endswith("/response-streaming-invocations")
        assert {"Ref": alias} in parts, "the API calls the live alias (provisioned concurrency)"
    (fn,) = resources(template, "AWS::Lambda::Function").values()
    props = fn["Properties"]
    assert props["Handler"] == "run.sh" and props["Timeout"] == router.timeout_s
    assert props["Architectures"] == ["arm64"], "the layer is the adapter's Arm64 build"
    variables = props["Environment"]["Variables"]
    assert variables["AWS_LAMBDA_EXEC_WRAPPER"] == "/opt/bootstrap"
    assert variables["AWS_LWA_INVOKE_MODE"] == "response_stream"
    from starlette.testclient import TestClient

    from lambda_proxy.web import app

    # The adapter's readiness check reaches a route of the web app on its port.
    ready = TestClient(app).get(variables["AWS_LWA_READINESS_CHECK_PATH"])
    assert ready.status_code == 200
    assert variables["AWS_LWA_PORT"] == "8080"
    assert float(variables["STREAM_DEADLINE_S"]) < router.timeout_s
    (layer,) = props["Layers"]
    arn = "".join(p if isinstance(p, str) else "<region>" for p in layer["Fn::Join"][1])
    assert arn.endswith(
        f":753240598075:layer:LambdaAdapterLayerArm64:{router.web_adapter_layer_version}"
    )


def test_the_bundle_runs_the_web_app() -> None:
    import os

    from config import load_deployment
    from infra.bundle import router_bundle

    directory, _ = router_bundle(load_deployment("dev").routing_table())
    entry = directory / "run.sh"
    assert entry.is_file() and os.access(entry, os.X_OK)
    assert "lambda_proxy.web:app" in entry.read_text()
    assert (directory / "lambda_proxy" / "web.py").is_file()
    assert (directory / "starlette").is_dir() and (directory / "uvicorn").is_dir()


def test_streams_that_fail_after_their_200_are_alarmed(dev_templates) -> None:
    """API Gateway counts a failed stream as a success (its status went out first), so the
    router's own count of them pages, like the 5XXError alarm does for buffered answers. The
    alarm watches this environment's router only: its service dimension is the one the router's
    environment names (two environments in one account would otherwise page each other)."""
    from lambda_proxy.telemetry import NAMESPACE

    fn = next(
        r["Properties"]
        for r in resources(dev_templates["lora-dev-router"], "AWS::Lambda::Function").values()
        if "POWERTOOLS_SERVICE_NAME" in r["Properties"].get("Environment", {}).get("Variables", {})
    )
    service = fn["Environment"]["Variables"]["POWERTOOLS_SERVICE_NAME"]
    assert service == "lora-dev-router"

    alarms = resources(dev_templates["lora-dev-observability"], "AWS::CloudWatch::Alarm")
    (stream,) = [
        a["Properties"]
        for a in alarms.values()
        if a["Properties"].get("MetricName") == "StreamServerError"
    ]
    assert stream["Namespace"] == NAMESPACE
    assert stream["Dimensions"] == [{"Name": "service", "Value": service}]
    assert stream["AlarmActions"] and stream["Statistic"] == "Sum"


def _router_statements(template: dict) -> list[dict]:
    return [
        s
        for p in resources(template, "AWS::IAM::ManagedPolicy").values()
        for s in p["Properties"]["PolicyDocument"]["Statement"]
    ]


def test_the_router_invokes_only_the_adapter_components(dev_templates) -> None:
    """Not ``inference-component/PREFIX-*``: that covers the base component and any
    environment whose prefix extends this one (``lora-dev-eu``)."""
    from config import load_deployment

    dep = load_deployment("dev")
    statements = _router_statements(dev_templates["lora-dev-router"])
    invoke = [
        s
        for s in statements
        if "sagemaker:InvokeEndpoint" in s["Action"] and s["Effect"] == "Allow"
    ]
    arns = {resolve(r) for s in invoke for r in s["Resource"]}
    prefix = "arn:aws:sagemaker:us-east-1:123456789012:"
    assert arns == {
        f"{prefix}endpoint/{dep.endpoint_name}",
        *(f"{prefix}inference-component/{a.component_name}" for a in dep.adapters),
    }
    assert not any("*" in a or a.endswith(f"/{dep.base_component_name}") for a in arns)


def test_many_adapters_split_the_invoke_permissions_across_policies() -> None:
    from aws_cdk import App, Stack

    from config import load_deployment
    from infra.router import COMPONENTS_PER_POLICY, invoke_policies

    dep = load_deployment("dev")
    many = dep.adapters * (COMPONENTS_PER_POLICY // len(dep.adapters) + 2)
    stack = Stack(App(), "s")
    policies = invoke_policies(stack, stack, dataclasses.replace(dep, adapters=many))
    assert len(policies) == 2


def test_the_routers_vpc_permissions_match_awss_managed_policy(dev_templates) -> None:
    """AWSLambdaVPCAccessExecutionRole, version 3 (January 2024), added ec2:DescribeSubnets."""
    statements = _router_statements(dev_templates["lora-dev-router"])
    (vpc,) = [s for s in statements if s.get("Sid") == "VpcNetworkInterfaces"]
    assert set(vpc["Action"]) == {
        "ec2:CreateNetworkInterface",
        "ec2:DescribeNetworkInterfaces",
        "ec2:DescribeSubnets",
        "ec2:DeleteNetworkInterface",
        "ec2:AssignPrivateIpAddresses",
        "ec2:UnassignPrivateIpAddresses",
    }


def test_the_apis_resource_policy_admits_exactly_the_accounts_the_catalog_names(
    synth_edited,
) -> None:
    """API Gateway's resource policy decides before the router does, so every
    account the catalog or the operators name must be in it, and no other."""

    def foreign(cat: dict) -> None:
        cat["adapters"][0]["allow"] = {
            "tenants": ["444455556666:analytics", "555566667777:*", "claims-team"],
            "principals": ["arn:aws:iam::666677778888:role/partner-app"],
        }

    def named(env: dict) -> None:
        env.update(account="111122223333", region="eu-west-1")
        env.setdefault("router", {})["operators"] = ["arn:aws:iam::777788889999:role/oncall"]

    router = synth_edited(catalog=foreign, environment=named)["lora-dev-router"]
    (api,) = resources(router, "AWS::ApiGateway::RestApi").values()
    (statement,) = api["Properties"]["Policy"]["Statement"]
    principals = statement["Principal"]["AWS"]
    accounts = {
        resolve(p).split(":")[4]
        for p in (principals if isinstance(principals, list) else [principals])
    }
    assert accounts == {
        "111122223333",
        "444455556666",
        "555566667777",
        "666677778888",
        "777788889999",
    }
