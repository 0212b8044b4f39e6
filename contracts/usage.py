"""A usage record's shape, and the per tenant and adapter table every reader of the records
prints: the router writes the records (``lambda_proxy.usage``), ``make usage`` reads them from
CloudWatch Logs Insights (``ops.usage``), ``python -m local usage`` from the local gateway's file
(``local.usage``). Standard library only: every part that ships alone may import it."""

from __future__ import annotations

import csv
import io
import math
from dataclasses import asdict, dataclass, fields
from typing import Any

#: The router's usage metrics (EMF), each with the dimensions service and tenant: one custom
#: metric per name and tenant value (``lambda_proxy.usage``; ``make check`` counts them).
USAGE_METRIC_NAMES = ("Requests", "InputTokens", "OutputTokens")


@dataclass(frozen=True)
class Usage:
    """One served request (``lambda_proxy.usage`` says which requests count)."""

    tenant: str  # the caller's tenant (ACCOUNT:NAME), else its ARN
    tenant_dimension: str  # bounded: a catalog tenant, else "other"
    adapter: str
    version: str | None
    weights_sha256: str | None
    route: str  # native | openai | stream
    status: int
    cache_hit: int  # 1 for an answer from the cache, else 0
    input_tokens: int
    output_tokens: int
    latency_ms: float
    request_id: str | None = None


@dataclass
class Row:
    """One tenant's use of one adapter over a window (``cost_usd`` is filled by ``make usage``
    when the environment states a price)."""

    tenant: str
    adapter: str
    requests: int
    tokens_in: int
    tokens_out: int
    cache_hit_share: float
    p50_ms: float
    p99_ms: float
    cost_usd: float | None = None


def aggregate(records: list[dict[str, Any]]) -> list[Row]:
    """What the Logs Insights query computes, over records at hand (the local platform's)."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in records:
        groups.setdefault((r["tenant"], r["adapter"]), []).append(r)
    out = []
    for (tenant, adapter), rs in groups.items():
        latencies = sorted(float(r["latency_ms"]) for r in rs)
        out.append(
            Row(
                tenant=tenant,
                adapter=adapter,
                requests=len(rs),
                tokens_in=sum(int(r["input_tokens"]) for r in rs),
                tokens_out=sum(int(r["output_tokens"]) for r in rs),
                cache_hit_share=sum(int(r["cache_hit"]) for r in rs) / len(rs),
                p50_ms=_nearest_rank(latencies, 50),
                p99_ms=_nearest_rank(latencies, 99),
            )
        )
    return sorted(out, key=lambda r: (-r.tokens_out, r.tenant, r.adapter))


def _nearest_rank(sorted_values: list[float], pct: float) -> float:
    return sorted_values[max(0, math.ceil(pct / 100 * len(sorted_values)) - 1)]


HEADER = ["tenant", "adapter", "requests", "tokens in", "tokens out", "cache hits", "p50 ms",
          "p99 ms", "cost share USD"]  # fmt: skip


def cells(r: Row) -> list[str]:
    cost = "-" if r.cost_usd is None else f"{r.cost_usd:.2f}"
    return [r.tenant, r.adapter, str(r.requests), str(r.tokens_in), str(r.tokens_out),
            f"{r.cache_hit_share:.0%}", f"{r.p50_ms:.0f}", f"{r.p99_ms:.0f}", cost]  # fmt: skip


def render(rows: list[Row]) -> str:
    table = [HEADER, *(cells(r) for r in rows)]
    widths = [max(len(row[i]) for row in table) for i in range(len(HEADER))]
    return "\n".join(
        "  ".join(
            c.ljust(w) if i < 2 else c.rjust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in table
    )


def to_csv(rows: list[Row]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=[f.name for f in fields(Row)])
    writer.writeheader()
    for r in rows:
        writer.writerow(asdict(r))
    return buf.getvalue()
