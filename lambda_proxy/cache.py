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
from redis.credentials import CredentialProvider
from redis.retry import Retry

from lambda_proxy import keys

log = logging.getLogger(__name__)

#: After a failure, the cache is bypassed without asking Redis for this long.
BREAKER_S = 5.0
#: A command's timeout, and a connection's: a connection is made once per execution environment
#: (its first request, or after Redis dropped it) and, to ElastiCache, is a TCP connect, a TLS
#: handshake and AUTH, so it gets longer than a command that rides an open connection.
COMMAND_TIMEOUT_S, CONNECT_TIMEOUT_S = 0.25, 1.0
#: How long an AUTH token read from Secrets Manager is trusted before it is read again.
SECRET_MAX_AGE_S = 3600


class SecretCredentials(CredentialProvider):
    """The AUTH token in Secrets Manager, read when a connection is made (Powertools' cache,
    ``SECRET_MAX_AGE_S``). A token rotated in the meantime fails AUTH once: the connection that
    failed marks the cached token stale (``_RotatingAuth``), and the next one reads the secret
    again instead of using the old token for up to an hour."""

    def __init__(self, secret_arn: str) -> None:
        self.secret_arn = secret_arn
        self._stale = False

    def get_credentials(self) -> tuple[str]:
        from aws_lambda_powertools.utilities.parameters import get_secret

        stale, self._stale = self._stale, False
        return (str(get_secret(self.secret_arn, max_age=SECRET_MAX_AGE_S, force_fetch=stale)),)

    def invalidate(self) -> None:
        self._stale = True


class _RotatingAuth:
    """A connection that tells its credentials when AUTH refused them (written here: redis-py
    reads a credential provider per connection but says nothing back when AUTH fails)."""

    credential_provider: CredentialProvider | None

    def on_connect_check_health(self, *args: Any, **kwargs: Any) -> None:
        # redis-py's connect runs AUTH here (``on_connect`` only calls it).
        try:
            super().on_connect_check_health(*args, **kwargs)  # type: ignore[misc]
        except redis.AuthenticationError:
            if isinstance(self.credential_provider, SecretCredentials):
                self.credential_provider.invalidate()
            raise


class _Connection(_RotatingAuth, redis.Connection):
    pass


class _SSLConnection(_RotatingAuth, redis.SSLConnection):
    pass


def adapter_prefix(adapter: str) -> str:
    """Every cached answer of one adapter starts with this (to drop them all at once)."""
    return keys.cache_prefix(adapter)


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
    def from_url(
        cls,
        url: str | None,
        ttl_s: int,
        credentials: CredentialProvider | None = None,
        **tls: Any,
    ) -> ResponseCache:
        """``credentials``: the AUTH token's provider (``SecretCredentials`` on AWS); ``tls``:
        redis-py's ``ssl_*`` options for a ``rediss://`` URL (a test's own CA; ElastiCache's
        certificate is signed by a CA the system trusts)."""
        if not url:
            return cls(None, ttl_s)
        # No retries: redis-py 6+ retries a failed connection three times with backoff by
        # default (seconds per request against a dead Redis); the breaker above decides when
        # to ask again instead.
        client = redis.Redis.from_url(
            url,
            credential_provider=credentials,
            connection_class=_SSLConnection if url.startswith("rediss://") else _Connection,
            socket_timeout=COMMAND_TIMEOUT_S,
            socket_connect_timeout=CONNECT_TIMEOUT_S,
            retry=Retry(NoBackoff(), 0),
            health_check_interval=30,
            **tls,
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
