"""Router configuration from the function's environment (set by infra at synth)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class RouterSettings:
    routing_table: dict[str, Any]
    max_new_tokens_cap: int = 512
    max_stop_sequences: int = 4
    max_body_bytes: int = 262144
    invoke_deadline_s: float = 55.0
    #: How long a streamed generation may run (API Gateway streams up to 15 minutes).
    stream_deadline_s: float = 120.0
    cache_ttl_s: int = 72 * 3600
    redis_url: str | None = None
    redis_secret_arn: str | None = None
    sagemaker_endpoint_url: str | None = None
    region: str | None = None
    #: Take the tenant from an authorizer's ``tenant`` claim; only where the environment puts
    #: such an authorizer in front of the API (infra sets none, so the IAM identity decides).
    trust_tenant_claim: bool = False
    #: Per-tenant limits across all adapters (a catalog entry may add its own): None = none.
    quota_requests_per_minute: int | None = None
    quota_tokens_per_minute: int | None = None


def _table() -> dict[str, Any]:
    raw = os.environ.get("ROUTING_TABLE_JSON")
    if raw:
        return json.loads(raw)
    path = Path(
        os.environ.get("ROUTING_TABLE_FILE", Path(__file__).with_name("routing_table.json"))
    )
    return json.loads(path.read_text())


@cache
def settings() -> RouterSettings:
    env = os.environ
    return RouterSettings(
        routing_table=_table(),
        max_new_tokens_cap=int(env.get("MAX_NEW_TOKENS_CAP", 512)),
        max_stop_sequences=int(env.get("MAX_STOP_SEQUENCES", 4)),
        max_body_bytes=int(env.get("MAX_BODY_BYTES", 262144)),
        invoke_deadline_s=float(env.get("INVOKE_DEADLINE_S", 55)),
        stream_deadline_s=float(env.get("STREAM_DEADLINE_S", 120)),
        cache_ttl_s=int(float(env.get("CACHE_TTL_HOURS", 72)) * 3600),
        redis_url=env.get("REDIS_URL") or None,
        redis_secret_arn=env.get("REDIS_SECRET_ARN") or None,
        sagemaker_endpoint_url=env.get("SAGEMAKER_ENDPOINT_URL") or None,
        region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or "us-east-1",
        trust_tenant_claim=env.get("TRUST_TENANT_CLAIM", "").lower() in ("1", "true", "yes"),
        quota_requests_per_minute=_int_or_none(env.get("QUOTA_REQUESTS_PER_MINUTE")),
        quota_tokens_per_minute=_int_or_none(env.get("QUOTA_TOKENS_PER_MINUTE")),
    )


def _int_or_none(raw: str | None) -> int | None:
    return int(raw) if raw not in (None, "") else None
