"""The router's Powertools logger, tracer and metrics, shared by its doors and its service.

infra/observability.py alarms on the namespace and service named here.
"""

from __future__ import annotations

import os

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit, single_metric

from contracts.metrics import NAMESPACE

__all__ = ["NAMESPACE", "SERVICE", "count_now", "logger", "metrics", "tracer"]

#: The service is the environment's (``PREFIX-router``, set by infra/router.py in Powertools'
#: own variable): two environments in one account and region must not share a metric identity,
#: or one's alarms would fire on the other's failures.
SERVICE = os.environ.get("POWERTOOLS_SERVICE_NAME") or "lora-router"
logger = Logger(service=SERVICE)
tracer = Tracer(service=SERVICE)
#: The buffered handler's metrics, flushed once per request by its decorator.
metrics = Metrics(namespace=NAMESPACE, service=SERVICE)


def count_now(name: str, value: float = 1, unit: MetricUnit = MetricUnit.Count) -> None:
    """A metric flushed at once, for what happens outside a buffered request (a stream's
    events): it shares no buffer with the request the handler is serving."""
    with single_metric(name=name, unit=unit, value=value, namespace=NAMESPACE) as m:
        m.add_dimension(name="service", value=SERVICE)
