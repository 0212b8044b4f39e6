"""A canary in the synth: its own adapter component beside an untouched stable one, the router
allowed to invoke it, an alarm on the router's rollback, and a rollout that replaces nothing
stateful whether the canary is added, promoted or removed."""

from __future__ import annotations

import pytest

from infra.adapters import shard_of
from ops.replacements import check, render
from tests.infra.conftest import policy_arns, resolve, resources

pytestmark = pytest.mark.synth

SHA = "e" * 64


def _add_canary(cat: dict) -> None:
    cat["adapters"][0]["canary"] = {"version": "1.1.0", "weight": 10, "sha256": SHA}


def _promoted(cat: dict) -> None:
    a = cat["adapters"][0]
    a["previous"] = {
        "version": a["version"],
        **({"sha256": a["sha256"]} if a.get("sha256") else {}),
    }
    a.update(version="1.1.0", sha256=SHA)


def _components(templates: dict, name: str) -> dict[str, dict]:
    shard = templates[f"lora-dev-adapters-{shard_of(name):02d}"]
    return {
        c["Properties"]["InferenceComponentName"]: c["Properties"]
        for c in resources(shard, "AWS::SageMaker::InferenceComponent").values()
    }


def _artifact(props: dict) -> str:
    return resolve(props["Specification"]["Container"]["ArtifactUrl"])


def test_a_canary_is_a_component_of_its_own_and_the_stable_one_is_untouched(
    dev_templates, synth_edited
) -> None:
    import yaml

    from config import CATALOG_PATH

    name = yaml.safe_load(CATALOG_PATH.read_text())["adapters"][0]["name"]
    after = synth_edited(catalog=_add_canary)
    before_ics, after_ics = _components(dev_templates, name), _components(after, name)
    stable, canary = f"lora-dev-{name}", f"lora-dev-{name}-canary"
    assert after_ics[stable] == before_ics[stable], "the stable component must not change"
    assert _artifact(after_ics[canary]).endswith(f"/adapters/{name}/1.1.0/adapter.tar.gz")
    assert after_ics[canary]["Specification"]["BaseInferenceComponentName"] == "lora-dev-base"
    # The router may invoke the canary's component, and is told to route to it.
    arns = policy_arns(after["lora-dev-router"])
    assert f"arn:aws:sagemaker:us-east-1:123456789012:inference-component/{canary}" in arns
    # The rollback the router makes on its own pages whoever owns the adapters.
    alarms = resources(after["lora-dev-observability"], "AWS::CloudWatch::Alarm")
    assert any(
        a["Properties"].get("MetricName") == "CanaryRollback"
        and a["Properties"].get("AlarmActions")
        for a in alarms.values()
    )


@pytest.mark.parametrize("step", ["added", "promoted", "removed"])
def test_each_step_of_a_canary_passes_the_replacement_check(
    dev_templates, synth_edited, step
) -> None:
    with_canary = synth_edited(catalog=_add_canary)
    before, after = {
        "added": (dev_templates, with_canary),
        "promoted": (with_canary, synth_edited(catalog=_promoted)),
        "removed": (with_canary, dev_templates),
    }[step]
    found, bad = check(before, after, frozenset())
    assert not bad, render("dev", found, bad)
    # Components come and go, or change in place: none is replaced.
    assert not [r for r in found if r.type == "AWS::SageMaker::InferenceComponent"], render(
        "dev", found, bad
    )
