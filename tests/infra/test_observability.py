"""The dashboard's per-tenant panels read the router's usage records where the router writes
them."""

from __future__ import annotations

import json

from infra.observability import TENANT_QUERIES
from tests.infra.conftest import resources


def test_the_dashboard_shows_top_tenants_by_tokens_and_by_errors(dev_templates) -> None:
    [dashboard] = resources(
        dev_templates["lora-dev-observability"], "AWS::CloudWatch::Dashboard"
    ).values()
    body = json.dumps(dashboard["Properties"]["DashboardBody"])
    for title, lines in TENANT_QUERIES.items():
        assert title in body
        assert lines[1] in body, "the query's stats line, as written"
    assert body.count("SOURCE '/aws/lambda/lora-dev-router'") == len(TENANT_QUERIES)


def test_alarm_emails_subscribe_to_the_topic(synth_edited) -> None:
    """The alarms notified a topic with no subscriber and no setting for one."""
    from tests.infra.conftest import resources

    def paged(env: dict) -> None:
        env.setdefault("observability", {})["alarm_emails"] = ["oncall@example.com"]

    after = synth_edited(environment=paged)
    subs = resources(after["lora-dev-observability"], "AWS::SNS::Subscription")
    assert [(s["Properties"]["Protocol"], s["Properties"]["Endpoint"]) for s in subs.values()] == [
        ("email", "oncall@example.com")
    ]
