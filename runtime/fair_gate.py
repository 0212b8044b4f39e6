"""Who starts next in vLLM's batch: fair between senders, and nothing held back from a flood.

vLLM's ``scheduling_policy="priority"`` orders only its waiting queue; a running sequence keeps
its slot until it ends (it preempts for KV-cache blocks, not for priority). With the batch full
of one tenant's flood, a quiet tenant's request would wait for one of the flood's sequences to
end: most of a second per request on a GPU, several on a CPU. Holding part of the batch back
from any one sender whenever another was about (this module's predecessor) cost the flood a
quarter of its throughput, even with nobody waiting.

So the runtime keeps the waiting queue itself, in front of vLLM, and gives vLLM a few more
sequences (``contracts.fairness.overflow_slots``) than the planned batch:

- while fewer than ``batch`` sequences run, a request starts at once: a sender alone fills the
  whole batch;
- a sender with nothing running starts at once even when the batch is full, in one of the
  overflow slots; so a quiet tenant's request never waits for a flood's sequence to end. A
  sequence in an overflow slot is a guest: the batch's own slots are counted without it, so
  the flood refills its whole batch while the guest runs;
- otherwise the request waits, and the waiters start in order of (is a shadow mirror, the
  sequences their sender runs, arrival): the sender with the fewest running goes first, and one
  sender's own requests keep their order;
- shadow mirrors (``contracts.fairness.MIRROR_KEY``) never take an overflow slot and start
  after every caller's request.

The overflow is past what the planner sized from the KV cache (``config/plan.py``). When the
cache runs short, vLLM preempts the running request of the highest (priority, arrival): the
flood's youngest, since a request's priority is its sender's requests already in the server
(``runtime.engine.Engine.admit``), and mirrors carry the largest. vLLM recomputes a preempted
request from its prompt and the tokens it had made, with its own sampling state, so its answer
does not change ("Preemption": vLLM's optimization docs, and ``vllm/v1/core/sched/scheduler.py``
``_preempt_request``).
"""

from __future__ import annotations

import asyncio
import collections
import itertools
from dataclasses import dataclass, field


class GateTimeoutError(Exception):
    """The request's deadline passed while it waited for a slot."""


@dataclass(order=True)
class _Waiter:
    rank: tuple[bool, int]
    arrival: int
    key: str = field(compare=False)
    started: asyncio.Future = field(compare=False)


class FairGate:
    """The sequences each sender runs in vLLM, and the requests waiting to run one."""

    def __init__(self, batch: int, overflow: int, last: str | None = None) -> None:
        if batch < 1 or overflow < 0:
            raise ValueError(f"a batch of {batch} with {overflow} overflow slots")
        self.batch, self.overflow, self.last = batch, overflow, last
        self.running: collections.Counter[str] = collections.Counter()
        #: Of those, the sequences each sender runs in an overflow slot.
        self.guests: collections.Counter[str] = collections.Counter()
        self._waiting: list[_Waiter] = []
        self._arrivals = itertools.count()

    @property
    def total(self) -> int:
        return sum(self.running.values())

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def may_start(self, key: str) -> bool:
        return self._slot(key) is not None

    def _slot(self, key: str) -> str | None:
        """``regular``: a slot of the planned batch; ``guest``: an overflow slot, which no
        regular sequence counts against (a flood refills its batch while a guest runs)."""
        if self.total - self.guest_total < self.batch:
            return "regular"
        if self.guest_total < self.overflow and self.running[key] == 0 and key != self.last:
            return "guest"
        return None

    @property
    def guest_total(self) -> int:
        return sum(self.guests.values())

    def _rank(self, key: str) -> tuple[bool, int]:
        return (key == self.last, self.running[key])

    async def enter(self, key: str, timeout: float) -> None:
        """Wait until ``key`` may start a sequence, and count it; GateTimeoutError after ``timeout``
        seconds (the request's deadline), counting nothing."""
        waiter = _Waiter(
            (False, 0), next(self._arrivals), key, asyncio.get_running_loop().create_future()
        )
        self._waiting.append(waiter)
        self._wake()
        try:
            await asyncio.wait_for(asyncio.shield(waiter.started), max(timeout, 0.0))
        except TimeoutError:
            if not waiter.started.done():
                self._waiting.remove(waiter)
                raise GateTimeoutError from None
        except asyncio.CancelledError:
            if waiter.started.done():  # started as it was cancelled: give the slot back
                self.leave(key)
            else:
                self._waiting.remove(waiter)
            raise

    def leave(self, key: str) -> None:
        """A sequence of ``key``'s ended: the next waiter that may start does."""
        self.running[key] -= 1
        if self.running[key] <= 0:
            del self.running[key]
        if self.guests[key] > 0:
            self.guests[key] -= 1
        if self.guests[key] <= 0:
            del self.guests[key]
        self._wake()

    def _wake(self) -> None:
        # Ranks move as sequences start and end, so each turn takes the best waiter now.
        while self._waiting:
            for w in self._waiting:
                w.rank = self._rank(w.key)
            best = min(self._waiting)
            slot = self._slot(best.key)
            if slot is None:
                return
            self._waiting.remove(best)
            self.running[best.key] += 1
            if slot == "guest":
                self.guests[best.key] += 1
            best.started.set_result(None)
