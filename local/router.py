"""The router configured in this process as the deployed function configures itself: the
local gateway's in-process router and each of its execution environments (``local.environments``)
are set up here, the same way."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def redis_client(url: str | None):
    """A Redis client when ``url`` answers PING, else None."""
    if not url:
        return None
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    client = redis.Redis.from_url(
        url, socket_timeout=0.5, socket_connect_timeout=0.5, retry=Retry(NoBackoff(), 0)
    )
    try:
        client.ping()
    except redis.RedisError:
        return None
    return client


def configure_router(
    store: Any,
    *,
    routing_table: Path,
    endpoint_url: str,
    region: str,
    availability: Any,
) -> tuple[Any, Any]:
    """Configure the router in this process as the function configures itself, through the
    same variables infra sets on the Lambda (limits come from the environment file through the
    platform's process environment); the routing table and SageMaker client it built."""
    from contracts.routing import TABLE_FILE_ENV
    from lambda_proxy.cache import ResponseCache
    from lambda_proxy.sagemaker import make_client
    from lambda_proxy.service import Dependencies, configure
    from lambda_proxy.settings import settings

    os.environ[TABLE_FILE_ENV] = str(routing_table)
    os.environ["SAGEMAKER_ENDPOINT_URL"] = endpoint_url
    os.environ["AWS_REGION"] = region
    settings.cache_clear()
    s = settings()
    client = make_client(s.sagemaker_endpoint_url, s.region, s.invoke_deadline_s)
    configure(
        Dependencies(s, ResponseCache(store, s.cache_ttl_s), client, availability=availability)
    )
    return s.routing_table, client


def training_state(state_dir: Path | None, adapter: str) -> tuple[str, str] | None:
    """What the background trainer says of an adapter that is not online (the router's
    ``availability``): queued, training, evaluating, not publishable (with the gate's
    reasons) or failed; None when it is online or the trainer never saw it."""
    from local.trainer import read_status

    if state_dir is None:
        return None
    st = read_status(state_dir).get("adapters", {}).get(adapter) or {}
    state = st.get("state")
    if state in (None, "online", "offline"):
        return None
    return str(state), str(st.get("detail") or "")
