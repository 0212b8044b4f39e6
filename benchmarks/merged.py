"""Merged against unmerged serving of one adapter (``serving: merged``), side by side in one run.

    .venv/bin/python benchmarks/merged.py [--quick]

One bench-size Qwen3 model (~27 M parameters, random weights: speed does not depend on their
values) in float32 and one random rank-16 LoRA adapter on every linear layer, with a manifest
(name, version, the medical task's system prompt) as ``training.train`` writes it. The adapter
is served twice by the runtime (``python -m runtime serve``, vLLM's CPU build), one server
after the other on the same machine:

- unmerged: the base with LoRA enabled and the adapter registered, requests naming it;
- merged: ``training.merge``'s output (PEFT's ``merge_and_unload``) with ``OPTION_ENABLE_LORA=
  false``, requests naming no adapter, as its own component on SageMaker receives them.

Measured for each: per-token latency at batch 1 (one request at a time) and throughput at batch
8 (eight at once), fixed output lengths; then the greedy answers to the medical task's test
split (64 inputs, up to 32 new tokens), compared token for token: the share equal and each
differing request's first differing position. The script prints one table, writes its section
of benchmarks/RESULTS.md, and exits 1 when fewer than 95% of the answers are equal (a merged
model must answer as its adapter does) or a request fails.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.results import cores, write_section
from benchmarks.serving import BenchmarkError, first_difference, make_adapters
from config.tasks import TASK_PROFILES
from contracts.manifests import AdapterManifest, BaseManifest, BaseRef, PromptFormat
from tests.runtime.conftest import start_server, stop_server
from training import datasets
from training.base import build_base
from training.merge import merge
from training.package import pack, write_manifest

HEADING = "## Merged against unmerged serving (`benchmarks/merged.py`)"
EQUAL_GOAL = 0.95
ADAPTER = "notes"


def make_archive(base: Path, work: Path) -> Path:
    out = make_adapters(base, work, 1)["a0"]  # random rank-16, every linear layer
    built = BaseManifest.read(base)
    system = TASK_PROFILES["medical_shorthand"].instruction
    write_manifest(
        out,
        AdapterManifest(
            name=ADAPTER,
            version="1.0.0",
            base=BaseRef(
                model_id=built.model_id,
                revision=built.revision,
                tokenizer_sha256=built.tokenizer_sha256,
            ),
            prompt=PromptFormat(format="chat", system=system),
        ),
    )
    archive = work / f"{ADAPTER}.tar.gz"
    pack(out, archive)
    return archive


async def _ask(
    client: httpx.AsyncClient, adapter: str | None, text: str, n: int, fixed: bool
) -> dict:
    params = {"max_new_tokens": n, "details": True, **({"min_new_tokens": n} if fixed else {})}
    headers = {"X-Amzn-SageMaker-Adapter-Identifier": adapter} if adapter else {}
    r = await client.post(
        "/invocations", json={"inputs": text, "parameters": params}, headers=headers
    )
    if r.status_code != 200:
        raise BenchmarkError(f"{adapter or 'merged'}: {r.status_code} {r.text[:200]}")
    out = r.json()
    if fixed and len(out["token_ids"]) != n:
        raise BenchmarkError(f"{len(out['token_ids'])} tokens, {n} asked")
    if (out.get("artifact") or {}).get("name") != ADAPTER:
        raise BenchmarkError(f"the answer reports {out.get('artifact')}, not {ADAPTER}")
    return out


async def _measure(
    url: str, adapter: str | None, texts: list[str], n: int, rounds: int
) -> dict[str, object]:
    async with httpx.AsyncClient(base_url=url, timeout=600) as client:
        await _ask(client, adapter, "warm up", 4, True)
        per_token = []
        for text in texts[:rounds]:
            t0 = time.perf_counter()
            await _ask(client, adapter, text, n, True)
            per_token.append((time.perf_counter() - t0) * 1000 / n)
        batch8 = 0.0
        for i in range(0, 8 * max(1, rounds // 4), 8):
            t0 = time.perf_counter()
            outs = await asyncio.gather(
                *(_ask(client, adapter, t, n, True) for t in texts[i : i + 8])
            )
            batch8 = max(
                batch8, sum(len(o["token_ids"]) for o in outs) / (time.perf_counter() - t0)
            )
        answers = []
        for text in texts:
            answers.append((await _ask(client, adapter, text, 32, False))["token_ids"])
    per_token.sort()
    return {
        "ms_per_token_b1": per_token[len(per_token) // 2],
        "tok_s_b8": batch8,
        "answers": answers,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="fewer rounds (a smoke run)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "RESULTS.md")
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="bench-merged-"))
    base = build_base(ROOT / ".artifacts" / "base" / "bench", "bench", 0, print)
    archive = make_archive(base, work)
    merged_dir = work / "merged-model"
    t0 = time.perf_counter()
    merge(base, archive, merged_dir)
    merge_s = time.perf_counter() - t0
    texts = [r.raw for r in datasets.load("medical_shorthand").test]
    rounds, n = (8, 32) if args.quick else (16, 64)
    options = {
        "OPTION_MAX_BATCH_SIZE": "8",
        "OPTION_MAX_INPUT_TOKENS": "512",
        "OPTION_MAX_NEW_TOKENS": "256",
        "OPTION_CPU_KVCACHE_GIB": "2",
    }
    results: dict[str, dict[str, object]] = {}
    for kind in ("unmerged", "merged"):
        (work / kind).mkdir()
        if kind == "unmerged":
            server = start_server(
                base,
                work / kind,
                OPTION_MAX_LORAS="1",
                OPTION_MAX_CPU_LORAS="1",
                OPTION_MAX_LORA_RANK="16",
                **options,
            )
            extracted = work / "adapter"
            with tarfile.open(archive) as tar:
                tar.extractall(extracted, filter="data")
            r = server.client.post("/adapters", json={"name": ADAPTER, "src": str(extracted)})
            if r.status_code != 200:
                raise BenchmarkError(r.text)
            adapter: str | None = ADAPTER
        else:
            server = start_server(merged_dir, work / kind, OPTION_ENABLE_LORA="false", **options)
            adapter = None
        try:
            results[kind] = asyncio.run(_measure(server.url, adapter, texts, n, rounds))
            results[kind]["startup_s"] = server.started_s
        finally:
            stop_server(server)

    a, b = results["unmerged"]["answers"], results["merged"]["answers"]
    differ = [
        (i, first_difference(x, y)) for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y
    ]  # type: ignore[arg-type]
    share = 1 - len(differ) / len(a)  # type: ignore[arg-type]
    u, m = results["unmerged"], results["merged"]
    rows = [
        (
            "per-token latency, batch 1 (median, ms)",
            f"{u['ms_per_token_b1']:.2f}",
            f"{m['ms_per_token_b1']:.2f}",
            f"{u['ms_per_token_b1'] / m['ms_per_token_b1']:.2f}x",
        ),  # type: ignore[operator]
        (
            "throughput, batch 8 (tokens/s)",
            f"{u['tok_s_b8']:.1f}",
            f"{m['tok_s_b8']:.1f}",
            f"{m['tok_s_b8'] / u['tok_s_b8']:.2f}x",
        ),  # type: ignore[operator]
        ("start-up until /ping (s)", f"{u['startup_s']:.1f}", f"{m['startup_s']:.1f}", "-"),
    ]
    detail = ", ".join(f"request {i} at token {p}" for i, p in differ[:12]) or "none differ"
    table = [
        "| measure | unmerged (LoRA on the base) | merged | merged's advantage |",
        "|---|---|---|---|",
        *(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} |" for r in rows),
    ]
    verdict = "PASS" if share >= EQUAL_GOAL else "FAIL"
    body = "\n".join(
        [
            HEADING,
            "",
            f"`.venv/bin/python benchmarks/merged.py{' --quick' if args.quick else ''}`, "
            f"{cores()} cores, bench-size Qwen3 (random weights) in float32, one random rank-16 "
            f"all-linear adapter; merging took {merge_s:.1f} s. Per-token latency: {rounds} requests "
            f"of {n} tokens one at a time; batch 8: {max(1, rounds // 4)} bursts of 8.",
            "",
            *table,
            "",
            f"Greedy answers on the medical task's test split ({len(a)} inputs, up to 32 tokens): "
            f"{len(a) - len(differ)}/{len(a)} = {share:.1%} equal (goal >= {EQUAL_GOAL:.0%}, "
            f"{verdict}); first differing positions: {detail}.",
            "",
        ]
    )
    print(body)
    write_section(args.out, HEADING, body)
    return 0 if share >= EQUAL_GOAL else 1


if __name__ == "__main__":
    sys.exit(main())
