"""Serving benchmark: the runtime engine against the seed article's one-at-a-time approach.

Runs every case side by side in one process on a locally built bench-size Qwen3 model
(~27 M parameters, random weights: speed does not depend on their values) with random rank-16
LoRA adapters on all linear layers, prints one table and writes benchmarks/RESULTS.md.
The engine is driven in-process (no HTTP), so the numbers are the engine's, not the network's.

    .venv/bin/python benchmarks/serving.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from peft import LoraConfig, PeftModel, get_peft_model
from transformers import AutoModelForCausalLM, AutoTokenizer

from runtime.engine import Engine
from runtime.request import GenParams, GenRequest
from runtime.settings import Settings
from training.base import build_base

ALL = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
PROMPT = "pt 67yo f c/o sob and cp x3d. pmh htn, dm2. plan cxr, asa po qd, f/u 2wk."


def make_adapters(base: Path, out: Path, n: int) -> list[Path]:
    paths = []
    for i in range(n):
        torch.manual_seed(1000 + i)
        model = get_peft_model(
            AutoModelForCausalLM.from_pretrained(base),
            LoraConfig(r=16, lora_alpha=32, target_modules=ALL),
        )
        for name, p in model.named_parameters():
            if "lora_B" in name:
                torch.nn.init.normal_(p, std=0.02)
        model.save_pretrained(out / f"a{i}")
        paths.append(out / f"a{i}")
    return paths


def run(engine: Engine, jobs: list[tuple[str | None, int]]) -> tuple[float, list[float], int]:
    """Submit all jobs at once; returns (wall seconds, per-request latency seconds, tokens)."""
    ids = engine.encode(PROMPT, None)
    t0 = time.perf_counter()
    reqs = [
        engine.submit(
            GenRequest(
                adapter=a, input_ids=ids, params=GenParams(max_new_tokens=n, min_new_tokens=n)
            )
        )
        for a, n in jobs
    ]
    lat, tokens = [], 0
    for r in reqs:
        engine.wait(r, timeout=600)
        lat.append(r.timings["total"] / 1000)
        tokens += len(r.output_ids)
    return time.perf_counter() - t0, lat, tokens


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


class SeedApproach:
    """The seed article's server: one request at a time; load_adapter if missing (LRU cap),
    set_adapter, generate."""

    def __init__(self, base: Path, slots: int) -> None:
        self.tok = AutoTokenizer.from_pretrained(base)
        self.base = AutoModelForCausalLM.from_pretrained(base).eval()
        self.model: PeftModel | None = None
        self.loaded: list[str] = []
        self.slots = slots

    def generate(self, name: str, path: Path, n: int) -> int:
        if self.model is None:
            self.model = PeftModel.from_pretrained(self.base, path, adapter_name=name)
            self.loaded.append(name)
        elif name not in self.loaded:
            if len(self.loaded) >= self.slots:
                self.model.delete_adapter(self.loaded.pop(0))
            self.model.load_adapter(path, adapter_name=name)
            self.loaded.append(name)
        else:
            self.loaded.remove(name)
            self.loaded.append(name)
        self.model.set_adapter(name)
        ids = self.tok(PROMPT, return_tensors="pt")
        with torch.inference_mode():
            out = self.model.generate(**ids, max_new_tokens=n, min_new_tokens=n, do_sample=False)
        return out.shape[1] - ids["input_ids"].shape[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="fewer requests (smoke run)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "RESULTS.md")
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    work = Path(tempfile.mkdtemp(prefix="bench-serving-"))
    t_build = time.perf_counter()
    base = build_base(ROOT / ".artifacts" / "base" / "bench", preset="bench", log=print)
    n_adapters = 12
    paths = make_adapters(base, work, n_adapters)
    names = [f"a{i}" for i in range(n_adapters)]
    print(f"bench model and {n_adapters} adapters ready in {time.perf_counter() - t_build:.1f} s")
    new = 8 if args.quick else 16
    rows: list[tuple[str, str, str]] = []
    results: dict[str, float] = {}

    def engine_with(max_loras: int, model_dir: Path = base) -> Engine:
        eng = Engine(Settings(model_dir=model_dir, max_loras=max_loras, max_cpu_loras=64,
                              max_batch_size=32, work_dir=work / "w"))  # fmt: skip
        eng.start()
        return eng

    # a. switch cost ---------------------------------------------------------------------------
    eng = engine_with(8)
    for n, p in zip(names, paths, strict=True):
        eng.cache.register(eng.cache.validate(n, p), pin=False)
    for n in names[:2]:
        run(eng, [(n, 2)])
    reps = 6 if args.quick else 15
    same, other = [], []
    for _ in range(reps):
        run(eng, [("a0", new)])
        same.append(run(eng, [("a0", new)])[1][0])
        run(eng, [("a1", new)])
        other.append(run(eng, [("a0", new)])[1][0])
    results["switch_ratio"] = statistics.median(other) / statistics.median(same)
    rows.append(("a. switch cost (resident)", "after same adapter / after a different one",
                 f"{statistics.median(same) * 1000:.1f} ms / {statistics.median(other) * 1000:.1f} ms"
                 f" -> ratio {results['switch_ratio']:.3f} (goal <= 1.05)"))  # fmt: skip

    # b. mixed batches -------------------------------------------------------------------------
    for n in names[:8]:
        run(eng, [(n, 1)])
    one_tps, mixed_tps = [], []
    for _ in range(2 if args.quick else 4):
        wall, _, tok = run(eng, [("a0", new)] * 8)
        one_tps.append(tok / wall)
        wall, _, tok = run(eng, [(n, new) for n in names[:8]])
        mixed_tps.append(tok / wall)
    results["mixed_ratio"] = statistics.median(mixed_tps) / statistics.median(one_tps)
    rows.append(("b. 8 concurrent requests", "8 distinct adapters vs one adapter",
                 f"{statistics.median(mixed_tps):.1f} vs {statistics.median(one_tps):.1f} tok/s"
                 f" -> ratio {results['mixed_ratio']:.2f} (goal >= 0.8)"))  # fmt: skip
    eng.stop()

    # c. Zipf workload, more adapters than device slots -----------------------------------------
    rng = random.Random(7)
    weights = [1 / (k + 1) ** 1.1 for k in range(n_adapters)]
    n_req = 24 if args.quick else 64
    workload = rng.choices(names, weights=weights, k=n_req)
    eng = engine_with(4)
    for n, p in zip(names, paths, strict=True):
        eng.cache.register(eng.cache.validate(n, p), pin=False)
    wall, lat, tok = run(eng, [(n, new) for n in workload])
    ours = (tok / wall, pct(lat, 0.5), pct(lat, 0.99))
    eng.stop()
    seed = SeedApproach(base, slots=4)
    t0 = time.perf_counter()
    seed_lat, seed_tok = [], 0
    for n in workload:
        seed_tok += seed.generate(n, paths[names.index(n)], new)
        seed_lat.append(time.perf_counter() - t0)  # all arrived at t0, served one at a time
    seed_wall = time.perf_counter() - t0
    theirs = (seed_tok / seed_wall, pct(seed_lat, 0.5), pct(seed_lat, 0.99))
    results["zipf_throughput_ratio"] = ours[0] / theirs[0]
    results["zipf_p99_ours_s"], results["zipf_p99_seed_s"] = ours[2], theirs[2]
    rows.append((f"c. Zipf(1.1), {n_req} requests, {n_adapters} adapters, 4 slots",
                 "runtime vs seed (set_adapter + generate)",
                 f"{ours[0]:.1f} vs {theirs[0]:.1f} tok/s -> {results['zipf_throughput_ratio']:.2f}x;"
                 f" p50 {ours[1]:.2f}/{theirs[1]:.2f} s; p99 {ours[2]:.2f}/{theirs[2]:.2f} s"))  # fmt: skip

    # d. cold start --------------------------------------------------------------------------
    eng = engine_with(2)
    eng.cache.register(eng.cache.validate("cold", paths[0]), pin=False)
    eng.cache.get("cold").host = None  # force the disk path
    disk = run(eng, [("cold", 1)])[1][0]
    disk_load = eng.cache.get("cold").last_load_ms["disk"]
    eng.cache.register(eng.cache.validate("warm", paths[1]), pin=False)
    host = run(eng, [("warm", 1)])[1][0]
    host_load = eng.cache.get("warm").last_load_ms["host"]
    resident = run(eng, [("warm", 1)])[1][0]
    eng.stop()
    t0 = time.perf_counter()
    reload = Engine(Settings(model_dir=base, max_loras=2, work_dir=work / "w"))
    reload.load()
    base_reload = time.perf_counter() - t0
    rows.append(("d. cold start (1-token request)", "disk / host / resident; base reload",
                 f"{disk * 1000:.1f} (load {disk_load:.1f}) / {host * 1000:.1f} (load {host_load:.1f})"
                 f" / {resident * 1000:.1f} ms; base reload {base_reload * 1000:.0f} ms"))  # fmt: skip

    # e. unmerged vs merged ------------------------------------------------------------------
    merged_dir = work / "merged"
    merged = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), paths[0])
    merged.merge_and_unload().save_pretrained(merged_dir)
    AutoTokenizer.from_pretrained(base).save_pretrained(merged_dir)
    per_token = {}
    for label, model_dir, adapter in (("unmerged", base, "a0"), ("merged", merged_dir, None)):
        eng = engine_with(2, model_dir)
        if adapter:
            eng.cache.register(eng.cache.validate(adapter, paths[0]), pin=False)
        run(eng, [(adapter, 4)])
        samples = []
        for _ in range(3 if args.quick else 6):
            ids = eng.encode(PROMPT, None)
            r = eng.submit(GenRequest(adapter=adapter, input_ids=ids,
                                      params=GenParams(max_new_tokens=32, min_new_tokens=32)))  # fmt: skip
            eng.wait(r, timeout=600)
            samples.append(r.timings["decode"] / max(1, len(r.output_ids) - 1))
        per_token[label] = statistics.median(samples)
        eng.stop()
    results["unmerged_over_merged"] = per_token["unmerged"] / per_token["merged"]
    rows.append(("e. per-token decode latency", "unmerged adapter vs merged weights",
                 f"{per_token['unmerged']:.2f} vs {per_token['merged']:.2f} ms/token"
                 f" -> {results['unmerged_over_merged']:.2f}x"))  # fmt: skip

    table = _table(rows)
    print(table)
    header = (
        f"## Serving benchmark (`benchmarks/serving.py`)\n\n"
        f"Command: `.venv/bin/python benchmarks/serving.py{' --quick' if args.quick else ''}` "
        f"({time.strftime('%Y-%m-%d')}, {torch.get_num_threads()} CPU threads, torch "
        f"{torch.__version__}, bench model {reload.base_info['parameters']:,} parameters, "
        f"rank-16 all-linear adapters, {new} new tokens per request, greedy).\n\n"
    )
    _write_section(args.out, "## Serving benchmark", header + table + "\n\n```json\n"
                   + json.dumps({k: round(v, 4) for k, v in results.items()}, indent=2)
                   + "\n```\n")  # fmt: skip
    return 0


def _table(rows: list[tuple[str, str, str]]) -> str:
    out = ["| case | comparison | result |", "|---|---|---|"]
    out += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    return "\n".join(out)


def _write_section(path: Path, heading: str, body: str) -> None:
    """Replace this benchmark's section in RESULTS.md, keeping the other benchmarks' sections."""
    text = path.read_text() if path.exists() else "# Benchmark results\n\n"
    if heading in text:
        start = text.index(heading)
        nxt = text.find("\n## ", start + len(heading))
        text = text[:start] + body + (text[nxt + 1 :] if nxt >= 0 else "")
    else:
        text = text.rstrip() + "\n\n" + body
    path.write_text(text)


if __name__ == "__main__":
    sys.exit(main())
