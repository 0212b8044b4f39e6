"""Deterministic-response cache in Redis / Valkey (ElastiCache over TLS with an AUTH token).

Only deterministic requests are cached. The key hashes the adapter name and version, the
sha256 of its archive and weights as the catalog pins them, the base revision and the normalized
request, so a new adapter version, new weights under the same version, or a new base revision
never serves an old answer. A cache failure never fails a request: it is bypassed, logged and
counted; after one, the cache is not asked for ``BREAKER_S`` seconds, so a hanging Redis costs
one timeout per interval instead of one per request.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

log = logging.getLogger(__name__)

#: After a failure, the cache is bypassed without asking Redis for this long.
BREAKER_S = 5.0


def adapter_prefix(adapter: str) -> str:
    """Every cached answer of one adapter starts with this (to drop them all at once)."""
    return f"lora:v1:{adapter}:"


def cache_key(
    adapter: str,
    version: str,
    base_revision: str,
    request: dict[str, Any],
    scope: str = "*",
    weights: str = "",
) -> str:
    """``scope`` is who may see the answer: an account-qualified tenant, or ``*`` (shared).
    ``weights``: the adapter's pinned digests (archive and weights sha256), when the catalog
    has them."""
    normalized = json.dumps(request, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    digest = hashlib.sha256(
        f"{adapter}\0{version}\0{weights}\0{base_revision}\0{scope}\0{normalized}".encode()
    ).hexdigest()
    return adapter_prefix(adapter) + digest


class ResponseCache:
    def __init__(self, client: redis.Redis | None, ttl_s: int) -> None:
        self.client = client
        self.ttl_s = ttl_s
        self.failures = 0
        self._skip_until = 0.0

    def _failed(self, exc: Exception) -> None:
        self.failures += 1
        self._skip_until = time.monotonic() + BREAKER_S
        log.warning("cache unavailable for %.0f s: %s", BREAKER_S, exc)

    @classmethod
    def from_url(cls, url: str | None, ttl_s: int, password: str | None = None) -> ResponseCache:
        if not url:
            return cls(None, ttl_s)
        # No retries: redis-py 6+ retries a failed connection three times with backoff by
        # default (seconds per request against a dead Redis); the breaker above decides when
        # to ask again instead.
        client = redis.Redis.from_url(
            url,
            password=password,
            socket_timeout=0.25,
            socket_connect_timeout=0.25,
            retry=Retry(NoBackoff(), 0),
            health_check_interval=30,
        )
        return cls(client, ttl_s)

    def get(self, key: str) -> dict[str, Any] | None:
        """The cached answer; raises CacheUnavailableError when the cache cannot be read."""
        if self.client is None:
            raise CacheUnavailableError("no cache configured")
        if time.monotonic() < self._skip_until:
            raise CacheUnavailableError("the cache failed recently; bypassed for a while")
        try:
            raw = self.client.get(key)
        except redis.RedisError as exc:
            self._failed(exc)
            raise CacheUnavailableError(str(exc)) from exc
        if raw is None:
            return None
        try:
            value = json.loads(raw)
        except (ValueError, TypeError, RecursionError):
            return None  # a corrupt entry is a miss; it is overwritten below
        return value if isinstance(value, dict) else None  # so is one that is not an object

    def put(self, key: str, value: dict[str, Any]) -> bool:
        if self.client is None or time.monotonic() < self._skip_until:
            return False
        try:
            self.client.set(key, json.dumps(value), ex=self.ttl_s)
            return True
        except redis.RedisError as exc:
            self._failed(exc)
            return False


class CacheUnavailableError(Exception):
    pass
