"""The scheduler alone: first come first served within the batch and prefill limits, adapters
within the device slots, one running adapter drained for a request that waits for a slot, and
hopeless requests failed out of the queue."""

from __future__ import annotations

from dataclasses import dataclass, field

from runtime.request import EngineError, GenParams, GenRequest
from runtime.scheduler import Scheduler


@dataclass
class FakeCache:
    """``slots`` device slots; an adapter holds one while requests use it (``inflight``)."""

    slots: int
    registered: set[str] = field(default_factory=set)
    resident: set[str] = field(default_factory=set)
    inflight: dict[str, int] = field(default_factory=dict)
    pins: set[str] = field(default_factory=set)

    def get(self, name: str) -> object | None:
        return name if name in self.registered else None

    def can_fit(self, names: set[str]) -> bool:
        needed = [n for n in names if n not in self.resident]
        free = self.slots - len(self.resident)
        evictable = sum(1 for n in self.resident
                        if n not in names and not self.inflight.get(n) and n not in self.pins)  # fmt: skip
        return len(needed) <= free + evictable

    def hold(self, name: str) -> object:
        if name not in self.registered:
            raise KeyError(name)
        self.inflight[name] = self.inflight.get(name, 0) + 1
        if name not in self.resident:
            if len(self.resident) >= self.slots:
                victim = next(n for n in self.resident
                              if not self.inflight.get(n) and n not in self.pins)  # fmt: skip
                self.resident.discard(victim)
            self.resident.add(name)
        return name

    def release(self, name: str) -> None:
        self.inflight[name] -= 1

    def pinned(self, name: str) -> bool:
        return name in self.pins


def request(adapter: str | None, tokens: int = 4, deadline: float = 100.0) -> GenRequest:
    r = GenRequest(adapter=adapter, input_ids=[1] * tokens, params=GenParams(), arrival=0.0)
    r.deadline = deadline
    return r


def run(scheduler: Scheduler, running: list[GenRequest], now: float = 1.0):
    failures: list[tuple[GenRequest, EngineError]] = []
    admitted = scheduler.admit(running, now, lambda r, e: failures.append((r, e)))
    return admitted, failures


def test_first_come_first_served_up_to_the_batch_size() -> None:
    s = Scheduler(FakeCache(slots=4, registered={"a"}), max_batch_size=3)
    reqs = [request(None), request("a"), request(None), request("a")]
    for r in reqs:
        s.add(r)
    admitted, _ = run(s, running=[request(None)])
    assert admitted == reqs[:2], "one row already runs: two more fit in a batch of three"
    assert s.waiting == reqs[2:]


def test_the_prefill_budget_bounds_one_iteration_but_never_blocks_a_long_prompt() -> None:
    s = Scheduler(FakeCache(slots=4), max_batch_size=16, max_prefill_tokens=100)
    long, short = request(None, tokens=500), request(None, tokens=10)
    s.add(long)
    s.add(short)
    admitted, _ = run(s, running=[])
    assert admitted == [long], "a prompt over the budget still runs, alone"
    admitted, _ = run(s, running=[long])
    assert admitted == [short]


def test_static_waves_admit_only_into_an_empty_batch() -> None:
    s = Scheduler(FakeCache(slots=4), max_batch_size=8, continuous=False)
    s.add(request(None))
    assert run(s, running=[request(None)])[0] == []
    assert len(run(s, running=[])[0]) == 1


def test_requests_join_while_their_adapter_fits_and_the_others_wait() -> None:
    cache = FakeCache(slots=2, registered={"a", "b", "c"})
    s = Scheduler(cache, max_batch_size=16)
    a, b, c, a2 = request("a"), request("b"), request("c"), request("a")
    for r in (a, b, c, a2):
        s.add(r)
    admitted, _ = run(s, running=[])
    assert admitted == [a, b, a2], "c needs a third slot; a second request of a shares a's"
    assert s.waiting == [c]


def test_a_request_blocked_on_slots_drains_one_adapter_and_then_runs() -> None:
    cache = FakeCache(slots=2, registered={"a", "b", "c"})
    s = Scheduler(cache, max_batch_size=16)
    first = [request("a"), request("b"), request("b")]
    for r in first:
        s.add(r)
    running, _ = run(s, running=[])
    c = request("c")
    s.add(c)
    assert run(s, running)[0] == []
    assert s.draining == "a", "a has the fewest running rows"
    # More requests for the resident adapters: b's join, a's wait (it drains).
    a_late, b_late = request("a"), request("b")
    s.add(a_late)
    s.add(b_late)
    admitted, _ = run(s, running)
    assert admitted == [b_late]
    running.append(b_late)
    # a's only row finishes: its slot frees and c, first in line, takes it.
    running.remove(first[0])
    cache.release("a")
    admitted, _ = run(s, running)
    assert admitted == [c]
    assert s.waiting == [a_late] and s.draining is None, "a is done draining"
    # a's late request now needs a slot that b and c hold: the next step drains b (c's rows
    # are not running yet in this fake, b's are).
    assert run(s, running)[0] == [] and s.draining == "b"


def test_pinned_adapters_are_never_drained() -> None:
    cache = FakeCache(slots=2, registered={"p", "b", "c"}, pins={"p"})
    s = Scheduler(cache, max_batch_size=16)
    for r in (request("p"), request("b"), request("b")):
        s.add(r)
    running, _ = run(s, running=[])
    s.add(request("c"))
    run(s, running)
    assert s.draining == "b"


def test_cancelled_late_and_unregistered_requests_fail_out_of_the_queue() -> None:
    s = Scheduler(FakeCache(slots=2, registered={"a"}), max_batch_size=16)
    gone, late, unknown, ok = request(None), request(None, deadline=0.5), request("x"), request("a")
    gone.cancel()
    for r in (gone, late, unknown, ok):
        s.add(r)
    admitted, failures = run(s, running=[], now=1.0)
    assert admitted == [ok]
    assert {id(r): e.status for r, e in failures} == {
        id(gone): 499,
        id(late): 504,
        id(unknown): 404,
    }
    assert not s.waiting


def test_the_adapter_drained_is_the_one_done_soonest() -> None:
    """Draining an adapter whose row has 250 tokens to go would keep the blocked request
    waiting for them; the one with 5 to go frees its slot first, though it has more rows."""
    cache = FakeCache(slots=2, registered={"a", "b", "c"})
    s = Scheduler(cache, max_batch_size=16)
    long_a = request("a")
    long_a.params = GenParams(max_new_tokens=256)
    short_b = [request("b"), request("b")]
    for r in short_b:
        r.params = GenParams(max_new_tokens=8)
        r.output_ids = [1, 2, 3]
    for r in (long_a, *short_b):
        s.add(r)
    running, _ = run(s, running=[])
    s.add(request("c"))
    run(s, running)
    assert s.draining == "b"
