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
import secrets
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from statistics import NormalDist
from typing import Any, Literal

import redis

from contracts.quality import HIGHER_IS_BETTER, answered, measurable, measure
from contracts.routing import CanaryRoute
from lambda_proxy.keys import CanaryKeys

#: Mirrors running at once in one process; one more is dropped rather than queued.
MAX_IN_FLIGHT = 2

#: Pairs a signal needs before its bound may decide anything (a rollback on it, or a
#: promotion, which needs every signal's).
MIN_SIGNAL_PAIRS = 20

#: The fewest new tokens a request may ask for to be mirrored: shorter answers score the same
#: on every signal whatever the model wrote (a one-word answer is answered, never repeats, and
#: keeps no fact), so a flood of them would promote any canary.
MIN_MIRROR_TOKENS = 16
#: A pair in which both answers are shorter than this (visible characters) carries no evidence
#: either: a request that asked for many tokens but was answered in a word on both sides.
MIN_EVIDENCE_CHARS = 16

#: KEYS: the pairs' sums (a hash: every pair, for people), the canary's off switch, its voices
#: (a hash of digest -> pairs), the inputs already paired (a set of voice|input digests), this
#: voice's own sums (a hash), the prefix of every voice's sums. ARGV: the voice's digest, the
#: voice|input digest, the look interval (``min_pairs``), then for each signal measured on this
#: pair its name, stable's value, the canary's, the oriented difference and its square.
#: Returns ``{n}``, the pairs counted so far, and when ``n`` is a look, every voice's digest
#: and sums after it, read in the same script: the look weighs exactly the pairs its ``n``
#: counts, whatever other processes add meanwhile. ``{-1}`` when this voice paired this input
#: before (one input is one piece of evidence, however often it is replayed); empty when the
#: canary is off (a pair landing after a rollback counts for nothing). The voices' keys are
#: named from the hash (the cache runs with cluster mode off: ``infra.cache``). No TTL, as
#: for the switch (``lambda_proxy.canary``): ``volatile-lru`` must not evict a running test.
_PAIR_SCRIPT = """
if redis.call('EXISTS', KEYS[2]) == 1 then
  return {}
end
if redis.call('SADD', KEYS[4], ARGV[2]) == 0 then
  return {-1}
end
local n = redis.call('HINCRBY', KEYS[1], 'n', 1)
redis.call('HINCRBY', KEYS[5], 'n', 1)
if redis.call('HINCRBY', KEYS[3], ARGV[1], 1) == 1 then
  redis.call('HINCRBY', KEYS[1], 'callers', 1)
end
for i = 4, #ARGV, 5 do
  local name = ARGV[i]
  for _, key in ipairs({KEYS[1], KEYS[5]}) do
    redis.call('HINCRBY', key, 'n:' .. name, 1)
    redis.call('HINCRBYFLOAT', key, 's:' .. name, ARGV[i + 1])
    redis.call('HINCRBYFLOAT', key, 'c:' .. name, ARGV[i + 2])
    redis.call('HINCRBYFLOAT', key, 'd:' .. name, ARGV[i + 3])
    redis.call('HINCRBYFLOAT', key, 'q:' .. name, ARGV[i + 4])
  end
end
local out = {n}
if n % tonumber(ARGV[3]) == 0 then
  for _, who in ipairs(redis.call('HKEYS', KEYS[3])) do
    table.insert(out, who)
    table.insert(out, redis.call('HGETALL', KEYS[6] .. who))
  end
end
return out
"""


def oriented(signal: str, stable: float, canary: float) -> float:
    """The pair's difference, below zero when the canary is worse."""
    return canary - stable if HIGHER_IS_BETTER[signal] else stable - canary


@dataclass(frozen=True)
class Tally:
    """The sums a look reads: ``n`` pairs from ``callers`` distinct voices, and per signal the
    pairs it was measured on (``counts``), stable's and the canary's sums and the oriented
    differences' sum and sum of squares. After ``capped`` the figures are weighted (no voice
    carries more than its share) and ``raw`` keeps the pairs counted, which set the looks."""

    n: float
    stable: Mapping[str, float]
    canary: Mapping[str, float]
    diff: Mapping[str, float]
    diff_sq: Mapping[str, float]
    counts: Mapping[str, float]
    callers: int = 1
    raw: int = -1
    #: Each voice's own tally (``capped``; empty before).
    voices: Mapping[str, Tally] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.raw < 0:
            object.__setattr__(self, "raw", int(self.n))

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
            parts["n"],
            int(fields.get("callers", 0)),
        )


