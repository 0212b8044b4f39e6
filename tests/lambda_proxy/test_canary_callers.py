"""One tenant whose inputs make a canary fail cannot roll it back for everyone: the 5xx rule
counts distinct callers, capped at the callers the entry admits."""

from __future__ import annotations

from tests.lambda_proxy.conftest import call
from tests.lambda_proxy.doors import (
    ACCOUNT,
    CANARY,
    WHO,
    FakeSM,
    configure,
    container_error,
    ev,
    table,
)


def test_one_tenant_whose_inputs_fail_cannot_roll_back_a_canary_for_everyone(r13):
    # Two tenants the catalog names: two voices (roles a wildcard admits are one).
    fake = FakeSM(error=container_error(500))
    route = table(canary={**CANARY, "min_callers": 2}, tenants=["t", "another-team"])
    configure(r13, route, fake)
    for i in range(10):
        call(ev("/v1/adapters/m/generate", {"inputs": f"bad {i}"}, WHO))
    assert not r13.exists("lora:canary:v1:m:2:off"), "one caller ended the canary"
    other = f"arn:aws:sts::{ACCOUNT}:assumed-role/another-team/s"
    call(ev("/v1/adapters/m/generate", {"inputs": "bad"}, other))
    assert r13.exists("lora:canary:v1:m:2:off"), "two failing callers must roll it back"


def test_the_catalog_caps_min_callers_at_the_callers_an_entry_admits():
    from config.loader import load_deployment

    for dep in (load_deployment("dev"),):
        for a in dep.adapters:
            route = dep.routing_table().adapters[a.name]
            if route.canary is not None and "*" not in a.entry.allow.tenants:
                admitted = len(a.entry.allow.tenants) + len(a.entry.allow.principals)
                assert route.canary.min_callers <= max(1, admitted)
