"""Committed snapshots match the synth; one added catalog entry adds one component and one route."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from config import CATALOG_PATH, load_deployment
from infra.adapters import shard_of
from ops.snapshots import SNAPSHOTS, compare, report, synth

pytestmark = pytest.mark.synth


@pytest.mark.parametrize("env", ["dev", "staging", "prod"])
def test_synth_matches_the_committed_snapshot(assemblies, env: str) -> None:
    a = assemblies[env]
    cmp = compare(env, a.templates)
    assert cmp.clean, (
        f"templates of {env} differ from infra/snapshots/{env}; review and run `make snapshot`:\n"
        + report(cmp, a.outdir)
    )


def test_the_check_fails_and_prints_the_cdk_diff_when_a_template_changes(
    assemblies, tmp_path: Path
) -> None:
    a = assemblies["dev"]
    shutil.copytree(SNAPSHOTS / "dev", tmp_path / "dev")
    path = tmp_path / "dev" / "lora-dev-network.template.json"
    network = json.loads(path.read_text())
    vpc = next(r for r in network["Resources"].values() if r["Type"] == "AWS::EC2::VPC")
    vpc["Properties"]["CidrBlock"] = "10.99.0.0/16"
    path.write_text(json.dumps(network))
    cmp = compare("dev", a.templates, snapshots=tmp_path)
    assert not cmp.clean and cmp.changed == ["lora-dev-network"]
    text = report(cmp, a.outdir)
    assert "[~] AWS::EC2::VPC" in text
    assert "[-] 10.99.0.0/16" in text and "[+] 10.40.0.0/16" in text


def _resources(templates: dict[str, dict]) -> dict[tuple[str, str], dict]:
    return {
        (stack, rid): res
        for stack, t in templates.items()
        for rid, res in t.get("Resources", {}).items()
    }


def _bundle_table(outdir: Path, template: dict) -> dict:
    """The routing table inside the function's code asset, as it would be uploaded."""
    (fn,) = [r for r in template["Resources"].values() if r["Type"] == "AWS::Lambda::Function"]
    asset = fn["Properties"]["Code"]["S3Key"].removesuffix(".zip")
    table = outdir / f"asset.{asset}" / "lambda_proxy" / "routing_table.json"
    return json.loads(table.read_text())


def _allows(policy: dict) -> list[dict]:
    return [
        s for s in policy["Properties"]["PolicyDocument"]["Statement"] if s["Effect"] == "Allow"
    ]


