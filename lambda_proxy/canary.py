"""Canary routing: which version of an adapter serves a request, and the router's own rollback.

A catalog entry's ``canary`` is a second version with an adapter component of its own; the
stable component is never touched while it runs. The router sends it ``weight`` percent of
new session keys (the ``X-Session-Key`` header, or an OpenAI request's ``user``): a key's
first request is assigned by one atomic counter in Redis (every ``100 / weight``-th new key
goes to the canary, so the share of keys is exact rather than a hash's luck over few keys),
and the assignment is kept, so a retry under the same key never flips versions. A request
without a key is a key of its own.

Every canary answer counts in a window (Redis hash counters, ``HINCRBY``, in the same
script): when its 5xx share over ``min_requests`` or more passes ``max_error_rate``, and the
failures came from ``min_callers`` distinct callers or more (a set of caller digests per
window), the script sets the canary's off switch, and every later request goes to the stable
version. The caller count is there because a container 500 can be the request's doing: one
tenant whose inputs make either version fail must not end a canary for everyone.
The switch is keyed by the canary's version, so a new canary starts clean; only the request
whose count tripped it learns so (it counts ``CanaryRollback`` and logs the reason once).

A canary in shadow mode (``shadow`` set) serves no caller until it is promoted: the choice
answers ``SHADOW`` while its split switch is unset, and ``lambda_proxy.shadow`` judges it on
mirrored requests; its decisions set the same off switch, or the split switch
(``Canaries.settle``).

When Redis is away (or failed within ``BREAKER_S``), the same rules run in this process:
the choice is a hash of the key (the same in every execution environment, so a key still
does not flip between them), and the counters and switch are this process's own. Written by
hand because no library the router ships routes a weighted, sticky canary in Redis.
"""

from __future__ import annotations

import collections
import enum
import hashlib
import threading
import time
from dataclasses import dataclass
from typing import Any, Literal

import redis

from contracts.routing import CanaryRoute
from lambda_proxy.keys import CanaryKeys
from lambda_proxy.quota import BREAKER_S

#: A canary's switches set by a decision: rolled back, promoted to its split, promotion held.
Switch = Literal["off", "split", "held"]

#: How long a session key keeps its version after its last request, in seconds.
SESSION_TTL_S = 24 * 3600

#: KEYS: the off switch, the session's assignment (empty: no session), the new-key counter,
#: the split switch of a shadow canary (empty: not one), the mark that the decision recorded
#: in the Model Registry was read back into the cache (empty: no record to read). ARGV:
#: weight (percent), session TTL (s). Returns 1 for the canary, 0 for stable, -1 when the
#: canary was rolled back, -2 for a shadow canary not promoted yet (stable serves; the request
#: may be mirrored), -3 when the recorded decision has not been read back since the cache
#: started (the cache may have lost a switch: nothing is decided until it is read).
_CHOOSE = """
if redis.call('EXISTS', KEYS[1]) == 1 then
  return -1
end
if KEYS[5] ~= '' and redis.call('EXISTS', KEYS[5]) == 0 then
  return -3
end
if KEYS[4] ~= '' and redis.call('EXISTS', KEYS[4]) == 0 then
  return -2
end
if KEYS[2] ~= '' then
  local got = redis.call('GET', KEYS[2])
  if got then
    redis.call('EXPIRE', KEYS[2], ARGV[2])
    return tonumber(got)
  end
end
local n = redis.call('INCR', KEYS[3])
local w = tonumber(ARGV[1])
local pick = 0
if math.floor(n * w / 100) > math.floor((n - 1) * w / 100) then
  pick = 1
end
if KEYS[2] ~= '' then
  redis.call('SET', KEYS[2], pick, 'EX', ARGV[2])
end
return pick
"""

#: KEYS: the window's counters (a hash of ``req`` and ``err``), the off switch, the window's
#: set of failing callers. ARGV: failed (0/1), max error rate, min requests, window (s), the
#: caller's digest, min callers. Returns the counts, 1 when this call switched the canary off
#: (else 0), and the number of distinct failing callers. The switch has no TTL: the response
#: cache's eviction (ElastiCache's default ``volatile-lru``) only takes keys that have one, and a
#: canary rolled back stays so until the catalog changes it (a new canary version has a switch
#: of its own).
_RECORD = """
if redis.call('EXISTS', KEYS[2]) == 1 then
  return {0, 0, 0, 0}
end
local req = redis.call('HINCRBY', KEYS[1], 'req', 1)
local err = redis.call('HINCRBY', KEYS[1], 'err', tonumber(ARGV[1]))
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[4]) * 2)
if tonumber(ARGV[1]) == 1 then
  redis.call('SADD', KEYS[3], ARGV[5])
  redis.call('EXPIRE', KEYS[3], tonumber(ARGV[4]) * 2)
end
local callers = redis.call('SCARD', KEYS[3])
if req >= tonumber(ARGV[3]) and err > tonumber(ARGV[2]) * req and callers >= tonumber(ARGV[6]) then
  local reason = err .. ' of ' .. req .. ' canary requests failed, from ' .. callers .. ' callers'
  if redis.call('SET', KEYS[2], reason, 'NX') then
    return {req, err, 1, callers}
  end
end
return {req, err, 0, callers}
"""


