"""Per-tenant quotas: requests and tokens per minute, per tenant and optionally per adapter.

Counted in Redis in fixed one-minute windows by one Lua script, so the check and the increments
of every limit that applies happen atomically: under any concurrency a limit of N admits exactly
N requests in a window. A request's token cost is its ``max_new_tokens`` (what it may generate),
reserved when it is admitted. When Redis cannot be reached the request goes through and the
outage is counted: quotas protect capacity, they must not become an outage of their own.
Written here because no library the router already ships does atomic multi-limit windows.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import redis

WINDOW_S = 60
#: KEYS: per limit, a counter key. ARGV: per limit, its maximum and this request's cost, then
#: the keys' lifetime in ms. Refuses (0) without counting when any limit would be exceeded.
_SCRIPT = """
local n = #KEYS
for i = 1, n do
  local used = tonumber(redis.call('GET', KEYS[i]) or '0')
  if used + tonumber(ARGV[2 * i]) > tonumber(ARGV[2 * i - 1]) then
    return 0
  end
end
local ttl = tonumber(ARGV[2 * n + 1])
for i = 1, n do
  redis.call('INCRBY', KEYS[i], tonumber(ARGV[2 * i]))
  redis.call('PEXPIRE', KEYS[i], ttl)
end
return 1
"""


@dataclass(frozen=True)
class Limits:
    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None

    @classmethod
    def of(cls, raw: Any) -> Limits | None:
        if not isinstance(raw, dict):
            return None
        return cls(raw.get("requests_per_minute"), raw.get("tokens_per_minute"))


@dataclass(frozen=True)
class Decision:
    allowed: bool
    retry_after_s: int = 0
    enforced: bool = True  # False when Redis could not be asked
    limit: str | None = None


class Quotas:
    def __init__(self, client: redis.Redis | None, tenant_wide: Limits | None) -> None:
        self.client = client
        self.tenant_wide = tenant_wide
        self._script = client.register_script(_SCRIPT) if client is not None else None

    def check(
        self, tenant: str, adapter: str, tokens: int, per_adapter: Limits | None = None,
        now: float | None = None,
    ) -> Decision:  # fmt: skip
        now = time.time() if now is None else now
        window = int(now // WINDOW_S)
        keys: list[str] = []
        args: list[int] = []
        names: list[str] = []
        for scope, limits in (("*", self.tenant_wide), (adapter, per_adapter)):
            if limits is None:
                continue
            for kind, limit, cost in (("req", limits.requests_per_minute, 1),
                                      ("tok", limits.tokens_per_minute, tokens)):  # fmt: skip
                if limit is not None:
                    keys.append(f"lora:quota:v1:{tenant}:{scope}:{window}:{kind}")
                    args += [int(limit), int(cost)]
                    names.append(f"{'requests' if kind == 'req' else 'tokens'} per minute"
                                 + ("" if scope == "*" else f" on {adapter}"))  # fmt: skip
        if not keys:
            return Decision(True)
        if self._script is None:
            return Decision(True, enforced=False)
        try:
            ok = self._script(keys=keys, args=[*args, (WINDOW_S + 5) * 1000])
        except redis.RedisError:
            return Decision(True, enforced=False)
        if ok:
            return Decision(True)
        retry = max(1, math.ceil((window + 1) * WINDOW_S - now))
        return Decision(False, retry_after_s=retry, limit=", ".join(names))
