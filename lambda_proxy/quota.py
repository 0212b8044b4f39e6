"""Per-tenant quotas: requests and tokens per minute, per tenant and optionally per adapter.

Each limit is a token bucket (capacity: the per-minute limit; refilled at that rate), kept in
Redis and checked by one Lua script, so the check and the debits of every limit that applies
happen atomically: under any concurrency a full bucket of N admits exactly N requests, and no
window boundary lets twice the limit through the way fixed one-minute windows did. A request's
token cost is its ``max_new_tokens`` (what it may generate, reserved when it is admitted) plus
an estimate of its prompt tokens (``prompt_tokens_estimate``: an upper bound per character
class, ``contracts.tokens``; the router has no tokenizer, and the estimate is labelled as one
wherever it is shown).

A cost above a limit can never be admitted, so it is refused outright (``Decision.never``)
instead of answering 429 forever. When Redis cannot be reached, or failed within the last
``BREAKER_S`` seconds (a hanging Redis would otherwise add its timeout to every request), the
same limits are applied by an in-process bucket per tenant (``LocalBuckets``): per execution
environment rather than across them, which is weaker, but a tenant can no longer take every
environment's capacity while Redis is away. Written here because no library the router already
ships does atomic multi-limit buckets in Redis.
"""

from __future__ import annotations

import collections
import math
import threading
import time
from dataclasses import dataclass

import redis

from contracts.routing import QuotaLimits
from contracts.tokens import chat_tokens_bound
from lambda_proxy import keys

#: The limits are per minute; a bucket refills its capacity over this many seconds.
WINDOW_S = 60
#: After a Redis failure, Redis is not asked again for this long (a circuit breaker).
BREAKER_S = 5.0

#: KEYS: per limit, a bucket (a hash of ``level`` and ``ts``, ms). ARGV: per limit, its capacity
#: and this request's cost, then now (ms) and the refill window (ms). Returns ``{0, 0}`` when
#: admitted (every bucket debited), else the ms until the emptiest bucket holds the cost and
#: that bucket's index (none debited). A bucket stamped later than ``now`` (another clock) keeps
#: its stamp: time never runs backwards for it.
_SCRIPT = """
local n = #KEYS
local now = tonumber(ARGV[2 * n + 1])
local window = tonumber(ARGV[2 * n + 2])
local levels, stamps, wait, worst = {}, {}, 0, 0
for i = 1, n do
  local cap, cost = tonumber(ARGV[2 * i - 1]), tonumber(ARGV[2 * i])
  local state = redis.call('HMGET', KEYS[i], 'level', 'ts')
  local level, ts = tonumber(state[1]), tonumber(state[2])
  if level == nil or ts == nil then
    level, ts = cap, now
  elseif now > ts then
    level = math.min(cap, level + (now - ts) * cap / window)
    ts = now
  end
  levels[i], stamps[i] = level, ts
  if level < cost then
    local need = math.ceil((cost - level) * window / cap)
    if need > wait then
      wait, worst = need, i
    end
  end
end
if wait > 0 then
  return {wait, worst}
end
for i = 1, n do
  redis.call('HSET', KEYS[i], 'level', tostring(levels[i] - tonumber(ARGV[2 * i])),
             'ts', tostring(stamps[i]))
  redis.call('PEXPIRE', KEYS[i], window * 2)
end
return {0, 0}
"""


@dataclass(frozen=True)
class Limits:
    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None

    @classmethod
    def of(cls, quota: QuotaLimits | None) -> Limits | None:
        """An entry's own limits (its route's ``quota``), when it has any."""
        if quota is None:
            return None
        return cls(quota.requests_per_minute, quota.tokens_per_minute)


@dataclass(frozen=True)
class Decision:
    allowed: bool
    retry_after_s: int = 0
    enforced: bool = True  # False when Redis could not be asked (the fallback decided)
    limit: str | None = None
    #: The request costs more than a limit holds: no retry can ever admit it.
    never: bool = False


def prompt_tokens_estimate(
    inputs: str | None, messages: list[str] | None = None, overhead: int = 0
) -> int:
    """An estimate of a prompt's tokens for the token quota (no tokenizer in the router), at
    or above what the base's tokenizer counts (``contracts.tokens``): a plain ``inputs`` is one
    user turn; ``overhead`` is what the container adds (the adapter's system instruction and
    the answer's opening, ``Route.prompt_overhead``)."""
    if inputs is not None:
        return chat_tokens_bound([inputs]) + overhead
    return chat_tokens_bound(messages or []) + overhead


@dataclass(frozen=True)
class _Bucket:
    key: str
    capacity: int
    cost: int
    name: str


