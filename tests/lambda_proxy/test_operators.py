"""Operators as IAM Identity Center names them: a role with a path (every SSO role) matches its
sessions, a role of the same name in another account does not, and ``make check`` says how
each listed ARN is matched."""

from __future__ import annotations

from tests.lambda_proxy.conftest import call
from tests.lambda_proxy.doors import (
    SSO_ROLE,
    SSO_SESSION,
    FakeSM,
    answer,
    configure,
    ev,
    table,
)


def test_an_sso_operator_listed_by_its_real_arn_is_an_operator(r13):
    routes = {
        "endpoint": "e",
        "base_component": "b",
        "operators": [SSO_ROLE],
        "adapters": {"ops": {"component": "c-ops", "version": "1", "principals": [SSO_ROLE]}},
    }
    configure(r13, routes, FakeSM(answer("ops", "1")))
    status, body = call(ev("/v1/adapters/ops/generate", {"inputs": "x"}, SSO_SESSION))
    assert status == 200, body
    status, body = call(ev("/health", None, SSO_SESSION, "GET"))
    assert status == 200 and body.get("endpoint") == "e", body


def test_a_role_of_the_same_name_in_another_account_is_still_refused(r13):
    routes = table(tenants=[], principals=[SSO_ROLE])
    configure(r13, routes, FakeSM(answer()))
    stranger = "arn:aws:sts::999999999999:assumed-role/AWSReservedSSO_OnCall_abc1/mallory"
    assert call(ev("/v1/adapters/m/generate", {"inputs": "x"}, stranger))[0] == 404


def test_make_check_says_how_each_listed_arn_is_matched(capsys):
    from config.__main__ import _principal_notes
    from config.loader import load_deployment

    dep = load_deployment("dev")
    dep.env.router.operators.append(SSO_ROLE)
    try:
        notes = "\n".join(_principal_notes(dep))
    finally:
        dep.env.router.operators.remove(SSO_ROLE)
    assert "AWSReservedSSO_OnCall_abc1" in notes and "path" in notes and "is ignored" in notes