def test_one_new_catalog_entry_adds_one_component_and_one_route_and_nothing_else(
    assemblies, tmp_path: Path
) -> None:
    data = yaml.safe_load(CATALOG_PATH.read_text())
    entry = {
        "name": "contracts-summary",
        "version": "1.0.0",
        "base": "qwen3-4b",
        "task": "style_transfer",
        "description": "Contract clauses in plain English.",
        "rank": 16,
        "alpha": 32,
        "targets": "attention",
        "allow": {"tenants": ["legal"]},
    }
    data["adapters"].append(entry)
    catalog = tmp_path / "adapters.yaml"
    catalog.write_text(yaml.safe_dump(data, sort_keys=False))
    before = assemblies["dev"].templates
    after = synth("dev", tmp_path / "out", catalog)

    old, new = _resources(before), _resources(after)
    added = sorted(set(new) - set(old))
    removed = sorted(set(old) - set(new))
    changed = sorted(k for k in set(old) & set(new) if old[k] != new[k])

    shard_stack = f"lora-dev-adapters-{shard_of('contracts-summary'):02d}"
    components = [k for k in added if new[k]["Type"] == "AWS::SageMaker::InferenceComponent"]
    assert [new[k]["Properties"]["InferenceComponentName"] for k in components] == [
        "lora-dev-contracts-summary"
    ]
    assert components[0][0] == shard_stack
    # The route travels in the router's code asset: its hash changes, and with it the function's
    # published version (the alias the API calls moves to it). Nothing else may change.
    router_only = {
        ("lora-dev-router", rid)
        for rid, r in after["lora-dev-router"]["Resources"].items()
        if r["Type"] in ("AWS::Lambda::Function", "AWS::Lambda::Version", "AWS::Lambda::Alias")
    }
    old_router = {
        ("lora-dev-router", rid)
        for rid, r in before["lora-dev-router"]["Resources"].items()
        if r["Type"] == "AWS::Lambda::Version"
    }
    # The router's role may invoke the new component by name (and only the adapter components).
    invoke = {
        ("lora-dev-router", rid)
        for rid in after["lora-dev-router"]["Resources"]
        if rid.startswith("RouterInvokePolicy")
    }
    for k in invoke & set(changed):
        (before_statement,) = _allows(old[k])
        (after_statement,) = _allows(new[k])
        grown = [r for r in after_statement["Resource"] if r not in before_statement["Resource"]]
        assert len(grown) == 1 and "lora-dev-contracts-summary" in json.dumps(grown)
    router_only |= invoke
    # Its model package group, where publish registers its versions (Model Registry).
    groups = [k for k in added if new[k]["Type"] == "AWS::SageMaker::ModelPackageGroup"]
    registry_stack = f"lora-dev-registry-{shard_of('contracts-summary'):02d}"
    assert [(k[0], new[k]["Properties"]["ModelPackageGroupName"]) for k in groups] == [
        (registry_stack, "lora-dev-contracts-summary")
    ]
    # The device slots are sized to the catalog's next power of two (config.plan: vLLM mixes at
    # most that many adapters per step): an entry that crosses one, as the 9th of the shipped
    # 8 does, restarts the base once, so its model (and the copy autoscaling sized from its
    # batch) change with it, in the serving stack and nowhere else. Within a power of two
    # nothing of the base changes (tests/config/test_plan.py).
    from config.plan import plan

    slots = (
        plan(load_deployment("dev")).max_loras,
        plan(load_deployment("dev", catalog)).max_loras,
    )
    crossed = len(data["adapters"]) - 1 == 1 << (len(data["adapters"]) - 2).bit_length()
    assert (slots[0] != slots[1]) == crossed, slots
    restart = (
        {
            k
            for k in set(old) | set(new)
            if k[0] == "lora-dev-serving"
            and (new.get(k) or old.get(k))["Type"]
            in (
                "AWS::SageMaker::Model",
                "AWS::SageMaker::InferenceComponent",
                "AWS::ApplicationAutoScaling::ScalingPolicy",
            )
        }
        if crossed
        else set()
    )
    assert set(added) - set(components) - set(groups) <= router_only | restart
    # An empty shard's placeholder goes when its first component arrives.
    placeholder = {
        (stack, rid)
        for stack in (shard_stack, registry_stack)
        for rid, r in before[stack]["Resources"].items()
        if r["Type"] == "AWS::CloudFormation::WaitConditionHandle"
    }
    assert set(removed) <= old_router | placeholder | restart
    assert set(changed) <= router_only | restart
    assert len([k for k in added if new[k]["Type"] == "AWS::Lambda::Version"]) <= 1
    other_stacks = set(before) - {"lora-dev-router", shard_stack, registry_stack}
    kept = {
        k: v
        for k, v in _resources({"s": before[registry_stack]}).items()
        if v["Type"] != "AWS::CloudFormation::WaitConditionHandle"
    }
    assert kept.items() <= _resources({"s": after[registry_stack]}).items(), (
        "the registry shard only gains the group"
    )
    assert all(before[s] == after[s] for s in other_stacks - {"lora-dev-serving"})
    if not crossed:
        assert before["lora-dev-serving"] == after["lora-dev-serving"]
    assert set(after) == set(before), "every shard stack exists, empty or not"

    table_before = _bundle_table(assemblies["dev"].outdir, before["lora-dev-router"])
    table_after = _bundle_table(tmp_path / "out", after["lora-dev-router"])
    assert set(table_after["adapters"]) - set(table_before["adapters"]) == {"contracts-summary"}
    assert table_after["adapters"]["contracts-summary"]["component"] == "lora-dev-contracts-summary"
    assert {k: v for k, v in table_after.items() if k != "adapters"} == {
        k: v for k, v in table_before.items() if k != "adapters"
    }
    assert all(table_after["adapters"][n] == r for n, r in table_before["adapters"].items())
    dep = load_deployment("dev", catalog)
    assert len(dep.adapters) == len(load_deployment("dev").adapters) + 1


def test_snapshots_are_committed_for_every_deployable_environment() -> None:
    for env in ("dev", "staging", "prod"):
        assert list((SNAPSHOTS / env).glob("*.template.json")), env
