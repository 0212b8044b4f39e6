"""The shadow canary: mirrored requests, a paired quality test, and its decisions.

A canary with ``shadow`` set serves no caller at first. After the stable version has
answered a buffered request, the router mirrors that share of them to the canary's component,
on a background thread: the caller never waits for it and never sees its answer, the mirror is
charged to no quota and enters no cache. At most ``MAX_IN_FLIGHT`` mirrors run at once in one
process; one more is dropped (``ShadowDropped``), so a slow canary cannot pile work onto the
endpoint beyond ``shadow`` of stable's requests, and never more than that cap per router.

Each mirrored answer is scored beside stable's answer to the same input on the label-free
signals its task makes meaningful (``contracts.quality``), and the pair is added to running
sums in Redis (one script: ``n``, and per signal the sums of both versions and of the paired
difference and its square), so every execution environment feeds one test. The difference is
oriented so that below zero is worse: canary minus stable for a signal where higher is
better, stable minus canary otherwise.

The test looks at the sums every ``min_pairs`` pairs (n = k * min_pairs). Look k spends
alpha / (k (k + 1)) of the error rate alpha = 1 - confidence, so the chance of a wrong decision
over all looks, however many there are, stays under alpha; within a look the signals share it
(Bonferroni). At each look, a one-sided bound on the mean difference of each signal uses the
normal quantile (``statistics.NormalDist``; the paired differences' sample deviation, and n is
at least 20):

- **rollback** when some signal's upper bound is below minus its margin: the canary is worse
  by more than the margin, with confidence. The router sets the canary's off switch (the
  same one its 5xx rule sets: ``lambda_proxy.canary``), counts ``CanaryRollback`` and
  ``CanaryQualityRollback``, and logs the evidence;
- **promotion** at the first look with n >= ``promote_after`` where every signal's lower bound
  is above minus its margin: the canary is not worse on any signal, with confidence. With
  ``promote: split`` it then takes ``weight`` percent of session keys (the canary's split
  switch); with ``hold`` the decision is only logged and counted (``CanaryPromoted``).

A mirror that fails with the canary container's own fault counts toward the 5xx rule like any
canary answer. When Redis is away the sums are this process's own. Written by hand: no library
the router ships runs a sequential paired test, and the signals are the gate's own.
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from statistics import NormalDist
from typing import Any, Literal

import redis

from contracts.quality import HIGHER_IS_BETTER, measurable, measure
from contracts.routing import CanaryRoute

#: Mirrors running at once in one process; one more is dropped rather than queued.
MAX_IN_FLIGHT = 2

#: Pairs a signal needs before its bound may decide anything (a rollback on it, or a
#: promotion, which needs every signal's).
MIN_SIGNAL_PAIRS = 20

#: KEYS: the pairs' sums (a hash), the canary's off switch, its callers (a hash of digests).
#: ARGV: the caller's digest, then for each signal measured on this pair its name, stable's
#: value, the canary's, the oriented difference and its square. Returns the hash after adding
#: the pair (empty when the canary is off: a pair landing after a rollback counts for nothing).
#: No TTL, as for the switch (``lambda_proxy.canary``): ``volatile-lru`` must not evict a
#: running test.
_PAIR_SCRIPT = """
if redis.call('EXISTS', KEYS[2]) == 1 then
  return {}
end
redis.call('HINCRBY', KEYS[1], 'n', 1)
if redis.call('HINCRBY', KEYS[3], ARGV[1], 1) == 1 then
  redis.call('HINCRBY', KEYS[1], 'callers', 1)
end
for i = 2, #ARGV, 5 do
  local name = ARGV[i]
  redis.call('HINCRBY', KEYS[1], 'n:' .. name, 1)
  redis.call('HINCRBYFLOAT', KEYS[1], 's:' .. name, ARGV[i + 1])
  redis.call('HINCRBYFLOAT', KEYS[1], 'c:' .. name, ARGV[i + 2])
  redis.call('HINCRBYFLOAT', KEYS[1], 'd:' .. name, ARGV[i + 3])
  redis.call('HINCRBYFLOAT', KEYS[1], 'q:' .. name, ARGV[i + 4])
end
return redis.call('HGETALL', KEYS[1])
"""


def oriented(signal: str, stable: float, canary: float) -> float:
    """The pair's difference, below zero when the canary is worse."""
    return canary - stable if HIGHER_IS_BETTER[signal] else stable - canary