class LocalBuckets:
    """The Lua script's buckets in this process: the fallback while Redis is away."""

    #: Buckets kept; past it the least recently used go (a full bucket is what a forgotten one
    #: becomes, so dropping an idle tenant's bucket changes nothing for it).
    MAX_BUCKETS = 100_000

    def __init__(self) -> None:
        self._state: collections.OrderedDict[str, tuple[float, float]] = collections.OrderedDict()
        self._lock = threading.Lock()

    def debit(self, buckets: list[_Bucket], now: float) -> None:
        """Spend what Redis admitted here as well, so that the fallback starts where this
        execution environment's tenant stands: a fresh bucket at a Redis blip would give the
        tenant its limit again within the same minute."""
        with self._lock:
            for b in buckets:
                level, ts = self._state.get(b.key, (float(b.capacity), now))
                if now > ts:
                    level, ts = min(b.capacity, level + (now - ts) * b.capacity / WINDOW_S), now
                self._state[b.key] = (max(0.0, level - b.cost), ts)
                self._state.move_to_end(b.key)
            while len(self._state) > self.MAX_BUCKETS:
                self._state.popitem(last=False)

    def take(self, buckets: list[_Bucket], now: float) -> tuple[float, int]:
        """``(0, -1)`` when admitted (all debited), else the seconds until it would be and the
        index of the bucket that decides it."""
        with self._lock:
            states, wait, worst = [], 0.0, -1
            for i, b in enumerate(buckets):
                level, ts = self._state.get(b.key, (float(b.capacity), now))
                if now > ts:
                    level, ts = min(b.capacity, level + (now - ts) * b.capacity / WINDOW_S), now
                states.append((level, ts))
                if level < b.cost and (need := (b.cost - level) * WINDOW_S / b.capacity) > wait:
                    wait, worst = need, i
            for b in buckets:
                if b.key in self._state:
                    self._state.move_to_end(b.key)
            if wait > 0:
                return wait, worst
            for b, (level, ts) in zip(buckets, states, strict=True):
                self._state[b.key] = (level - b.cost, ts)
                self._state.move_to_end(b.key)
            while len(self._state) > self.MAX_BUCKETS:
                self._state.popitem(last=False)
            return 0.0, -1


class Quotas:
    def __init__(self, client: redis.Redis | None, tenant_wide: Limits | None) -> None:
        self.tenant_wide = tenant_wide
        # A client that runs no scripts (the local platform's in-process cache, when no Redis
        # answers) leaves the in-process buckets in charge.
        register = getattr(client, "register_script", None)
        self._script = register(_SCRIPT) if register is not None else None
        self.fallback = LocalBuckets()
        #: ``time.monotonic()`` until which Redis is not asked (the breaker is open).
        self._skip_until = 0.0

    def check(
        self,
        tenant: str,
        adapter: str,
        tokens: int,
        per_adapter: Limits | None = None,
        now: float | None = None,
    ) -> Decision:
        """``tokens``: the request's whole token cost (new tokens plus the prompt estimate)."""
        now = time.time() if now is None else now
        buckets = self._buckets(tenant, adapter, tokens, per_adapter)
        if not buckets:
            return Decision(True)
        if over := [b for b in buckets if b.cost > b.capacity]:
            return Decision(False, limit=", ".join(b.name for b in over), never=True)
        asked = self._ask_redis(buckets, now)
        enforced = asked is not None
        wait_s, worst = asked if asked is not None else self.fallback.take(buckets, now)
        if wait_s <= 0:
            if enforced:
                self.fallback.debit(buckets, now)
            return Decision(True, enforced=enforced)
        limit = buckets[worst].name  # the limit that keeps it waiting longest
        return Decision(False, max(1, math.ceil(wait_s)), enforced=enforced, limit=limit)

    def _buckets(
        self, tenant: str, adapter: str, tokens: int, per_adapter: Limits | None
    ) -> list[_Bucket]:
        out = []
        for scope, limits in (("*", self.tenant_wide), (adapter, per_adapter)):
            if limits is None:
                continue
            for kind, limit, cost in (
                ("req", limits.requests_per_minute, 1),
                ("tok", limits.tokens_per_minute, tokens),
            ):
                if limit is not None:
                    name = f"{'requests' if kind == 'req' else 'tokens'} per minute" + (
                        "" if scope == "*" else f" on {adapter}"
                    )
                    key = keys.quota_bucket(tenant, scope, kind)
                    out.append(_Bucket(key, int(limit), int(cost), f"{limit} {name}"))
        return out

    def _ask_redis(self, buckets: list[_Bucket], now: float) -> tuple[float, int] | None:
        """Seconds to wait (0: admitted) and the deciding bucket's index, or None when Redis
        could not be asked."""
        if self._script is None or time.monotonic() < self._skip_until:
            return None
        args: list[int] = []
        for b in buckets:
            args += [b.capacity, b.cost]
        try:
            keys = [b.key for b in buckets]
            wait_ms, worst = self._script(keys=keys, args=[*args, int(now * 1000), WINDOW_S * 1000])
        except redis.RedisError:
            self._skip_until = time.monotonic() + BREAKER_S
            return None
        return int(wait_ms) / 1000, int(worst) - 1
