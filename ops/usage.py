"""``make usage ENV=NAME [SINCE=7d] [CSV=usage.csv]`` (``python -m ops.usage``): who used what, per
tenant and adapter, from the router's usage records (``lambda_proxy.usage``).

The records are the router's ``"message": "usage"`` log lines in its function's log group;
CloudWatch Logs Insights aggregates them (``StartQuery``, then ``GetQueryResults`` until the
query completes). Per tenant and adapter: requests, tokens in and out, the share answered from
the cache, p50 and p99 latency, and an estimated cost share.

The cost share is an estimate: the endpoint's instance count now (``DescribeEndpoint``) times the
window's hours is the instance-hours, at the environment file's ``cost.instance_hour_usd``,
split by each row's share of prompt and generated tokens. It leaves out scaling within the
window, the router, the cache and the network; it is what FinOps asked for, a fair split of the
endpoint among its users, not an invoice.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from datetime import timedelta
from typing import Any

from config import Deployment, load_deployment
from config.aws import AwsEnv
from contracts.usage import Row, render, to_csv

QUERY = """fields @timestamp
| filter message = "usage"
| stats count(*) as requests, sum(usage.input_tokens) as tokens_in,
  sum(usage.output_tokens) as tokens_out, avg(usage.cache_hit) as cache_hit_share,
  pct(usage.latency_ms, 50) as p50_ms, pct(usage.latency_ms, 99) as p99_ms
  by usage.tenant as tenant, usage.adapter as adapter
| sort tokens_out desc
| limit 10000"""
_SINCE = re.compile(r"^(\d+)([dhm])$")


class UsageError(RuntimeError):
    """The usage report could not be made; the message says why."""


def since(text: str) -> timedelta:
    """``7d``, ``12h``, ``30m``."""
    m = _SINCE.match(text)
    if m is None:
        raise UsageError(f"--since {text!r}: write a number and d, h or m (7d, 12h, 30m)")
    unit = {"d": "days", "h": "hours", "m": "minutes"}[m.group(2)]
    return timedelta(**{unit: int(m.group(1))})


def log_group(dep: Deployment) -> str:
    """The router function's log group (``infra.router``: ``/aws/lambda/PREFIX-router``)."""
    return f"/aws/lambda/{dep.env.prefix}-router"


def query(logs: Any, group: str, window: timedelta, *, now: float, poll_s: float = 1.0) -> list:
    """Logs Insights' rows for ``QUERY`` over the window, as it answers them."""
    qid = logs.start_query(
        logGroupName=group,
        startTime=int(now - window.total_seconds()),
        endTime=int(now),
        queryString=QUERY,
    )["queryId"]
    while True:
        answer = logs.get_query_results(queryId=qid)
        status = answer["status"]
        if status == "Complete":
            return answer["results"]
        if status in ("Failed", "Cancelled", "Timeout", "Unknown"):
            raise UsageError(f"the Logs Insights query ended {status}")
        time.sleep(poll_s)


def rows_of(results: list[list[dict[str, str]]]) -> list[Row]:
    """GetQueryResults' rows (lists of ``{field, value}``) as ``Row``s."""
    out = []
    for result in results:
        f = {c["field"]: c.get("value", "") for c in result}
        out.append(
            Row(
                tenant=f.get("tenant", "?"),
                adapter=f.get("adapter", "?"),
                requests=int(float(f.get("requests") or 0)),
                tokens_in=int(float(f.get("tokens_in") or 0)),
                tokens_out=int(float(f.get("tokens_out") or 0)),
                cache_hit_share=float(f.get("cache_hit_share") or 0.0),
                p50_ms=float(f.get("p50_ms") or 0.0),
                p99_ms=float(f.get("p99_ms") or 0.0),
            )
        )
    return out


def with_cost(rows: list[Row], instance_hours: float, price: float | None) -> None:
    """Each row's share of the instance-hours' cost by its share of tokens."""
    if price is None:
        return
    total = instance_hours * price
    tokens = sum(r.tokens_in + r.tokens_out for r in rows)
    for r in rows:
        r.cost_usd = total * (r.tokens_in + r.tokens_out) / tokens if tokens else 0.0


def instance_hours(sagemaker: Any, endpoint: str, window: timedelta) -> float:
    """The endpoint's current instance count times the window's hours (an estimate)."""
    described = sagemaker.describe_endpoint(EndpointName=endpoint)
    count = sum(v.get("CurrentInstanceCount", 0) for v in described["ProductionVariants"])
    return count * window.total_seconds() / 3600


def report(aws: AwsEnv, dep: Deployment, window: timedelta, *, now: float) -> list[Row]:
    rows = rows_of(query(aws.client("logs"), log_group(dep), window, now=now))
    hours = instance_hours(aws.client("sagemaker"), dep.endpoint_name, window)
    with_cost(rows, hours, dep.env.cost.instance_hour_usd)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ops.usage", description=__doc__)
    ap.add_argument("--env", required=True)
    ap.add_argument("--since", default="7d", help="the window: 7d, 12h, 30m (default 7d)")
    ap.add_argument("--csv", help="also write the rows to this CSV file")
    args = ap.parse_args(argv)
    try:
        dep = load_deployment(args.env)
        window = since(args.since)
        print(f"usage of {dep.env.prefix} over the last {args.since}, by tenant and adapter")
        rows = report(AwsEnv(dep.env), dep, window, now=time.time())
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(render(rows))
    if dep.env.cost.instance_hour_usd is None:
        print(f"no cost: set cost.instance_hour_usd in config/environments/{args.env}.yaml")
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            f.write(to_csv(rows))
        print(f"wrote {args.csv}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
