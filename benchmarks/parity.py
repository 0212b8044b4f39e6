"""Parity with vLLM's own server: the runtime against ``vllm serve``, side by side in one run.

    .venv/bin/python benchmarks/parity.py [--quick] [--device cuda --model-dir DIR --rank 64 ...]

Both servers get the same model, the same adapters, the same engine settings (device slots
fewer than the adapters, host slots, slot rank, batch, model length, KV cache, dtype, seed) and
the same CPU environment (every core, Intel OpenMP: ``runtime.hardware``). Both run at once and
their bursts are interleaved, in alternating order with the other server idle, so that a shared
machine's drift falls on both alike; the best burst of each is kept. Each serves the same Zipf workload over more adapters than device
slots, all submitted at once, buffered and then streamed:

- the runtime as SageMaker runs it (``python -m runtime serve``, ``POST /invocations`` with the
  adapter header, ``details`` for the token ids);
- vLLM's OpenAI server (``python -m vllm.entrypoints.openai.api_server --enable-lora
  --lora-modules ...``, ``POST /v1/completions`` with the same prompt token ids and
  ``return_token_ids``).

Answers are greedy and compared token for token (buffered) and text for text (streamed). The
goal: the runtime's throughput at least ``--goal`` (0.95) of vLLM's on both workloads, with every
answer identical; the script exits 1 otherwise. On the CPU both servers load the project's
CPU LoRA ops (``runtime.vllm_cpu_lora``, a vLLM plugin every vLLM process of this environment
loads), so this compares the servers, not the ops. With ``--device cuda`` and the deployed
settings (``--rank 64 --max-loras 16 --max-num-seqs 53``) it is the GPU check, on a machine with
vLLM's CUDA build and a GPU. It writes its section of benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.results import cores, write_section

HEADING = "## Parity with vLLM's own server (`benchmarks/parity.py`)"


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_env(device: str, kv_gib: int) -> dict[str, str]:
    """What the runtime gives vLLM's CPU build (every core, Intel OpenMP), given to both."""
    from runtime.hardware import cpu_environment, iomp_library

    if device != "cpu":
        return {}
    env = cpu_environment("all", kv_gib)
    if (lib := iomp_library()) is not None:
        env["LD_PRELOAD"] = str(lib)
    return env


