"""Synth of the CDK app: nag packs clean, the inference-component contract, bad entries."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from aws_cdk import App
from aws_cdk.assertions import Template

from config import CATALOG_PATH, load_deployment
from infra.adapters import SHARD_COUNT, shard_of
from infra.nag import add_nag_packs
from infra.stacks import build

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.synth


@pytest.fixture(scope="module")
def dev() -> dict[str, Template]:
    app = App(context=json.loads((ROOT / "cdk.json").read_text())["context"])
    stacks = build(app, load_deployment("dev"))
    add_nag_packs(app)
    app.synth()  # raises on any unacknowledged cdk-nag finding
    return {s.stack_name: Template.from_stack(s) for s in stacks}


def _components(templates: dict[str, Template]) -> dict[str, dict]:
    out = {}
    for t in templates.values():
        for res in t.find_resources("AWS::SageMaker::InferenceComponent").values():
            out[res["Properties"]["InferenceComponentName"]] = res["Properties"]
    return out


def test_one_adapter_component_per_catalog_entry_with_only_the_contract_fields(dev) -> None:
    comps = _components(dev)
    dep = load_deployment("dev")
    for a in dep.adapters:
        props = comps[a.component_name]
        assert set(props) == {"EndpointName", "InferenceComponentName", "Specification"}
        assert set(props["Specification"]) == {"BaseInferenceComponentName", "Container"}
        assert props["Specification"]["BaseInferenceComponentName"] == "lora-dev-base"
        assert props["EndpointName"] == "lora-dev-endpoint"
        assert set(props["Specification"]["Container"]) == {"ArtifactUrl"}
    assert "lora-dev-base" in comps
    assert len(comps) == len(dep.adapters) + 1


def test_endpoint_config_has_role_and_a_variant_without_model_name(dev) -> None:
    t = dev["lora-dev-serving"]
    (cfg,) = t.find_resources("AWS::SageMaker::EndpointConfig").values()
    props = cfg["Properties"]
    assert "ExecutionRoleArn" in props
    # ml.g5 has NVMe instance storage: SageMaker refuses a KmsKeyId there.
    assert "KmsKeyId" not in props
    (variant,) = props["ProductionVariants"]
    assert "ModelName" not in variant
    assert variant["RoutingConfig"] == {"RoutingStrategy": "LEAST_OUTSTANDING_REQUESTS"}
    assert variant["ManagedInstanceScaling"]["Status"] == "ENABLED"
    t.resource_count_is("AWS::ApplicationAutoScaling::ScalableTarget", 1)


def test_adapter_shards_use_plain_string_names_not_exports(dev) -> None:
    for name, t in dev.items():
        if "-adapters-" in name:
            assert "Fn::ImportValue" not in str(t.to_json())


def test_shard_assignment_depends_only_on_the_name() -> None:
    names = [f"adapter-{i}" for i in range(200)]
    before = {n: shard_of(n) for n in names}
    after = {n: shard_of(n) for n in [*names, "newcomer"]}
    assert all(before[n] == after[n] for n in names)
    assert set(before.values()) <= set(range(SHARD_COUNT))


def test_bad_catalog_entry_fails_synth_with_its_name(tmp_path: Path) -> None:
    data = yaml.safe_load(CATALOG_PATH.read_text())
    bad = copy.deepcopy(data)
    bad["adapters"].append(
        {
            "name": "broken-one",
            "version": "1",
            "base": "qwen3-4b",
            "task": "sales_json",
            "rank": 999,
        }
    )
    path = tmp_path / "adapters.yaml"
    path.write_text(yaml.safe_dump(bad))
    proc = subprocess.run(
        [sys.executable, "app.py"],
        cwd=ROOT,
        env={
            **os.environ,
            "CDK_CONTEXT_JSON": f'{{"env": "dev", "catalog": "{path}"}}',
            "CDK_OUTDIR": str(tmp_path / "out"),
        },
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 1
    assert "adapter 'broken-one'" in proc.stderr and "field 'rank'" in proc.stderr


def test_the_local_environment_is_not_synthesized(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "app.py"],
        cwd=ROOT,
        env={**os.environ, "CDK_CONTEXT_JSON": '{"env": "local"}', "CDK_OUTDIR": str(tmp_path)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 1 and "deployable: false" in proc.stderr
