"""Adapter churn on the CPU: what a host-tier miss costs the requests already decoding.

    .venv/bin/python benchmarks/churn.py

vLLM keeps ``max_cpu_loras`` adapters in host memory; a request for one it evicted loads it
again from disk inside the engine step (``LRUCacheWorkerLoRAManager.add_adapter``), and every
running sequence waits for that step. The runtime is started with 2 host slots (and 2 device
slots) and 8 registered adapters, so 6 live on disk. A long greedy stream runs on one adapter
while six short requests arrive, 0.4 s apart:

- control: the six ask for the streaming adapter itself (each adds only its prefill to a step);
- churn: the six ask for six adapters on disk (each adds its prefill and a load from disk).

The stream's six largest gaps between tokens in each case are the steps those requests joined;
their difference, per request, is the stall a host-tier miss adds to every running sequence.
Every answer is checked (the adapter that served it, a finish reason), the host-tier misses are
read from the runtime's own metrics (six in churn, none in control), and the script writes its
section of benchmarks/RESULTS.md and exits 1 when a check fails.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.results import cores, write_section

HEADING = "## Adapter churn (`benchmarks/churn.py`)"


async def stream_gaps(url: str, adapter: str, n: int) -> list[float]:
    """Seconds between the stream's tokens."""
    stamps = []
    body = {
        "inputs": "the quick brown fox " * 8,
        "parameters": {"max_new_tokens": n},
        "stream": True,
    }
    headers = {"X-Amzn-SageMaker-Adapter-Identifier": adapter}
    async with (
        httpx.AsyncClient(base_url=url, timeout=300) as client,
        client.stream("POST", "/invocations", json=body, headers=headers) as r,
    ):
        r.raise_for_status()
        async for line in r.aiter_lines():
            if line.strip() and "token" in json.loads(line):
                stamps.append(time.perf_counter())
    return [b - a for a, b in itertools.pairwise(stamps)]


async def _short(url: str, adapter: str) -> dict:
    headers = {"X-Amzn-SageMaker-Adapter-Identifier": adapter}
    body = {"inputs": "a short request", "parameters": {"max_new_tokens": 4}}
    async with httpx.AsyncClient(base_url=url, timeout=300) as client:
        r = await client.post("/invocations", json=body, headers=headers)
        r.raise_for_status()
        return r.json()


async def phase(url: str, stream_adapter: str, joiners: list[str], n: int) -> tuple[list, list]:
    stream = asyncio.create_task(stream_gaps(url, stream_adapter, n))
    await asyncio.sleep(1.0)  # the stream is decoding
    answers = []
    for adapter in joiners:
        answers.append(asyncio.create_task(_short(url, adapter)))
        await asyncio.sleep(0.4)
    return await stream, [await a for a in answers]


def misses(url: str) -> float:
    text = httpx.get(url + "/metrics").text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("lora_adapter_cache_events_total") and 'event="miss"' in line
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--tokens", type=int, default=160, help="the long stream's length")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "RESULTS.md")
    args = ap.parse_args(argv)
    from benchmarks.serving import make_adapters
    from tests.runtime.conftest import start_server, stop_server
    from training.base import build_base

    work = Path(tempfile.mkdtemp(prefix="bench-churn-"))
    base = build_base(ROOT / ".artifacts" / "base" / "bench", "bench", 0, print)
    paths = make_adapters(base, work, 8)
    server = start_server(
        base,
        work,
        OPTION_MAX_LORAS="2",
        OPTION_MAX_CPU_LORAS="2",
        OPTION_MAX_BATCH_SIZE="16",
        OPTION_MAX_INPUT_TOKENS="512",
        OPTION_MAX_NEW_TOKENS="256",
    )
    problems = []
    try:
        for name, path in paths.items():
            server.client.post(
                "/adapters", json={"name": name, "src": str(path)}
            ).raise_for_status()
        names = list(paths)
        hot = names[0]
        asyncio.run(_short(server.url, hot))  # warm: a0 in the host tier
        before = misses(server.url)
        control_gaps, control = asyncio.run(phase(server.url, hot, [hot] * 6, args.tokens))
        control_misses = misses(server.url) - before
        asyncio.run(_short(server.url, hot))
        before = misses(server.url)
        cold = [n for n in names if n != hot][-6:]
        churn_gaps, churn = asyncio.run(phase(server.url, hot, cold, args.tokens))
        churn_misses = misses(server.url) - before
    finally:
        stop_server(server)
    for wanted, answers in (([hot] * 6, control), (cold, churn)):
        for adapter, out in zip(wanted, answers, strict=True):
            if out.get("adapter") != adapter or not out.get("finish_reason"):
                problems.append(
                    f"{adapter}: answered {out.get('adapter')} {out.get('finish_reason')}"
                )
    if control_misses != 0 or churn_misses < 6:
        problems.append(f"host-tier misses: control {control_misses}, churn {churn_misses}")
    top = 6

    def worst(gaps: list[float]) -> float:
        return statistics.mean(sorted(gaps)[-top:]) * 1000

    median = statistics.median(control_gaps) * 1000
    stall = worst(churn_gaps) - worst(control_gaps)
    rows = [
        ("median gap between the stream's tokens (control)", f"{median:.1f} ms"),
        (
            f"its {top} largest gaps, six requests for the same adapter joining",
            f"{worst(control_gaps):.1f} ms",
        ),
        (
            f"its {top} largest gaps, six requests for adapters on disk joining",
            f"{worst(churn_gaps):.1f} ms",
        ),
        ("stall a host-tier miss adds to every running sequence", f"{stall:.1f} ms"),
        (
            "host-tier misses (runtime metrics): control / churn",
            f"{control_misses:g} / {churn_misses:g}",
        ),
    ]
    table = "\n".join(["| measure | value |", "|---|---|", *(f"| {a} | {b} |" for a, b in rows)])
    print(table)
    for p in problems:
        print("CHECK FAILED:", p)
    write_section(
        args.out,
        HEADING,
        f"{HEADING}\n\nCommand: `.venv/bin/python benchmarks/churn.py` ({time.strftime('%Y-%m-%d')}, "
        f"{cores()} cores). The bench model, 8 rank-16 adapters, 2 host and 2 device slots; a "
        f"{args.tokens}-token greedy stream while six 4-token requests join 0.4 s apart. "
        + ("Every check held." if not problems else "**Checks failed:** " + "; ".join(problems))
        + "\n\n"
        + table
        + "\n",
    )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
