"""The fair gate in front of vLLM's batch (``runtime.fair_gate``): nothing held back from a
sender alone, a quiet sender never waits for a flood's sequence to end, mirrors take no share."""

from __future__ import annotations

import asyncio

import pytest

from contracts.fairness import MIRROR_KEY, overflow_slots
from runtime.fair_gate import FairGate, GateTimeoutError


def started(gate: FairGate, key: str) -> asyncio.Task:
    return asyncio.ensure_future(gate.enter(key, 30.0))


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def run(coro) -> None:
    asyncio.run(coro)


def test_a_sender_alone_fills_the_whole_batch() -> None:
    async def main() -> None:
        gate = FairGate(8, overflow_slots(8), last=MIRROR_KEY)
        tasks = [started(gate, "flood") for _ in range(9)]
        await settle()
        assert [t.done() for t in tasks] == [True] * 8 + [False]
        assert gate.running["flood"] == 8  # no quarter kept back for anyone else
        gate.leave("flood")
        await settle()
        assert tasks[8].done()

    run(main())


def test_a_quiet_sender_starts_at_once_while_the_flood_fills_the_batch() -> None:
    async def main() -> None:
        gate = FairGate(8, overflow_slots(8), last=MIRROR_KEY)
        flood = [started(gate, "flood") for _ in range(12)]
        await settle()
        quiet = started(gate, "quiet")
        await settle()
        assert quiet.done(), "the quiet request waited for one of the flood's sequences"
        assert gate.total == 9
        # A second quiet sender at the same moment starts at once too; a third waits.
        second, third = started(gate, "quiet-2"), started(gate, "quiet-3")
        await settle()
        assert second.done() and not third.done()
        third.cancel()
        await settle()
        gate.leave("quiet-2")
        # A flood sequence ends while the quiet one runs: the quiet one is a guest, so the
        # flood refills its batch at once rather than running one short until it ends.
        gate.leave("flood")
        await settle()
        assert sum(t.done() for t in flood) == 9 and gate.total == 9
        gate.leave("quiet")
        await settle()
        assert sum(t.done() for t in flood) == 9 and gate.total == 8 and not gate.guests

    run(main())


def test_the_sender_with_fewest_running_goes_first_and_one_senders_order_holds() -> None:
    async def main() -> None:
        gate = FairGate(2, 0)
        order: list[str] = []

        async def one(key: str, name: str) -> None:
            await gate.enter(key, 30.0)
            order.append(name)

        for _ in range(2):
            await gate.enter("flood", 30.0)
        tasks = [asyncio.ensure_future(one("flood", f"flood-{i}")) for i in range(3)]
        await settle()
        tasks.append(asyncio.ensure_future(one("quiet", "quiet")))
        await settle()
        gate.leave("flood")  # one slot: the quiet sender (none running) before the flood's
        await settle()
        gate.leave("flood")
        gate.leave("flood")
        await settle()
        gate.leave("quiet")
        await settle()
        assert order == ["quiet", "flood-0", "flood-1", "flood-2"]

    run(main())


def test_mirrors_never_take_an_overflow_slot_and_start_after_callers() -> None:
    async def main() -> None:
        gate = FairGate(2, 1, last=MIRROR_KEY)
        for _ in range(2):
            await gate.enter("tenant", 30.0)
        mirror = started(gate, MIRROR_KEY)
        await settle()
        assert not mirror.done(), "a mirror took the overflow slot a caller would have"
        waiting = started(gate, "tenant")
        await settle()
        gate.leave("tenant")
        await settle()
        assert waiting.done() and not mirror.done()
        gate.leave("tenant")
        await settle()
        assert mirror.done()

    run(main())


def test_a_request_past_its_deadline_counts_nothing() -> None:
    async def main() -> None:
        gate = FairGate(1, 0)
        await gate.enter("a", 1.0)
        with pytest.raises(GateTimeoutError):
            await gate.enter("a", 0.05)
        assert gate.waiting == 0 and gate.running == {"a": 1}
        cancelled = started(gate, "a")
        await settle()
        cancelled.cancel()
        await settle()
        gate.leave("a")
        assert gate.waiting == 0 and gate.total == 0

    run(main())


def test_the_overflow_is_a_quarter_of_the_batch_at_least_two() -> None:
    assert [overflow_slots(b) for b in (1, 4, 8, 69, 256)] == [2, 2, 2, 17, 64]