@dataclass(frozen=True)
class Tally:
    """The sums after a pair: ``n`` pairs from ``callers`` distinct callers, and per signal the
    pairs it was measured on (``counts``), stable's and the canary's sums and the oriented
    differences' sum and sum of squares."""

    n: int
    stable: Mapping[str, float]
    canary: Mapping[str, float]
    diff: Mapping[str, float]
    diff_sq: Mapping[str, float]
    counts: Mapping[str, int]
    callers: int = 1

    @classmethod
    def of_hash(cls, fields: Mapping[str, float]) -> Tally:
        parts: dict[str, dict[str, float]] = {"s": {}, "c": {}, "d": {}, "q": {}, "n": {}}
        for key, value in fields.items():
            kind, _, name = key.partition(":")
            if kind in parts and name:
                parts[kind][name] = float(value)
        return cls(
            int(fields.get("n", 0)),
            parts["s"],
            parts["c"],
            parts["d"],
            parts["q"],
            {k: int(v) for k, v in parts["n"].items()},
            int(fields.get("callers", 0)),
        )


@dataclass(frozen=True)
class Bound:
    """One signal at a look: both versions' means, the mean oriented difference, its
    one-sided bounds at this look's level, and the margin it is held to."""

    signal: str
    stable_mean: float
    canary_mean: float
    diff_mean: float
    lower: float
    upper: float
    margin: float
    #: The pairs it was measured on (an input with no fact says nothing of ``facts_kept``).
    n: int = 0

    @property
    def measured(self) -> bool:
        return self.n >= MIN_SIGNAL_PAIRS


@dataclass(frozen=True)
class Decision:
    """What a look decided, with its evidence."""

    action: Literal["continue", "rollback", "promote"]
    n: int
    look: int
    #: The one-sided error rate each signal's bound was taken at, at this look.
    alpha: float
    z: float
    bounds: tuple[Bound, ...]
    #: Distinct callers among the pairs, and how many a decision needs.
    callers: int = 1
    min_callers: int = 1

    @property
    def _callers(self) -> str:
        return f"{self.callers} caller" + ("" if self.callers == 1 else "s")

    @property
    def reason(self) -> str:
        if self.action == "rollback":
            worse = [b for b in self.bounds if b.measured and b.upper < -b.margin]
            return (
                "; ".join(
                    f"{b.signal}: canary {b.canary_mean:.3f} vs stable {b.stable_mean:.3f}, "
                    f"worse by at least {-b.upper:.3f} (margin {b.margin:g})"
                    for b in worse
                )
                + f" over {self.n} mirrored requests from {self._callers}"
            )
        if self.action == "promote":
            return (
                f"not worse than stable on {len(self.bounds)} signals over {self.n} pairs "
                f"from {self._callers}"
            )
        if self.callers < self.min_callers:
            return (
                f"undecided after {self.n} pairs: from {self._callers}, a decision "
                f"needs {self.min_callers}"
            )
        return f"undecided after {self.n} pairs"

    def evidence(self) -> dict[str, Any]:
        """The decision as logged, and as kept in the canary's split switch."""
        return {
            "action": self.action,
            "reason": self.reason,
            "n": self.n,
            "look": self.look,
            "callers": self.callers,
            "alpha": self.alpha,
            "z": round(self.z, 4),
            "signals": {
                b.signal: {k: round(v, 4) for k, v in asdict(b).items() if k != "signal"}
                for b in self.bounds
            },
        }


def bound(canary: CanaryRoute, tally: Tally, signal: str, z: float) -> Bound:
    """One signal's one-sided bounds at this look, over the pairs it was measured on.

    The variance is the paired differences' sample variance, but never below p(1 - p) with
    p = (sum of squared differences + 1) / (n + 2): every difference lies in [-1, 1], so that
    is the variance of a share of disagreeing pairs estimated with one disagreement and one
    agreement added. Without it, a sample in which no pair happened to differ has no spread,
    its bounds close on zero, and a canary that fails one answer in ten is promoted one time in
    eight (an outside review measured it)."""
    m = tally.counts.get(signal, 0)
    stable = tally.stable.get(signal, 0.0) / m if m else 0.0
    mirrored = tally.canary.get(signal, 0.0) / m if m else 0.0
    if m < 2:
        return Bound(signal, stable, mirrored, 0.0, -1.0, 1.0, canary.margins[signal], m)
    mean = tally.diff.get(signal, 0.0) / m
    squares = tally.diff_sq.get(signal, 0.0)
    sample = max(0.0, (squares - m * mean * mean) / (m - 1))
    p = min(1.0, (squares + 1.0) / (m + 2.0))
    half = z * math.sqrt(max(sample, p * (1.0 - p)) / m)
    return Bound(
        signal, stable, mirrored, mean, mean - half, mean + half, canary.margins[signal], m
    )


