"""Every adapter shard is always synthesized, so removing an adapter deletes its component."""

from __future__ import annotations

import pytest

from infra.adapters import SHARD_COUNT, shard_of
from tests.infra.conftest import resources

pytestmark = pytest.mark.synth


def test_removing_the_last_adapter_of_a_shard_keeps_the_stack_and_drops_the_component(
    dev_templates, synth_edited
) -> None:
    names = {}

    def drop_first(cat: dict) -> None:
        names["gone"] = cat["adapters"][0]["name"]
        # Keep only adapters of other shards, so the removed one's shard ends up empty.
        shard = shard_of(names["gone"])
        cat["adapters"] = [a for a in cat["adapters"] if shard_of(a["name"]) != shard]

    after = synth_edited(catalog=drop_first)
    shard = f"lora-dev-adapters-{shard_of(names['gone']):02d}"
    assert set(after) == set(dev_templates), (
        "a stack left the app: cdk deploy would never delete it"
    )
    assert sum("-adapters-" in s for s in after) == SHARD_COUNT
    before = resources(dev_templates[shard], "AWS::SageMaker::InferenceComponent")
    assert any(
        c["Properties"]["InferenceComponentName"] == f"lora-dev-{names['gone']}"
        for c in before.values()
    )
    assert not resources(after[shard], "AWS::SageMaker::InferenceComponent")
    # An empty shard still has a (costless) resource, as a template must.
    assert resources(after[shard], "AWS::CloudFormation::WaitConditionHandle")
