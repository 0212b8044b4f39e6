"""``make usage`` against CloudWatch Logs Insights and SageMaker stubbed from their API models
(botocore's Stubber checks every request and answer shape): the table, the cost split, the CSV."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
from datetime import timedelta

import boto3
import pytest
from botocore.stub import Stubber

from config import load_deployment
from config.aws import AwsEnv
from contracts.usage import aggregate, render, to_csv
from ops import usage

NOW = 1_767_225_600.0  # 2026-01-01T00:00:00Z


def _row(**fields: str) -> list[dict[str, str]]:
    return [{"field": k, "value": v} for k, v in fields.items()]


RESULTS = [
    _row(tenant="123456789012:sales-ops", adapter="sales-json", requests="30",
         tokens_in="3000", tokens_out="2880", cache_hit_share="0.1", p50_ms="812.5",
         p99_ms="2400.2"),
    _row(tenant="123456789012:demo", adapter="sales-json", requests="10", tokens_in="400",
         tokens_out="160", cache_hit_share="0.5", p50_ms="300", p99_ms="900"),
    _row(tenant="123456789012:demo", adapter="style-formal", requests="5", tokens_in="300",
         tokens_out="260", cache_hit_share="0", p50_ms="410", p99_ms="700"),
]  # fmt: skip


class _Session:
    def __init__(self, clients: dict) -> None:
        self.clients = clients

    def client(self, name: str, region_name: str | None = None, config=None):
        assert region_name == "us-east-1", f"{name} in {region_name!r}, not dev's region"
        return self.clients[name]


def _stubbed(dep, window: timedelta, *, instances: int = 2):
    logs = boto3.client("logs", region_name="us-east-1", aws_access_key_id="x",
                        aws_secret_access_key="x")  # fmt: skip
    sm = boto3.client("sagemaker", region_name="us-east-1", aws_access_key_id="x",
                      aws_secret_access_key="x")  # fmt: skip
    ls, ss = Stubber(logs), Stubber(sm)
    ls.add_response(
        "start_query",
        {"queryId": "q-1"},
        {
            "logGroupName": "/aws/lambda/lora-dev-router",
            "startTime": int(NOW - window.total_seconds()),
            "endTime": int(NOW),
            "queryString": usage.QUERY,
        },
    )
    ls.add_response("get_query_results", {"status": "Running", "results": []}, {"queryId": "q-1"})
    ls.add_response(
        "get_query_results",
        {"status": "Complete", "results": RESULTS,
         "statistics": {"recordsMatched": 45.0, "recordsScanned": 900.0, "bytesScanned": 1e5}},
        {"queryId": "q-1"},
    )  # fmt: skip
    ss.add_response(
        "describe_endpoint",
        {
            "EndpointName": "lora-dev-endpoint",
            "EndpointArn": "arn:aws:sagemaker:us-east-1:123456789012:endpoint/lora-dev-endpoint",
            "EndpointStatus": "InService",
            "CreationTime": NOW - 86400 * 30,
            "LastModifiedTime": NOW - 86400,
            "ProductionVariants": [
                {"VariantName": "AllTraffic", "CurrentInstanceCount": instances}
            ],
        },
        {"EndpointName": "lora-dev-endpoint"},
    )
    ls.activate()
    ss.activate()
    return _Session({"logs": logs, "sagemaker": sm}), (ls, ss)


def _dep(price: float | None):
    dep = load_deployment("dev")
    cost = dep.env.cost.model_copy(update={"instance_hour_usd": price})
    return dataclasses.replace(dep, env=dep.env.model_copy(update={"cost": cost}))


def test_the_report_splits_the_endpoints_cost_by_tokens(monkeypatch) -> None:
    monkeypatch.setattr(usage.time, "sleep", lambda _s: None)
    window = usage.since("7d")
    session, stubs = _stubbed(_dep(1.5), window)
    rows = usage.report(AwsEnv(_dep(1.5).env, session), _dep(1.5), window, now=NOW)
    for stub in stubs:
        stub.assert_no_pending_responses()
    # 2 instances x 168 h x 1.50 USD = 504 USD, split by 5,880 : 560 : 560 tokens of 7,000.
    assert [round(r.cost_usd, 2) for r in rows] == [423.36, 40.32, 40.32]
    assert rows[0].requests == 30 and rows[0].cache_hit_share == 0.1
    table = render(rows)
    assert table.splitlines()[0].split()[:2] == ["tenant", "adapter"]
    assert "123456789012:sales-ops  sales-json" in table and "423.36" in table
    parsed = list(csv.DictReader(io.StringIO(to_csv(rows))))
    assert parsed[1]["tenant"] == "123456789012:demo" and parsed[1]["tokens_out"] == "160"


def test_without_a_price_there_is_no_cost_column_value(monkeypatch) -> None:
    monkeypatch.setattr(usage.time, "sleep", lambda _s: None)
    window = usage.since("12h")
    session, _ = _stubbed(_dep(None), window)
    rows = usage.report(AwsEnv(_dep(None).env, session), _dep(None), window, now=NOW)
    assert all(r.cost_usd is None for r in rows)
    assert render(rows).splitlines()[1].rstrip().endswith("-")


def test_the_log_group_is_the_router_functions(dev_templates) -> None:
    from tests.infra.conftest import resources

    names = {
        json.dumps(g["Properties"].get("LogGroupName"))
        for g in resources(dev_templates["lora-dev-router"], "AWS::Logs::LogGroup").values()
    }
    assert json.dumps(usage.log_group(load_deployment("dev"))) in names


def test_a_window_is_days_hours_or_minutes() -> None:
    assert usage.since("7d") == timedelta(days=7) and usage.since("30m") == timedelta(minutes=30)
    with pytest.raises(usage.UsageError, match="7d, 12h, 30m"):
        usage.since("a week")


def test_records_at_hand_aggregate_as_the_query_does() -> None:
    records = [
        {"tenant": "t", "adapter": "a", "input_tokens": 10, "output_tokens": 5, "cache_hit": 0,
         "latency_ms": float(ms)}
        for ms in range(1, 101)
    ] + [{"tenant": "u", "adapter": "a", "input_tokens": 1, "output_tokens": 1, "cache_hit": 1,
          "latency_ms": 3.0}]  # fmt: skip
    t, u = aggregate(records)
    assert (t.requests, t.tokens_in, t.tokens_out, t.p50_ms, t.p99_ms) == (100, 1000, 500, 50, 99)
    assert u.cache_hit_share == 1.0