class Choice(enum.Enum):
    """Which version serves a request, and why."""

    STABLE = 0
    CANARY = 1
    OFF = -1
    #: A shadow canary not promoted yet: stable serves, the request may be mirrored.
    SHADOW = -2
    #: The decision recorded in the Model Registry is not read back into the cache yet.
    UNREAD = -3


@dataclass(frozen=True)
class Outcome:
    """One canary answer counted: the window's figures, and whether this one rolled it back."""

    requests: int
    errors: int
    rolled_back: bool
    #: Distinct callers whose canary requests failed in the window.
    failing_callers: int = 0

    @property
    def reason(self) -> str:
        return (
            f"{self.errors} of {self.requests} canary requests failed, "
            f"from {self.failing_callers} callers"
        )


def _digest(*parts: str) -> str:
    # surrogatepass: a header can carry a lone surrogate, which must not fail the request.
    return hashlib.sha256("\x1f".join(parts).encode("utf-8", "surrogatepass")).hexdigest()[:32]


class LocalCanaries:
    """The scripts' state in this process: the fallback while Redis is away."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counters: dict[str, int] = collections.defaultdict(int)
        self._windows: dict[str, list[int]] = {}
        self._failing: dict[str, set[str]] = {}
        self._off: set[str] = set()
        self._split: set[str] = set()
        self._held: set[str] = set()

    def choose(self, base: str, canary: CanaryRoute, session: str | None) -> Choice:
        with self._lock:
            if base in self._off:
                return Choice.OFF
            if canary.shadow is not None and base not in self._split:
                return Choice.SHADOW
            return Choice.CANARY if self._pick(base, canary, session) else Choice.STABLE

    def _pick(self, base: str, canary: CanaryRoute, session: str | None) -> bool:
        if session is not None:
            # A hash, not this process's counter: every execution environment agrees.
            return int(_digest(base, session), 16) % 100 < canary.weight
        n = self._counters[base] = self._counters[base] + 1
        return n * canary.weight // 100 > (n - 1) * canary.weight // 100

    def switch_off(self, base: str) -> None:
        """Redis said the canary is off: so it stays here when Redis goes away."""
        self.settle(base, "off")

    def is_off(self, base: str) -> bool:
        with self._lock:
            return base in self._off

    def has(self, base: str, switch: Switch) -> bool:
        held = {"off": self._off, "split": self._split, "held": self._held}[switch]
        with self._lock:
            return base in held

    def settle(self, base: str, switch: Switch) -> bool:
        """Set a switch here (see ``Canaries.settle``); True when it was not set before."""
        held = {"off": self._off, "split": self._split, "held": self._held}[switch]
        with self._lock:
            new = base not in held
            held.add(base)
            return new

    def record(
        self, base: str, window: str, canary: CanaryRoute, failed: bool, caller: str
    ) -> Outcome:
        with self._lock:
            if base in self._off:
                return Outcome(0, 0, False)
            if len(self._windows) > 1000:
                self._windows.clear()
                self._failing.clear()
            counts = self._windows.setdefault(window, [0, 0])
            failing = self._failing.setdefault(window, set())
            counts[0] += 1
            counts[1] += int(failed)
            if failed:
                failing.add(caller)
            req, err = counts
            tripped = (
                req >= canary.min_requests
                and err > canary.max_error_rate * req
                and len(failing) >= canary.min_callers
            )
            if tripped:
                self._off.add(base)
            return Outcome(req, err, tripped, len(failing))


class Canaries:
    """The choice and the count for every canary, in Redis (or this process, see above)."""

    def __init__(self, client: redis.Redis | None) -> None:
        register = getattr(client, "register_script", None)
        self._choose = register(_CHOOSE) if register is not None else None
        self._record = register(_RECORD) if register is not None else None
        self._client = client
        self.fallback = LocalCanaries()
        self._skip_until = 0.0

    @staticmethod
    def base(adapter: str, canary: CanaryRoute) -> str:
        return CanaryKeys.of(adapter, canary.version).base

    def settle(
        self, adapter: str, canary: CanaryRoute, switch: Switch, evidence: str
    ) -> bool | None:
        """Record a quality decision (``lambda_proxy.shadow``) in the canary's switch of that
        name, holding its evidence: ``off`` rolls it back, ``split`` promotes a shadow canary
        to its weighted split, ``held`` records a promotion the catalog holds. True for the
        call that set it, so a decision is counted and logged once; like the 5xx switch it has
        no TTL. None when Redis is configured but did not take it: a rollback still holds in
        this process (``route`` honours it), and the decision is made again, and counted, at a
        later look with Redis (counting it here too counted it twice)."""
        base = self.base(adapter, canary)
        # A registered script means a Redis client (an in-process cache has none).
        if self._choose is None:
            return self.fallback.settle(base, switch)
        if time.monotonic() >= self._skip_until:
            try:
                done = bool(self._client.set(CanaryKeys(base).switch(switch), evidence, nx=True))
            except redis.RedisError:
                self._skip_until = time.monotonic() + BREAKER_S
            else:
                self.fallback.settle(base, switch)
                return done
        if switch == "off":
            self.fallback.settle(base, switch)
        return None

    def _redis(self, script: Any, keys: list[str], args: list[Any]) -> Any:
        """The script's answer, or None when Redis could not be asked (the breaker opens)."""
        if script is None or time.monotonic() < self._skip_until:
            return None
        try:
            return script(keys=keys, args=args)
        except redis.RedisError:
            self._skip_until = time.monotonic() + BREAKER_S
            return None

    def route(
        self,
        adapter: str,
        canary: CanaryRoute,
        tenant: str,
        session: str | None,
        recorded: bool = False,
    ) -> Choice:
        """Which version serves this request. ``session``: the caller's key (None: the
        request is a session of its own); keys are per tenant, so tenants cannot steer each
        other's assignment. ``recorded``: the canary's decisions are recorded in the Model
        Registry, so ``UNREAD`` until they are read back (``mark_read``)."""
        base = self.base(adapter, canary)
        k = CanaryKeys(base)
        key = None if session is None else k.session(_digest(tenant, session))
        split = k.split if canary.shadow is not None else ""
        got = self._redis(
            self._choose,
            [k.off, key or "", k.draws, split, k.read if recorded else ""],
            [canary.weight, SESSION_TTL_S],
        )
        if got is None:
            return self.fallback.choose(base, canary, key)
        choice = Choice(int(got))
        if choice is not Choice.OFF and self.fallback.is_off(base):
            # This process knows it was rolled back (while Redis was away, or before Redis
            # restarted empty): it stays off, and Redis learns it again.
            self._restore(base, "off", "rolled back before the cache lost its switch")
            return Choice.OFF
        if choice is Choice.SHADOW and self.fallback.has(base, "split"):
            # Promoted before the cache restarted empty: the promotion stands.
            self._restore(base, "split", "promoted before the cache lost its switch")
            again = self._redis(
                self._choose,
                [k.off, key or "", k.draws, split, ""],
                [canary.weight, SESSION_TTL_S],
            )
            return (
                Choice(int(again)) if again is not None else self.fallback.choose(base, canary, key)
            )
        if choice is Choice.OFF:
            self.fallback.switch_off(base)
        elif split and choice in (Choice.CANARY, Choice.STABLE):
            self.fallback.settle(base, "split")
        return choice

    def _restore(self, base: str, switch: Switch, evidence: str) -> None:
        if self._client is None or time.monotonic() < self._skip_until:
            return
        try:
            self._client.set(CanaryKeys(base).switch(switch), evidence, nx=True)
        except redis.RedisError:
            self._skip_until = time.monotonic() + BREAKER_S

    def mark_read(self, adapter: str, canary: CanaryRoute, ttl_s: int | None = None) -> None:
        """Note in the cache that the recorded decision was read back (``ttl_s``: until a
        read is tried again, after one failed)."""
        if self._choose is None:
            return
        try:
            self._client.set(CanaryKeys.of(adapter, canary.version).read, "1", ex=ttl_s)
        except redis.RedisError:
            self._skip_until = time.monotonic() + BREAKER_S

    def restore(self, adapter: str, canary: CanaryRoute, switch: Switch, evidence: str) -> None:
        """Set a decision read back from its durable record (the Model Registry) where the
        cache holds none: in this process, and in Redis unless a switch is there already."""
        base = self.base(adapter, canary)
        self.fallback.settle(base, switch)
        if self._choose is not None:
            self._restore(base, switch, evidence)

    def record(
        self,
        adapter: str,
        canary: CanaryRoute,
        failed: bool,
        now: float | None = None,
        caller: str = "",
    ) -> Outcome:
        """Count one canary answer (``failed``: its own 5xx) in its window; ``caller``: who
        sent it (the tenant), so that failures are also counted per distinct caller."""
        now = time.time() if now is None else now
        base = self.base(adapter, canary)
        k, index = CanaryKeys(base), int(now // canary.window_s)
        who = _digest(base, caller)
        got = self._redis(
            self._record,
            [k.window(index), k.off, k.window_callers(index)],
            [
                int(failed),
                repr(canary.max_error_rate),
                canary.min_requests,
                canary.window_s,
                who,
                canary.min_callers,
            ],
        )
        if got is None:
            return self.fallback.record(base, k.window(index), canary, failed, who)
        req, err, tripped, callers = (int(x) for x in got)
        return Outcome(req, err, tripped == 1, callers)
