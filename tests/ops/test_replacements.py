"""The replacement check: routine changes replace only what CloudFormation can replace; a fixed
name or a stateful resource in a replacement fails, with the resource named."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest

from ops.replacements import check, create_only, render, replacements
from tests.infra.conftest import edited_config, resources

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.synth


def _base(edit):
    def run(cat: dict) -> None:
        edit(cat["base_models"]["qwen3-4b"])

    return run


ROUTINE = {
    "new image tag": {"catalog": _base(lambda b: b["image"].update(tag="0.2.0"))},
    "image digest": {
        "catalog": _base(
            lambda b: b.update(
                image={"repository": b["image"]["repository"], "digest": "sha256:" + "cd" * 32}
            )
        )
    },
    "new base revision": {"catalog": _base(lambda b: b.update(revision="ab" * 20))},
    "adapter version bump": {"catalog": lambda c: c["adapters"][0].update(version="1.0.1")},
    "instance type": {"environment": lambda e: e["serving"].update(instance_type="ml.g5.2xlarge")},
    "OPTION value": {"environment": lambda e: e["serving"].update(max_cpu_loras=48)},
}


def test_the_schemas_know_what_sagemaker_replaces() -> None:
    assert ("ModelName",) in create_only("AWS::SageMaker::Model")
    assert ("PrimaryContainer",) in create_only("AWS::SageMaker::Model")
    assert create_only("AWS::SageMaker::InferenceComponent") == []


@pytest.mark.parametrize("change", list(ROUTINE))
def test_a_routine_change_passes(dev_templates, synth_edited, change) -> None:
    after = synth_edited(**ROUTINE[change])
    assert after != dev_templates, "the change must change the synth"
    found, bad = check(dev_templates, after, frozenset())
    assert not bad, render("dev", found, bad)
    kinds = {r.type for r in found}
    if change in ("new image tag", "image digest", "new base revision", "OPTION value"):
        assert "AWS::SageMaker::Model" in kinds, render("dev", found, bad)
    if change == "instance type":
        assert kinds == {"AWS::SageMaker::EndpointConfig"}, render("dev", found, bad)
    if change == "adapter version bump":
        assert not found, "an adapter's new version is an in-place update of its component"


def _with_model_name(templates: dict) -> dict:
    out = copy.deepcopy(templates)
    (model,) = resources(out["lora-dev-serving"], "AWS::SageMaker::Model").values()
    model["Properties"]["ModelName"] = "lora-dev-model"
    return out


def test_a_planted_fixed_name_fails(dev_templates, synth_edited) -> None:
    after = synth_edited(**ROUTINE["new image tag"])
    found, bad = check(_with_model_name(dev_templates), _with_model_name(after), frozenset())
    assert [(r.type, r.fixed_name) for r, _ in bad] == [("AWS::SageMaker::Model", "lora-dev-model")]
    assert "fixed name 'lora-dev-model'" in render("dev", found, bad)


def test_dropping_a_fixed_name_is_a_replacement_that_works() -> None:
    old = {
        "Resources": {
            "M": {
                "Type": "AWS::SageMaker::Model",
                "Properties": {"ModelName": "m", "PrimaryContainer": {"Image": "a"}},
            }
        }
    }
    new = {
        "Resources": {
            "M": {
                "Type": "AWS::SageMaker::Model",
                "Properties": {"PrimaryContainer": {"Image": "b"}},
            }
        }
    }
    (r,) = replacements("s", old, new)
    assert r.fixed_name is None and r.problem() is None


def test_a_stateful_replacement_fails_unless_the_environment_allows_it() -> None:
    def repo(name: str) -> dict:
        return {
            "Resources": {
                "Repo": {"Type": "AWS::ECR::Repository", "Properties": {"RepositoryName": name}}
            },
            "Outputs": {},
        }

    _, bad = check({"s": repo("a/x")}, {"s": repo("a/y")}, frozenset())
    assert len(bad) == 1 and "stateful" in bad[0][1]
    _, bad = check({"s": repo("a/x")}, {"s": repo("a/y")}, frozenset({"s/Repo"}))
    assert not bad


def test_replacement_cascades_through_create_only_references() -> None:
    old = {
        "Resources": {
            "Role": {"Type": "AWS::IAM::Role", "Properties": {"RoleName": "r1", "Path": "/"}},
            "M": {
                "Type": "AWS::SageMaker::Model",
                "Properties": {"ExecutionRoleArn": {"Fn::GetAtt": ["Role", "Arn"]}},
            },
        }
    }
    new = copy.deepcopy(old)
    new["Resources"]["Role"]["Properties"]["RoleName"] = "r2"
    assert {r.logical_id for r in replacements("s", old, new)} == {"Role", "M"}


def test_the_command_prints_replacements_and_passes_on_a_routine_change(tmp_path) -> None:
    catalog, environments = edited_config(tmp_path, **ROUTINE["new image tag"])
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ops.replacements",
            "--env",
            "dev",
            "--catalog",
            str(catalog),
            "--environments-dir",
            str(environments),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "AWS::SageMaker::Model) is replaced: PrimaryContainer changed" in proc.stdout
    assert "ok " in proc.stdout


def test_replacing_an_exported_resource_fails_naming_its_importers() -> None:
    """The cache's endpoint address is exported to the router; a
    replaced replication group changes it, which CloudFormation refuses while the router imports
    it, even where the environment allows the cache to be recreated empty."""
    from ops.replacements import snapshots_at

    deployed = snapshots_at("dev", None, ROOT)
    new = copy.deepcopy(deployed)
    cache = new["lora-dev-cache"]
    [(group, body)] = resources(cache, "AWS::ElastiCache::ReplicationGroup").items()
    body["Properties"]["Port"] = body["Properties"].get("Port", 6379) + 1
    allowed = frozenset({f"lora-dev-cache/{group}"})
    found, bad = check(deployed, new, allowed)
    [problem] = [p for r, p in bad if r.logical_id == group]
    assert "imported" in problem and "lora-dev-router" in problem
    assert "ReferenceStrength.BOTH" in problem
    assert "lora-dev-router" in render("dev", found, bad)


def test_replacing_a_resource_nobody_imports_stays_routine() -> None:
    old = {
        "a": {
            "Resources": {
                "Sg": {
                    "Type": "AWS::EC2::SecurityGroup",
                    "Properties": {"GroupDescription": "x", "VpcId": "vpc-1"},
                }
            },
            "Outputs": {"Out": {"Value": {"Ref": "Sg"}, "Export": {"Name": "a:Sg"}}},
        },
        "b": {"Resources": {}},
    }
    new = copy.deepcopy(old)
    new["a"]["Resources"]["Sg"]["Properties"]["GroupDescription"] = "y"
    found, bad = check(old, new, frozenset())
    assert [r.logical_id for r in found] == ["Sg"] and not bad
    old["b"]["Resources"]["Rule"] = {
        "Type": "AWS::EC2::SecurityGroupIngress",
        "Properties": {"GroupId": {"Fn::ImportValue": "a:Sg"}},
    }
    _, bad = check(old, new, frozenset())
    assert len(bad) == 1 and "a:Sg by b" in bad[0][1]
