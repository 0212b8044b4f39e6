"""The router function gets the environment's quotas; the routing table gets an entry's own."""

from __future__ import annotations

import pytest

from tests.infra.conftest import resources

pytestmark = pytest.mark.synth


def test_quotas_reach_the_router(synth_edited) -> None:
    def env(e: dict) -> None:
        e.setdefault("router", {})["quota"] = {"requests_per_minute": 120,
                                               "tokens_per_minute": 40000}  # fmt: skip

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
    route = dep.routing_table()["adapters"][dep.adapters[0].name]
    assert route["quota"] == {"requests_per_minute": 5} and route["cache"] == "off"
    other = dep.routing_table()["adapters"][dep.adapters[1].name]
    assert "quota" not in other and other["cache"] == "tenant"
