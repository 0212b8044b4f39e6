"""API Gateway's account-wide CloudWatch role lives in one retained stack shared by environments."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infra.account import ACCOUNT_STACK
from tests.infra.conftest import resources

pytestmark = pytest.mark.synth


def test_only_the_account_stack_sets_the_api_gateway_account_role(assemblies) -> None:
    for a in assemblies.values():
        holders = [s for s, t in a.templates.items() if resources(t, "AWS::ApiGateway::Account")]
        assert holders == [ACCOUNT_STACK], a.env
        (router,) = [t for s, t in a.templates.items() if s.endswith("-router")]
        roles = resources(router, "AWS::IAM::Role").values()
        assert all("apigateway.amazonaws.com" not in json.dumps(r) for r in roles), a.env
    # The same template from every environment, so deploying it again from another is a no-op.
    bodies = {json.dumps(a.templates[ACCOUNT_STACK], sort_keys=True) for a in assemblies.values()}
    assert len(bodies) == 1


def test_the_account_stack_is_retained_and_termination_protected(assemblies) -> None:
    a = assemblies["dev"]
    template = a.templates[ACCOUNT_STACK]
    for resource in template["Resources"].values():
        if resource["Type"] in ("AWS::ApiGateway::Account", "AWS::IAM::Role"):
            assert resource["DeletionPolicy"] == "Retain"
    manifest = json.loads((Path(a.outdir) / "manifest.json").read_text())
    assert manifest["artifacts"][ACCOUNT_STACK]["properties"]["terminationProtection"] is True