class Server:
    def __init__(self, argv: list[str], env: dict[str, str], health: str, log: Path) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        argv = [a.replace("{port}", str(self.port)) for a in argv]
        self.log = log
        with log.open("w") as out:
            self.proc = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **env}
            )
        t0 = time.time()
        while time.time() - t0 < 600:
            try:
                if httpx.get(self.url + health, timeout=2).status_code == 200:
                    self.started_s = time.time() - t0
                    return
            except httpx.TransportError:
                pass
            if self.proc.poll() is not None:
                raise SystemExit(f"{argv[2]} did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.5)
        self.stop()
        raise SystemExit(f"{argv[2]} did not answer {health} in 600 s")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()


async def _runtime_one(client: httpx.AsyncClient, adapter: str, text: str, n: int, stream: bool):
    body = {"inputs": text, "parameters": {"max_new_tokens": n, "details": True}}
    headers = {"X-Amzn-SageMaker-Adapter-Identifier": adapter}
    if not stream:
        r = await client.post("/invocations", json=body, headers=headers)
        r.raise_for_status()
        out = r.json()
        return out["token_ids"], out["generated_text"]
    pieces, ids = [], []
    async with client.stream(
        "POST", "/invocations", json={**body, "stream": True}, headers=headers
    ) as r:
        r.raise_for_status()
        async for line in r.aiter_lines():
            if not line.strip():
                continue
            item = json.loads(line)
            if "error" in item:
                raise RuntimeError(item["error"])
            if isinstance(item.get("token"), str):
                pieces.append(item["token"])
            if item.get("done"):
                ids = item.get("token_ids", [])
    return ids, "".join(pieces)


async def _vllm_one(client: httpx.AsyncClient, adapter: str, ids: list[int], n: int, stream: bool):
    body = {
        "model": adapter,
        "prompt": ids,
        "max_tokens": n,
        "temperature": 0,
        "seed": 0,
        "return_token_ids": True,
    }
    if not stream:
        r = await client.post("/v1/completions", json=body)
        r.raise_for_status()
        choice = r.json()["choices"][0]
        return choice.get("token_ids") or [], choice["text"]
    pieces, out_ids = [], []
    async with client.stream("POST", "/v1/completions", json={**body, "stream": True}) as r:
        r.raise_for_status()
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            choice = json.loads(line[6:])["choices"][0]
            pieces.append(choice.get("text") or "")
            out_ids += choice.get("token_ids") or []
    return out_ids, "".join(pieces)


async def burst(kind: str, url: str, jobs: list, stream: bool) -> tuple[float, list]:
    """Every job at once; the wall time and the answers in job order."""
    limits = httpx.Limits(max_connections=len(jobs) + 4)
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as client:
        t0 = time.perf_counter()
        if kind == "runtime":
            coros = [_runtime_one(client, a, text, n, stream) for a, text, _, n in jobs]
        else:
            coros = [_vllm_one(client, a, ids, n, stream) for a, _, ids, n in jobs]
        answers = await asyncio.gather(*coros)
        return time.perf_counter() - t0, answers


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="fewer requests")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--model-dir", type=Path, help="default: the bench model, built here")
    ap.add_argument("--adapters", type=int, default=8)
    ap.add_argument("--rank", type=int, default=16, help="the slot rank (max_lora_rank)")
    ap.add_argument("--max-loras", type=int, default=4, help="device slots (fewer than adapters)")
    ap.add_argument("--max-cpu-loras", type=int, default=8)
    ap.add_argument("--max-num-seqs", type=int, default=16)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--kv-gib", type=int, default=2)
    ap.add_argument("--goal", type=float, default=0.95)
    ap.add_argument("--repeats", type=int, default=2, help="bursts per workload (best kept)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "RESULTS.md")
    args = ap.parse_args(argv)

    import torch
    from transformers import AutoTokenizer

    from benchmarks.serving import make_adapters
    from training import datasets
    from training.base import build_base

    torch.manual_seed(0)
    work = Path(tempfile.mkdtemp(prefix="bench-parity-"))
    base = args.model_dir or build_base(ROOT / ".artifacts" / "base" / "bench", "bench", 0, print)
    paths = make_adapters(base, work, args.adapters)
    names = list(paths)
    tok = AutoTokenizer.from_pretrained(base)
    rng = random.Random(11)
    weights = [1 / (k + 1) ** 1.1 for k in range(len(names))]
    n_req = 24 if args.quick else 48
    texts = [r.raw for t in ("medical_shorthand", "style_transfer") for r in datasets.load(t).test]
    jobs = []
    for i in range(n_req):
        text = texts[i % len(texts)]
        ids = tok(text, split_special_tokens=True)["input_ids"]
        jobs.append((rng.choices(names, weights=weights)[0], text, ids, rng.randint(8, 48)))
    max_len = 768
    env = cpu_env(args.device, args.kv_gib)
    results: dict[str, dict] = {}

    runtime_argv = [
        sys.executable,
        "-m",
        "runtime",
        "serve",
        "--model-dir",
        str(base),
        "--host",
        "127.0.0.1",
        "--port",
        "{port}",
    ]
    runtime_env = {
        "OPTION_WORK_DIR": str(work / "work"),
        "OPTION_MAX_LORAS": str(args.max_loras),
        "OPTION_MAX_CPU_LORAS": str(args.max_cpu_loras),
        "OPTION_MAX_LORA_RANK": str(args.rank),
        "OPTION_MAX_BATCH_SIZE": str(args.max_num_seqs),
        "OPTION_MAX_INPUT_TOKENS": "512",
        "OPTION_MAX_NEW_TOKENS": "256",
        "OPTION_DTYPE": args.dtype,
        "OPTION_CPU_KVCACHE_GIB": str(args.kv_gib),
    }
    vllm_argv = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(base),
        "--tokenizer",
        str(base),
        "--host",
        "127.0.0.1",
        "--port",
        "{port}",
        "--enable-lora",
        "--max-loras",
        str(args.max_loras),
        "--max-cpu-loras",
        str(args.max_cpu_loras),
        "--max-lora-rank",
        str(args.rank),
        "--max-num-seqs",
        str(args.max_num_seqs),
        "--max-model-len",
        str(max_len),
        "--max-num-batched-tokens",
        str(max(4096, max_len)),
        "--dtype",
        args.dtype,
        "--seed",
        "0",
        "--lora-modules",
        *(f"{n}={p}" for n, p in paths.items()),
    ]
    servers: dict[str, Server] = {}
    try:
        # Both up at once, then the bursts interleaved (each pair in alternating order, the
        # other server idle): drift on a shared machine falls on both alike.
        for key, argv_, health, extra in (
            ("vllm", vllm_argv, "/health", {}),
            ("runtime", runtime_argv, "/ping", runtime_env),
        ):
            print(f"starting {key} ...", flush=True)
            servers[key] = Server(argv_, {**env, **extra}, health, work / f"{key}.log")
        for n, p in paths.items():
            r = httpx.post(
                servers["runtime"].url + "/adapters", json={"name": n, "src": str(p)}, timeout=300
            )
            r.raise_for_status()
        warm = [(n, "warm up", tok("warm up")["input_ids"], 4) for n in names]
        for key, server in servers.items():
            asyncio.run(burst(key, server.url, warm, False))
            results[key] = {"started_s": server.started_s}
        for stream in (False, True):
            mode = "stream" if stream else "buffered"
            for i in range(args.repeats):
                order = ("runtime", "vllm") if i % 2 == 0 else ("vllm", "runtime")
                for key in order:
                    time.sleep(3)  # the other engine's busy-poll winds down
                    wall, answers = asyncio.run(burst(key, servers[key].url, jobs, stream))
                    tps = sum(len(ids) for ids, _ in answers) / wall
                    best = results[key].get(mode, {"tokens_per_s": 0.0})
                    if tps > best["tokens_per_s"]:
                        results[key][mode] = {"tokens_per_s": tps, "answers": answers}
                    print(f"  {mode} {key}: {tps:.1f} tok/s", flush=True)
    finally:
        for server in servers.values():
            server.stop()

    rows, ok = [], True
    for mode in ("buffered", "stream"):
        ours, theirs = results["runtime"][mode], results["vllm"][mode]
        ratio = ours["tokens_per_s"] / theirs["tokens_per_s"]
        if mode == "buffered":
            same = sum(
                a[0] == b[0] for a, b in zip(ours["answers"], theirs["answers"], strict=True)
            )
        else:
            same = sum(
                a[1] == b[1] for a, b in zip(ours["answers"], theirs["answers"], strict=True)
            )
        identical = same == len(jobs)
        ok &= ratio >= args.goal and identical
        rows.append(
            f"| {mode} | {ours['tokens_per_s']:.1f} | {theirs['tokens_per_s']:.1f} | "
            f"{ratio:.2f} (goal >= {args.goal}) | {same}/{len(jobs)} "
            f"{'token for token' if mode == 'buffered' else 'text for text'} |"
        )
    table = "\n".join(
        [
            "| workload | runtime tok/s | vllm serve tok/s | ratio | identical answers |",
            "|---|---|---|---|---|",
            *rows,
        ]
    )
    starts = (
        f"start-up to health: runtime {results['runtime']['started_s']:.1f} s, vllm serve "
        f"{results['vllm']['started_s']:.1f} s"
    )
    print(table)
    print(starts)
    print("goal met" if ok else "GOAL MISSED")
    write_section(
        args.out,
        HEADING,
        f"{HEADING}\n\nCommand: `.venv/bin/python benchmarks/parity.py "
        f"{' '.join(argv or sys.argv[1:])}` ({time.strftime('%Y-%m-%d')}, {cores()} cores, "
        f"{args.device}). The bench model and {args.adapters} random rank-16 adapters on all "
        f"linear layers, {args.max_loras} device slots, {args.max_cpu_loras} host slots, slot rank "
        f"{args.rank}, batch {args.max_num_seqs}, {args.dtype}; {len(jobs)} Zipf(1.1) requests "
        "of 8 to 48 greedy tokens, all at once, best of "
        f"{args.repeats} bursts per workload, interleaved between the two servers. "
        f"{starts}. " + ("Goal met." if ok else "**Goal missed.**") + "\n\n" + table + "\n",
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
