"""Deterministic-response cache in Redis / Valkey (ElastiCache over TLS with an AUTH token).

Only deterministic requests are cached. The key hashes the adapter name and version, the base
revision and the normalized request, so a new adapter version or base revision never serves an
old answer. A cache failure never fails a request: it is bypassed, logged and counted.
"""

from __future__ import annotations

import hashlib
import json
import logging
from typing import Any

import redis

log = logging.getLogger(__name__)


def adapter_prefix(adapter: str) -> str:
    """Every cached answer of one adapter starts with this (to drop them all at once)."""
    return f"lora:v1:{adapter}:"


def cache_key(
    adapter: str, version: str, base_revision: str, request: dict[str, Any], scope: str = "*"
) -> str:
    """``scope`` is who may see the answer: an account-qualified tenant, or ``*`` (shared)."""
    normalized = json.dumps(request, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    digest = hashlib.sha256(
        f"{adapter}\0{version}\0{base_revision}\0{scope}\0{normalized}".encode()
    ).hexdigest()
    return adapter_prefix(adapter) + digest


class ResponseCache:
    def __init__(self, client: redis.Redis | None, ttl_s: int) -> None:
        self.client = client
        self.ttl_s = ttl_s
        self.failures = 0

    @classmethod
    def from_url(cls, url: str | None, ttl_s: int, password: str | None = None) -> ResponseCache:
        if not url:
            return cls(None, ttl_s)
        client = redis.Redis.from_url(
            url, password=password, socket_timeout=0.25, socket_connect_timeout=0.25,
            retry_on_timeout=False, health_check_interval=30,
        )  # fmt: skip
        return cls(client, ttl_s)

    def get(self, key: str) -> dict[str, Any] | None:
        """The cached answer; raises CacheUnavailableError when the cache cannot be read."""
        if self.client is None:
            raise CacheUnavailableError("no cache configured")
        try:
            raw = self.client.get(key)
        except redis.RedisError as exc:
            self.failures += 1
            raise CacheUnavailableError(str(exc)) from exc
        if raw is None:
            return None
        try:
            value = json.loads(raw)
        except (ValueError, TypeError, RecursionError):
            return None  # a corrupt entry is a miss; it is overwritten below
        return value if isinstance(value, dict) else None  # so is one that is not an object

    def put(self, key: str, value: dict[str, Any]) -> bool:
        if self.client is None:
            return False
        try:
            self.client.set(key, json.dumps(value), ex=self.ttl_s)
            return True
        except redis.RedisError as exc:
            self.failures += 1
            log.warning("cache write failed: %s", exc)
            return False


class CacheUnavailableError(Exception):
    pass