def share_cap(pairs: list[float], voices: int) -> float:
    """The most pairs any one voice may carry so that none carries more than 1/``voices`` of
    the evidence: the cap t with ``voices * t == sum(min(p, t))`` (water-filling), the largest
    such t. Zero when fewer than ``voices`` voices sent pairs: ``min_callers`` follows from it."""
    ordered = sorted((p for p in pairs if p > 0), reverse=True)
    if voices <= 1:
        return float(ordered[0]) if ordered else 0.0
    for capped in range(min(voices, len(ordered) + 1)):
        rest = sum(ordered[capped:])
        cap = rest / (voices - capped)
        if (capped == 0 or ordered[capped - 1] >= cap) and (
            capped == len(ordered) or ordered[capped] <= cap
        ):
            return cap
    return 0.0


def capped(voices: Mapping[str, Tally], min_callers: int, raw: int | None = None) -> Tally:
    """One tally from each voice's own, each voice's pairs weighted down to ``share_cap``: a
    tenant that sends most of the pairs counts as much as ``1 / min_callers`` of them, so no
    one tenant decides for everyone, however many requests it sends. ``n`` is capped over every
    voice's pairs; each signal over the voices that measured it, since a voice may be the only
    one whose inputs can show a signal (a fact, a personal value): a signal fewer than
    ``min_callers`` voices measured weighs nothing. ``raw``: the pairs counted at this look
    (default: the voices' own)."""
    live = {w: t for w, t in voices.items() if t.n > 0}
    cap = share_cap([t.n for t in live.values()], min_callers)
    n = sum(min(t.n, cap) for t in live.values())
    sums: dict[str, dict[str, float]] = {k: {} for k in ("s", "c", "d", "q", "n")}
    for name in {name for t in live.values() for name in t.counts}:
        measured = {w: t.counts.get(name, 0.0) for w, t in live.items()}
        signal_cap = share_cap(list(measured.values()), min_callers)
        for w, t in live.items():
            m = measured[w]
            if m <= 0:
                continue
            weight = min(1.0, signal_cap / m)
            for kind, part in (
                ("s", t.stable),
                ("c", t.canary),
                ("d", t.diff),
                ("q", t.diff_sq),
                ("n", t.counts),
            ):
                sums[kind][name] = sums[kind].get(name, 0.0) + weight * part.get(name, 0.0)
    return Tally(
        n,
        sums["s"],
        sums["c"],
        sums["d"],
        sums["q"],
        sums["n"],
        len(live),
        raw=int(sum(t.n for t in voices.values())) if raw is None else raw,
        voices=dict(voices),
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
    #: The pairs weighed, each voice capped at its share (``capped``).
    n: float
    look: int
    #: The one-sided error rate each signal's bound was taken at, at this look.
    alpha: float
    z: float
    bounds: tuple[Bound, ...]
    #: Distinct callers among the pairs, and how many a decision needs.
    callers: int = 1
    min_callers: int = 1
    #: The pairs counted, before the cap.
    pairs: int = 0
    #: The weighed evidence pointed to a decision that did not hold with some one voice left
    #: out (``_without_each_voice``), so the look decided nothing.
    unheld: bool = False

    @property
    def pairs_text(self) -> str:
        """The pairs weighed, and those counted where the cap weighed some down."""
        weighed = f"{self.n:.0f}"
        return weighed if round(self.n) == self.pairs else f"{weighed} (of {self.pairs})"

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
                + f" over {self.pairs_text} mirrored requests from {self._callers}"
            )
        if self.action == "promote":
            return (
                f"not worse than stable on {len(self.bounds)} signals over {self.pairs_text} pairs "
                f"from {self._callers}"
            )
        if self.callers < self.min_callers:
            return (
                f"undecided after {self.pairs_text} pairs: from {self._callers}, a decision "
                f"needs {self.min_callers}"
            )
        if self.unheld:
            return (
                f"undecided after {self.pairs_text} pairs: the evidence does not hold with "
                "every voice's pairs left out in turn"
            )
        return f"undecided after {self.pairs_text} pairs"

    def evidence(self) -> dict[str, Any]:
        """The decision as logged, and as kept in the canary's split switch."""
        return {
            "action": self.action,
            "reason": self.reason,
            "n": round(self.n, 2),
            "pairs": self.pairs,
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
    eight."""
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
    look decides nothing). Looks come every ``min_pairs`` pairs counted (``tally.raw``); what
    a look weighs is ``capped``: a decision needs pairs from ``min_callers`` distinct voices
    (the 5xx rule's setting: one tenant's inputs must not decide for everyone), each carrying
    at most ``1 / min_callers`` of the evidence, and ``promote_after`` counts the weighted
    pairs. A signal counts once it was measured on ``MIN_SIGNAL_PAIRS`` weighted pairs, and a
    promotion needs every signal's."""
    raw, n = tally.raw, tally.n
    if raw < canary.min_pairs or raw % canary.min_pairs:
        return None
    look = raw // canary.min_pairs
    signals = sorted(canary.margins)
    alpha = (1.0 - canary.confidence) / (look * (look + 1)) / max(1, len(signals))
    z = NormalDist().inv_cdf(1.0 - alpha)
    bounds = tuple(bound(canary, tally, s, z) for s in signals)
    callers = tally.callers
    action: Literal["continue", "rollback", "promote"] = "continue"
    if callers >= canary.min_callers:
        action = _action(canary, bounds, n)
    held = action == "continue" or _without_each_voice(canary, tally, signals, z, action)
    return Decision(
        action if held else "continue",
        n,
        look,
        alpha,
        z,
        bounds,
        callers,
        canary.min_callers,
        raw,
        unheld=not held,
    )


def _action(
    canary: CanaryRoute, bounds: tuple[Bound, ...], n: float
) -> Literal["continue", "rollback", "promote"]:
    if any(b.measured and b.upper < -b.margin for b in bounds):
        return "rollback"
    if n >= canary.promote_after and all(b.measured and b.lower > -b.margin for b in bounds):
        return "promote"
    return "continue"


def _without_each_voice(
    canary: CanaryRoute, tally: Tally, signals: list[str], z: float, action: str
) -> bool:
    """Whether ``action`` still follows with any one voice left out (its pairs dropped, the
    others capped at ``1 / (min_callers - 1)``). A voice holding its full share can still move
    a pooled mean by that share, and the margins are a few hundredths: a canary that differs
    only on one tenant's inputs (made for it, or by it) must not be decided for everyone on
    them. Only ever turns a decision into none, so the error rates stay within alpha."""
    if canary.min_callers < 2 or len(tally.voices) < 2:
        return True
    for left in tally.voices:
        rest = {w: t for w, t in tally.voices.items() if w != left}
        sub = capped(rest, canary.min_callers - 1)
        # The full look's pair count for promote_after: what is tested here is the bounds.
        if _action(canary, tuple(bound(canary, sub, s, z) for s in signals), tally.n) != action:
            return False
    return True


class Pairs:
    """The running sums of every shadow canary: in Redis, which every execution environment
    shares; in this process only where the router has no Redis at all (one process, as the
    local platform without Redis). Where Redis is configured but does not answer, a pair is
    dropped rather than summed here: per-process sums would each run the test at its full error
    rate, and a decision made on them would stay in that process.

    Sums are kept per voice as well as in total, so that a look can weigh each voice at most
    its share (``capped``); an input is paired once per voice, however often it is sent."""

    def __init__(self, client: redis.Redis | None) -> None:
        register = getattr(client, "register_script", None)
        self._pair = register(_PAIR_SCRIPT) if register is not None else None
        self._client = client
        self._lock = threading.Lock()
        self._local: dict[str, dict[str, float]] = {}
        self._voices: dict[str, dict[str, dict[str, float]]] = {}
        self._seen: dict[str, set[str]] = {}

    def add(
        self,
        base: str,
        stable: Mapping[str, float],
        canary: Mapping[str, float],
        caller: str = "",
        *,
        key: str | None = None,
        every: int = 1,
        min_callers: int = 1,
    ) -> Tally | None:
        """Add one pair from ``caller`` (a voice: ``auth.voice``) on the input ``key`` (None:
        an input of its own); the tally after it, or None when it did not count (the canary is
        off, this voice paired the input before, or Redis did not answer). The tally is the
        voices' ``capped`` one when the pairs counted are a multiple of ``every`` (a look: the
        only place its sums are read), else only the count (``raw``)."""
        who = hashlib.sha256(f"{base}|{caller}".encode()).hexdigest()[:16]
        # Per voice: a voice's replay is one piece of evidence, and no voice can use up an
        # input another voice will send.
        seen = f"{who}|{key if key is not None else secrets.token_hex(8)}"
        values: list[tuple[str, float, float, float]] = []
        for s in sorted(stable):
            d = oriented(s, stable[s], canary[s])
            values.append((s, stable[s], canary[s], d))
        if self._pair is not None:
            k = CanaryKeys(base)
            args: list[Any] = [who, seen, every]
            for s, st, ca, d in values:
                args += [s, repr(st), repr(ca), repr(d), repr(d * d)]
            try:
                got = self._pair(
                    keys=[
                        k.pairs,
                        k.off,
                        k.callers,
                        k.seen,
                        k.voice_pairs(who),
                        k.voice_prefix,
                    ],
                    args=args,
                )
            except redis.RedisError:
                return None
            if not got or int(got[0]) < 0:
                return None
            n = int(got[0])
            if n % every:
                return Tally(0.0, {}, {}, {}, {}, {}, 0, raw=n)
            it = iter(got[1:])
            voices = {
                (w.decode() if isinstance(w, bytes) else w): Tally.of_hash(
                    _decoded(dict(zip(f[::2], f[1::2], strict=True)))
                )
                for w, f in zip(it, it, strict=True)
            }
            return capped(voices, min_callers, raw=n)
        with self._lock:
            if seen in self._seen.setdefault(base, set()):
                return None
            self._seen[base].add(seen)
            voices_local = self._voices.setdefault(base, {})
            for sums in (self._local.setdefault(base, {}), voices_local.setdefault(who, {})):
                sums["n"] = sums.get("n", 0.0) + 1
                for s, st, ca, d in values:
                    sums[f"n:{s}"] = sums.get(f"n:{s}", 0.0) + 1
                    for kind, value in (("s", st), ("c", ca), ("d", d), ("q", d * d)):
                        sums[f"{kind}:{s}"] = sums.get(f"{kind}:{s}", 0.0) + value
            self._local[base]["callers"] = float(len(voices_local))
            n = int(self._local[base]["n"])
            if n % every:
                return Tally(0.0, {}, {}, {}, {}, {}, 0, raw=n)
            return capped(
                {w: Tally.of_hash(v) for w, v in voices_local.items()}, min_callers, raw=n
            )


def voice_tallies(client: Any, base: str) -> dict[str, Tally]:
    """Each voice's own sums in Redis (one round trip for all of them)."""
    keys = CanaryKeys(base)
    voices = [k.decode() if isinstance(k, bytes) else k for k in client.hkeys(keys.callers)]
    pipe = client.pipeline(transaction=False)
    for who in voices:
        pipe.hgetall(keys.voice_pairs(who))
    return {
        who: Tally.of_hash(_decoded(fields))
        for who, fields in zip(voices, pipe.execute(), strict=True)
    }


def _decoded(fields: Mapping[Any, Any]) -> dict[str, float]:
    return {(k.decode() if isinstance(k, bytes) else k): float(v) for k, v in fields.items()}


def input_key(payload: Mapping[str, Any]) -> str:
    """What makes two mirrored requests the same input: the payload the canary receives."""
    raw = json.dumps(payload, sort_keys=True, ensure_ascii=False).encode("utf-8", "surrogatepass")
    return hashlib.sha256(raw).hexdigest()[:32]


def required_keys(schema: Mapping[str, Any] | None) -> Callable[[Any], bool] | None:
    """The router's check of a JSON answer against the route's schema: the top-level
    ``required`` properties are there. The container decodes to the whole schema, and the
    training gate validates it whole (``jsonschema``, which the router's bundle does not ship);
    what a mirror catches is an answer cut short or a key dropped."""
    if not schema:
        return None
    listed = schema.get("required", ())
    # A caller's schema may say anything: a ``required`` that is not a list requires nothing.
    required = [k for k in listed if isinstance(k, str)] if isinstance(listed, list) else []
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
    version keeps facts, and must not count as a pair in which both did). No signal at all
    when both answers are under ``MIN_EVIDENCE_CHARS`` and both say something: such a pair
    scores the same whatever the models are, and counting it would let short answers decide
    (a canary that says nothing where stable says a word is still told apart)."""
    short = max(len(stable_answer.strip()), len(canary_answer.strip())) < MIN_EVIDENCE_CHARS
    if short and answered(stable_answer) == answered(canary_answer):
        return {}, {}
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
        raw = client.get(CanaryKeys(base).switch(name))
        return raw.decode() if isinstance(raw, bytes) else raw

    off, split, held = get("off"), get("split"), get("held")
    tally = Tally.of_hash(_decoded(client.hgetall(CanaryKeys(base).pairs) or {}))
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
    n = tally.raw
    return {
        "version": canary.version,
        "mode": "shadow" if canary.shadow is not None else "split",
        "shadow": canary.shadow,
        "weight": canary.weight,
        "state": where,
        "pairs": n,
        # What a look weighs: each voice at most 1 / min_callers of it (``capped``).
        "weighed_pairs": round(capped(voice_tallies(client, base), canary.min_callers).n, 1),
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
