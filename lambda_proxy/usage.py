"""One usage record per served request: who used which adapter version, through which door, with
what outcome, tokens and latency. FinOps reads them back (``make usage``, ``python -m local
usage``).

Each record is written twice:

* a structured log line (``"message": "usage"`` with a ``usage`` object): the full record, the
  caller's whole identity included, which CloudWatch Logs Insights aggregates per tenant and
  adapter (``ops.usage``);
* CloudWatch embedded metrics (EMF): ``Requests``, ``InputTokens`` and ``OutputTokens`` with
  the dimensions ``service`` and ``tenant``. Every distinct dimension value is a custom metric
  that CloudWatch bills monthly ("whenever you add a unique name/value pair to one of your
  metrics, you are creating a new variation of that metric", CloudWatch API reference,
  Dimension), so the values are bounded by the catalog's tenants: ``tenant`` is the catalog's
  own tenant name when the adapter's ``allow.tenants`` lists the caller's tenant (ASCII, as
  CloudWatch requires of a dimension value), else ``other`` (callers admitted by a wildcard or
  a principal ARN could be any number). There is no adapter dimension: it would cost three
  metrics per adapter at a thousand adapters, and the per-adapter and tenant-by-adapter
  breakdowns come from the log lines (``make usage``, the dashboard's Logs Insights panels),
  where cardinality costs nothing extra; SageMaker publishes each component's invocations and
  latency itself. ``make check`` prints the metric count (``config.costs``).

Requests refused before they reach the model (identity, validation) are not usage; a request
refused by its quota or failed by SageMaker is, with its status.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from aws_lambda_powertools.metrics import EphemeralMetrics, MetricUnit

from contracts.routing import Route
from contracts.usage import USAGE_METRIC_NAMES, Usage
from lambda_proxy.auth import Caller, qualified
from lambda_proxy.telemetry import NAMESPACE, SERVICE, logger

#: The tenant dimension's value for a caller the adapter's tenants do not name.
OTHER = "other"
#: The doors a request comes through.
ROUTES = ("native", "openai", "stream")


#: Where else a record goes (the local gateway keeps them for ``python -m local usage``).
SINKS: list[Callable[[dict[str, Any]], None]] = []
#: The usage metrics, per tenant dimension value (``make check`` counts them).
USAGE_METRICS: dict[str, Callable[[Usage], float]] = dict(
    zip(
        USAGE_METRIC_NAMES,
        (lambda u: 1, lambda u: u.input_tokens, lambda u: u.output_tokens),
        strict=True,
    )
)


def tenant_dimension(caller: Caller | None, route: Route | None) -> str:
    """The caller's tenant when the route's ``tenants`` names it explicitly, else ``other``."""
    if caller is None or caller.tenant is None or route is None:
        return OTHER
    for entry in route.tenants:
        q = qualified(str(entry), caller.own_account)
        if q is not None and q == caller.tenant and caller.tenant.isascii():
            return caller.tenant
    return OTHER


def of_answer(
    caller: Caller | None,
    route: Route | None,
    adapter: str,
    answer: dict[str, Any],
    kind: str,
    status: int = 200,
) -> Usage:
    """The record of a native answer body (``service.answer``)."""
    usage = answer.get("usage") or {}
    artifact = answer.get("artifact") or {}
    return Usage(
        tenant=_who(caller),
        tenant_dimension=tenant_dimension(caller, route),
        adapter=adapter,
        version=answer.get("version"),
        weights_sha256=artifact.get("sha256") if isinstance(artifact, dict) else None,
        route=kind,
        status=status,
        cache_hit=1 if answer.get("cache") == "hit" else 0,
        input_tokens=int(usage.get("input_tokens") or 0),
        output_tokens=int(usage.get("output_tokens") or 0),
        latency_ms=float((answer.get("timings_ms") or {}).get("total") or 0.0),
        request_id=answer.get("request_id"),
    )


def of_failure(
    caller: Caller | None,
    route: Route | None,
    adapter: str,
    kind: str,
    status: int,
    latency_ms: float,
    request_id: str | None,
) -> Usage:
    """The record of a request that reached its quota or the model and was not answered."""
    return Usage(
        tenant=_who(caller),
        tenant_dimension=tenant_dimension(caller, route),
        adapter=adapter,
        version=route.version if route is not None else None,
        weights_sha256=route.weights_sha256 if route is not None else None,
        route=kind,
        status=status,
        cache_hit=0,
        input_tokens=0,
        output_tokens=0,
        latency_ms=round(latency_ms, 3),
        request_id=request_id,
    )


def _who(caller: Caller | None) -> str:
    if caller is None:
        return "anonymous"
    return caller.tenant or caller.arn


def record(u: Usage) -> None:
    """The log line, the two bounded metric sets, and the sinks. Never raises: accounting must
    not fail a request that was served."""
    body = asdict(u)
    try:
        logger.info("usage", extra={"usage": body})
        m = EphemeralMetrics(namespace=NAMESPACE, service=SERVICE)
        m.add_dimension(name="tenant", value=u.tenant_dimension)
        for name, value in USAGE_METRICS.items():
            m.add_metric(name=name, unit=MetricUnit.Count, value=value(u))
        m.flush_metrics()
        for sink in SINKS:
            sink(body)
    except Exception:
        logger.exception("usage record failed", extra={"request_id": u.request_id})
