"""The router's CloudWatch namespace: written by the router's metrics (Powertools' EMF), read by
the environment's alarms and dashboard (``infra/observability.py``). Environments share it and
differ by their ``service`` dimension (``config.layout.router_service``)."""

NAMESPACE = "LoraFleet"