def decide(canary: CanaryRoute, tally: Tally) -> Decision | None:
    """The test at this pair count: None between looks, else a decision (``continue`` when a
    look decides nothing). A decision needs pairs from ``min_callers`` distinct callers (the
    5xx rule's setting: one tenant's inputs must not decide for everyone); a signal counts
    once it was measured on ``MIN_SIGNAL_PAIRS`` pairs, and a promotion needs every signal's."""
    n = tally.n
    if n < canary.min_pairs or n % canary.min_pairs:
        return None
    look = n // canary.min_pairs
    signals = sorted(canary.margins)
    alpha = (1.0 - canary.confidence) / (look * (look + 1)) / max(1, len(signals))
    z = NormalDist().inv_cdf(1.0 - alpha)
    bounds = tuple(bound(canary, tally, s, z) for s in signals)
    callers = tally.callers
    action: Literal["continue", "rollback", "promote"] = "continue"
    if callers >= canary.min_callers:
        if any(b.measured and b.upper < -b.margin for b in bounds):
            action = "rollback"
        elif n >= canary.promote_after and all(b.measured and b.lower > -b.margin for b in bounds):
            action = "promote"
    return Decision(action, n, look, alpha, z, bounds, callers, canary.min_callers)


class Pairs:
    """The running sums of every shadow canary: in Redis, which every execution environment
    shares; in this process only where the router has no Redis at all (one process, as the
    local platform without Redis). Where Redis is configured but does not answer, a pair is
    dropped rather than summed here: per-process sums would each run the test at its full error
    rate, and a decision made on them would stay in that process."""

    def __init__(self, client: redis.Redis | None) -> None:
        register = getattr(client, "register_script", None)
        self._pair = register(_PAIR_SCRIPT) if register is not None else None
        self._lock = threading.Lock()
        self._local: dict[str, dict[str, float]] = {}
        self._callers: dict[str, set[str]] = {}

    def add(
        self,
        base: str,
        stable: Mapping[str, float],
        canary: Mapping[str, float],
        caller: str = "",
    ) -> Tally | None:
        """Add one pair from ``caller`` (the signals measured on it); the sums after it, or None
        when it did not count (the canary is off, or Redis did not answer)."""
        who = hashlib.sha256(f"{base}|{caller}".encode()).hexdigest()[:16]
        args: list[Any] = [who]
        for s in sorted(stable):
            d = oriented(s, stable[s], canary[s])
            args += [s, repr(stable[s]), repr(canary[s]), repr(d), repr(d * d)]
        if self._pair is not None:
            try:
                got = self._pair(
                    keys=[f"{base}:pairs", f"{base}:off", f"{base}:callers"], args=args
                )
            except redis.RedisError:
                return None
            if not got:
                return None
            it = iter(got)
            return Tally.of_hash({k.decode(): float(v) for k, v in zip(it, it, strict=True)})
        with self._lock:
            sums = self._local.setdefault(base, {"n": 0.0})
            sums["n"] += 1
            seen = self._callers.setdefault(base, set())
            seen.add(who)
            sums["callers"] = float(len(seen))
            for s in stable:
                d = oriented(s, stable[s], canary[s])
                sums[f"n:{s}"] = sums.get(f"n:{s}", 0.0) + 1
                for kind, value in (("s", stable[s]), ("c", canary[s]), ("d", d), ("q", d * d)):
                    sums[f"{kind}:{s}"] = sums.get(f"{kind}:{s}", 0.0) + value
            return Tally.of_hash(sums)


def required_keys(schema: Mapping[str, Any] | None) -> Callable[[Any], bool] | None:
    """The router's check of a JSON answer against the route's schema: the top-level
    ``required`` properties are there. The container decodes to the whole schema, and the
    training gate validates it whole (``jsonschema``, which the router's bundle does not ship);
    what a mirror catches is an answer cut short or a key dropped."""
    if not schema:
        return None
    required = [k for k in schema.get("required", ()) if isinstance(k, str)]
    return lambda obj: isinstance(obj, dict) and all(k in obj for k in required)


