"""Fair queuing between senders: one sender's flood does not queue another's request behind it.

The first server plans one sequence at a time (``OPTION_MAX_BATCH_SIZE=1``), so every request
but the running one waits in the fair gate (``runtime.fair_gate``), and the order it leaves the
gate is the order answers end.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from contracts.fairness import custom_attributes
from tests.runtime.conftest import start_server, stop_server

FLOOD, QUIET = custom_attributes("flood-tenant"), custom_attributes("quiet-tenant")


@pytest.fixture(scope="module")
def one_seq_server(tiny_base: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    srv = start_server(
        tiny_base,
        tmp_path_factory.mktemp("fair"),
        OPTION_MAX_BATCH_SIZE="1",
        OPTION_MAX_NEW_TOKENS="512",
        OPTION_CPU_KVCACHE_GIB="1",
    )
    yield srv
    stop_server(srv)


def _admitted(srv) -> float:
    for line in srv.client.get("/metrics").text.splitlines():
        if line.startswith("lora_queue_depth "):
            return float(line.split()[1])
    return 0.0


def test_a_quiet_senders_request_goes_before_a_floods_queued_ones(one_seq_server) -> None:
    srv = one_seq_server
    finished: list[str] = []
    lock = threading.Lock()

    def send(name: str, attributes: str, n: int) -> None:
        body = {"inputs": "count", "parameters": {"max_new_tokens": n, "min_new_tokens": n}}
        headers = {"X-Amzn-SageMaker-Custom-Attributes": attributes}
        with httpx.Client(base_url=srv.url, timeout=300) as client:
            r = client.post("/invocations", json=body, headers=headers)
        assert r.status_code == 200, r.text
        with lock:
            finished.append(name)

    flood = [
        threading.Thread(target=send, args=(f"flood-{i}", FLOOD, 400), daemon=True)
        for i in range(4)
    ]
    for t in flood:
        t.start()
    deadline = time.monotonic() + 60
    while _admitted(srv) < 4:  # all four are in the server: one runs, three wait in the gate
        assert time.monotonic() < deadline, "the flood was never admitted"
        time.sleep(0.01)
    quiet = threading.Thread(target=send, args=("quiet", QUIET, 4), daemon=True)
    quiet.start()
    for t in [*flood, quiet]:
        t.join(timeout=300)
    assert len(finished) == 5, finished
    # First come, first served would answer it last, after every flood request; the fair gate
    # starts it at once beside the running one (an overflow slot), so it ends first.
    assert finished.index("quiet") == 0, finished


def test_one_senders_requests_keep_their_order(one_seq_server) -> None:
    """Within one sender the queue stays first come, first served (priority ties break by
    arrival), so a client's own requests are not reordered."""
    srv = one_seq_server
    finished: list[int] = []

    def send(i: int) -> None:
        body = {"inputs": "count", "parameters": {"max_new_tokens": 60, "min_new_tokens": 60}}
        headers = {"X-Amzn-SageMaker-Custom-Attributes": FLOOD}
        with httpx.Client(base_url=srv.url, timeout=300) as client:
            assert client.post("/invocations", json=body, headers=headers).status_code == 200
        finished.append(i)

    threads = []
    for i in range(3):
        threads.append(threading.Thread(target=send, args=(i,), daemon=True))
        threads[-1].start()
        deadline = time.monotonic() + 60
        while _admitted(srv) < i + 1:
            assert time.monotonic() < deadline
            time.sleep(0.01)
    for t in threads:
        t.join(timeout=300)
    assert finished == [0, 1, 2]


@pytest.fixture(scope="module")
def four_seq_server(tiny_base: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    srv = start_server(
        tiny_base,
        tmp_path_factory.mktemp("fair4"),
        OPTION_MAX_BATCH_SIZE="4",
        OPTION_MAX_NEW_TOKENS="512",
        OPTION_CPU_KVCACHE_GIB="1",
    )
    yield srv
    stop_server(srv)


def test_a_quiet_senders_first_request_does_not_wait_for_the_flood(four_seq_server) -> None:
    """Priority orders only vLLM's waiting queue, and a running sequence keeps its slot: with a
    flood in all 4 slots, a sender that was idle until now waited for a 400-token answer to end.
    The fair gate starts it at once in an overflow slot, so it ends first."""
    srv = four_seq_server
    finished: list[str] = []
    lock = threading.Lock()

    def send(name: str, attributes: str, n: int) -> None:
        body = {"inputs": "count", "parameters": {"max_new_tokens": n, "min_new_tokens": n}}
        headers = {"X-Amzn-SageMaker-Custom-Attributes": attributes}
        with httpx.Client(base_url=srv.url, timeout=300) as client:
            r = client.post("/invocations", json=body, headers=headers)
        assert r.status_code == 200, r.text
        with lock:
            finished.append(name)

    flood = [
        threading.Thread(target=send, args=(f"flood-{i}", FLOOD, 400), daemon=True)
        for i in range(4)
    ]
    for t in flood:
        t.start()
    deadline = time.monotonic() + 60
    while _admitted(srv) < 4:
        assert time.monotonic() < deadline, "the flood was never admitted"
        time.sleep(0.01)
    time.sleep(0.3)  # the flood's first tokens are decoding
    send("quiet", custom_attributes("idle-until-now"), 4)
    for t in flood:
        t.join(timeout=300)
    assert finished[0] == "quiet", finished
    assert sorted(finished[1:]) == [f"flood-{i}" for i in range(4)]


def test_a_sender_alone_fills_the_batch(four_seq_server) -> None:
    """Nothing is held back for other senders: right after another sender's request, one
    sender's four requests all run at once (no throughput lost)."""
    srv = four_seq_server
    body = {"inputs": "count", "parameters": {"max_new_tokens": 200, "min_new_tokens": 200}}
    headers = {"X-Amzn-SageMaker-Custom-Attributes": custom_attributes("alone")}

    def send(out: list) -> None:
        with httpx.Client(base_url=srv.url, timeout=300) as client:
            out.append(client.post("/invocations", json=body, headers=headers).json())

    answers: list[dict] = []
    threads = [threading.Thread(target=send, args=(answers,), daemon=True) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    firsts = sorted(a["timings_ms"]["first_token"] for a in answers)
    totals = sorted(a["timings_ms"]["total"] for a in answers)
    # All four started together: the last first token came long before the first answer ended
    # (a fourth held back would have started only after one of 200 tokens had finished).
    assert firsts[-1] < totals[0] / 2, (firsts, totals)
