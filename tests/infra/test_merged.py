"""The synth of an environment with one ``serving: merged`` entry: a second base-like component
with a model of its own (the merged weights, no LoRA), its own scaling and log group, the router
allowed to invoke it and told to route the adapter there, and no adapter component for it."""

from __future__ import annotations

import json

import pytest
from aws_cdk import App

from infra.adapters import shard_of
from tests.infra.conftest import CONFIG, edited_config, policy_arns, resolve, resources

pytestmark = pytest.mark.synth


def _merged_first(cat: dict) -> None:
    cat["adapters"][0]["serving"] = "merged"


def _room(env: dict) -> None:
    env["serving"]["max_instance_count"] = 5  # the base's copies, the merged ones, a batch


@pytest.fixture(scope="module")
def merged(tmp_path_factory) -> tuple[dict, dict[str, dict]]:
    """The dev deployment with its first adapter merged, synthesized under the nag packs
    (``app.synth`` raises on any finding that is not acknowledged with a reason)."""
    import infra.nag as nag
    from config import load_deployment
    from infra.stacks import build

    catalog, environments = edited_config(
        tmp_path_factory.mktemp("merged"), catalog=_merged_first, environment=_room
    )
    context = json.loads((CONFIG.parent / "cdk.json").read_text())["context"]
    app = App(context=context)
    dep = load_deployment("dev", catalog, environments)
    stacks = build(app, dep)
    nag.add_nag_packs(app)
    assembly = app.synth()
    return dep, {s.stack_name: assembly.get_stack_by_name(s.stack_name).template for s in stacks}


def test_a_merged_entry_has_a_base_component_and_model_of_its_own(merged) -> None:
    dep, templates = merged
    a = dep.adapters[0]
    serving = templates["lora-dev-serving"]
    models = resources(serving, "AWS::SageMaker::Model")
    components = {
        c["Properties"]["InferenceComponentName"]: c["Properties"]
        for c in resources(serving, "AWS::SageMaker::InferenceComponent").values()
    }
    assert set(components) == {"lora-dev-base", f"lora-dev-{a.name}-merged"}
    own = components[f"lora-dev-{a.name}-merged"]
    base = components["lora-dev-base"]
    assert own["Specification"]["ModelName"] != base["Specification"]["ModelName"]
    assert (
        own["Specification"]["ComputeResourceRequirements"]
        == (base["Specification"]["ComputeResourceRequirements"])
    )
    (merged_model,) = [
        m["Properties"] for m in models.values() if "merged/" in json.dumps(m["Properties"])
    ]
    container = merged_model["PrimaryContainer"]
    uri = resolve(container["ModelDataSource"]["S3DataSource"]["S3Uri"])
    assert uri.endswith(f"/merged/{a.name}/{a.entry.version}/")
    env = container["Environment"]
    assert env["OPTION_ENABLE_LORA"] == "false" and "OPTION_MAX_LORAS" not in env
    assert env["BASE_REVISION"] == dep.base.revision
    # Its own scaling and its own log group.
    targets = [
        t["Properties"]["ResourceId"]
        for t in resources(serving, "AWS::ApplicationAutoScaling::ScalableTarget").values()
    ]
    assert sorted(targets) == [
        "inference-component/lora-dev-base",
        f"inference-component/lora-dev-{a.name}-merged",
    ]
    groups = [
        g["Properties"].get("LogGroupName")
        for g in resources(serving, "AWS::Logs::LogGroup").values()
    ]
    assert f"/aws/sagemaker/InferenceComponents/lora-dev-{a.name}-merged" in groups


def test_the_router_sends_the_merged_adapter_to_its_component(merged) -> None:
    dep, templates = merged
    a = dep.adapters[0]
    assert (
        dep.routing_table().as_json()["adapters"][a.name]["component"]
        == f"lora-dev-{a.name}-merged"
    )
    arns = policy_arns(templates["lora-dev-router"])
    component = "arn:aws:sagemaker:us-east-1:123456789012:inference-component/lora-dev-"
    assert f"{component}{a.name}-merged" in arns
    assert f"{component}{a.name}" not in arns, "no adapter component is left to invoke"
    shard = templates[f"lora-dev-adapters-{shard_of(a.name):02d}"]
    names = [
        c["Properties"]["InferenceComponentName"]
        for c in resources(shard, "AWS::SageMaker::InferenceComponent").values()
    ]
    assert f"lora-dev-{a.name}" not in names