def source_text(payload: Mapping[str, Any]) -> str:
    """The request's own text, what the signals compare an answer with: its ``inputs``, or
    its user turns."""
    if isinstance(payload.get("inputs"), str):
        return payload["inputs"]
    turns = payload.get("messages") or []
    return "\n".join(
        str(m.get("content", "")) for m in turns if isinstance(m, dict) and m.get("role") == "user"
    )


def pair(
    canary: CanaryRoute,
    payload: Mapping[str, Any],
    stable_answer: str,
    canary_answer: str,
    schema: Any = None,
) -> tuple[dict[str, float], dict[str, float]]:
    """Both versions' signals of their answers to one payload, on the signals its input can
    show (``contracts.quality.measurable``: an input with no fact says nothing of whether a
    version keeps facts, and must not count as a pair in which both did)."""
    text = source_text(payload)
    names = measurable(tuple(sorted(canary.margins)), text)
    check = required_keys(schema)
    return measure(names, text, stable_answer, check), measure(names, text, canary_answer, check)


class Mirrors:
    """The background threads mirrors run on, bounded (see the module's docstring)."""

    def __init__(self, limit: int = MAX_IN_FLIGHT) -> None:
        self._slots = threading.BoundedSemaphore(limit)
        self._pool = ThreadPoolExecutor(max_workers=limit, thread_name_prefix="shadow")
        self._lock = threading.Lock()
        self._running = 0
        self._idle = threading.Condition(self._lock)

    def submit(self, job: Callable[[], None]) -> bool:
        """Run ``job`` in the background; False (dropped) when the cap is reached."""
        if not self._slots.acquire(blocking=False):
            return False
        with self._lock:
            self._running += 1

        def run() -> None:
            try:
                job()
            finally:
                self._slots.release()
                with self._lock:
                    self._running -= 1
                    self._idle.notify_all()

        self._pool.submit(run)
        return True

    def wait(self, timeout: float = 30.0) -> bool:
        """Until no mirror runs (tests, the benchmark, the local platform's shutdown)."""
        with self._idle:
            return self._idle.wait_for(lambda: self._running == 0, timeout)


def state(client: Any, base: str, canary: CanaryRoute) -> dict[str, Any]:
    """A canary's state as Redis holds it (``base``: ``Canaries.base``), for people: where it
    is (judging, rolled back, promoted, held, or a plain weighted split), its pairs so far and
    each signal's means beside stable's, and the last decision's evidence. What the playground
    shows; read-only."""

    def get(name: str) -> str | None:
        raw = client.get(f"{base}:{name}")
        return raw.decode() if isinstance(raw, bytes) else raw

    off, split, held = get("off"), get("split"), get("held")
    fields = client.hgetall(f"{base}:pairs") or {}
    tally = Tally.of_hash(
        {(k.decode() if isinstance(k, bytes) else k): float(v) for k, v in fields.items()}
    )
    decided = next((v for v in (off, split, held) if v is not None), None)
    try:
        evidence = json.loads(decided) if decided is not None else None
    except ValueError:  # the 5xx rule's switch holds its reason as text
        evidence = {"action": "rollback", "reason": decided}
    if off is not None:
        where = "rolled back"
    elif canary.shadow is None:
        where = "serving its split"
    elif split is not None:
        where = "promoted to its split"
    elif held is not None:
        where = "promotion held"
    else:
        where = "judging"
    n = tally.n
    return {
        "version": canary.version,
        "mode": "shadow" if canary.shadow is not None else "split",
        "shadow": canary.shadow,
        "weight": canary.weight,
        "state": where,
        "pairs": n,
        "min_pairs": canary.min_pairs,
        "promote_after": canary.promote_after,
        "next_look": (n // canary.min_pairs + 1) * canary.min_pairs,
        "callers": tally.callers,
        "min_callers": canary.min_callers,
        "signals": [
            {
                "signal": s,
                "better": "higher" if HIGHER_IS_BETTER[s] else "lower",
                "pairs": (m := tally.counts.get(s, 0)),
                "stable": tally.stable.get(s, 0.0) / m if m else None,
                "canary": tally.canary.get(s, 0.0) / m if m else None,
                "margin": canary.margins[s],
            }
            for s in sorted(canary.margins)
        ],
        "decision": evidence,
    }
