"""Which waiting requests join the running batch, at each decode step (iteration-level
scheduling, as Orca, vLLM and LoRAX do).

The engine asks ``admit`` once per iteration, with the rows still running (and once more for
requests that arrived while the first round's prompts ran, with those rows). Requests are taken
first come, first served, while the batch has room (``max_batch_size``), the iteration's
prefill budget lasts (``max_prefill_tokens``; the first request always fits) and the adapters
of the batch fit in the device slots. Rows that finish leave the batch between steps, so a
4-token request no longer waits behind a 1,000-token one.

Adapters make one more rule necessary. A request whose adapter needs a device slot that no
one can free (every slot holds an adapter with running rows) would wait for ever if requests
for the resident adapters kept joining. So the scheduler picks one running adapter to
*drain*: the one whose rows will be done soonest (the fewest tokens left to their longest
row, then the fewest rows). Its new requests wait until its rows finish and its slot can be
given to the blocked request, while every other adapter keeps serving.

``continuous=False`` is the old static-wave scheduler (a batch forms only when the previous
one has finished), kept for the side-by-side benchmark.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from runtime.request import EngineError, GenRequest


class SlotCache(Protocol):
    """What the scheduler asks of the adapter cache."""

    def get(self, name: str) -> object | None: ...
    def can_fit(self, names: set[str]) -> bool: ...
    def hold(self, name: str) -> object: ...
    def pinned(self, name: str) -> bool: ...


Fail = Callable[[GenRequest, EngineError], None]


@dataclass
class Scheduler:
    cache: SlotCache
    max_batch_size: int
    max_prefill_tokens: int = 4096
    continuous: bool = True

    def __post_init__(self) -> None:
        self.waiting: list[GenRequest] = []
        #: The running adapter whose new requests wait, so its slot frees (see module doc).
        self.draining: str | None = None

    def add(self, req: GenRequest) -> None:
        self.waiting.append(req)

    def __len__(self) -> int:
        return len(self.waiting)

    def admit(self, running: list[GenRequest], now: float, fail: Fail) -> list[GenRequest]:
        """The requests to prefill now, each holding its adapter (``cache.hold``). Requests
        that can never run (cancelled, past their deadline, adapter gone) are failed through
        ``fail`` and leave the queue."""
        if not self.continuous and running:
            return []
        room = self.max_batch_size - len(running)
        rows = Counter(r.adapter for r in running if r.adapter is not None)
        names = set(rows)
        admitted: list[GenRequest] = []
        tokens = 0
        blocked = False
        for req in list(self.waiting):
            error = self._hopeless(req, now)
            if error is not None:
                self.waiting.remove(req)
                fail(req, error)
                continue
            if room <= 0 or (admitted and tokens + len(req.input_ids) > self.max_prefill_tokens):
                break
            if req.adapter is not None:
                if req.adapter == self.draining:
                    continue
                if req.adapter not in names and not self.cache.can_fit(names | {req.adapter}):
                    blocked = True
                    continue
                try:
                    req.record = self.cache.hold(req.adapter)  # type: ignore[assignment]
                except KeyError:  # unregistered since the check above
                    self.waiting.remove(req)
                    fail(req, EngineError(404, f"adapter {req.adapter!r} is not registered"))
                    continue
                names.add(req.adapter)
            self.waiting.remove(req)
            admitted.append(req)
            tokens += len(req.input_ids)
            room -= 1
        self._choose_drain(blocked, running)
        return admitted

    def _hopeless(self, req: GenRequest, now: float) -> EngineError | None:
        if req.cancelled:
            return EngineError(499, "the client went away before the request started")
        if now > req.deadline:
            return EngineError(504, "request timed out waiting in the queue")
        if req.adapter is not None and self.cache.get(req.adapter) is None:
            return EngineError(404, f"adapter {req.adapter!r} is not registered")
        return None

    def _choose_drain(self, blocked: bool, running: list[GenRequest]) -> None:
        """Keep draining the same adapter until its rows are gone; pick a new one only when a
        request is blocked and nothing drains yet. Pinned adapters never leave their slot, so
        draining one would free nothing."""
        if not blocked:
            self.draining = None
            return
        left: dict[str, list[int]] = {}
        for r in running:
            if r.adapter is not None and not self.cache.pinned(r.adapter):
                remaining = r.params.max_new_tokens - len(r.output_ids)
                left.setdefault(r.adapter, []).append(remaining)
        if self.draining in left:
            return
        candidates = [(max(v), len(v), name) for name, v in left.items()]
        self.draining = min(candidates)[2] if candidates else None
