"""Serving benchmark: the runtime engine against the baselines a user would otherwise pick.

    .venv/bin/python benchmarks/serving.py [--quick]

Everything runs side by side in one process on a locally built bench-size Qwen3 model (~27 M
parameters, random weights: speed does not depend on their values) with 12 random rank-16 LoRA
adapters on all linear layers; the engine is driven in-process (no HTTP), so the numbers are the
engine's, not the network's. Tensor work runs on one thread at a time (the engine's, or a
short-lived one for a baseline): GNU OpenMP slows every thread's parallel regions once more
pool threads exist than cores (``Engine.start``), which would handicap whichever ran second. Every case checks that what it timed is right: each request's
greedy answer must equal the baseline's answer to the same request. The script prints one table,
writes its section of benchmarks/RESULTS.md, and exits 1 when a goal fails:

- Zipf workload: throughput at least 3x the seed article's approach (one request at a time,
  ``set_adapter`` + ``generate``, every adapter kept loaded as the engine keeps them) and at least
  1.3x PEFT's own mixed batch (``generate(adapter_names=...)``);
- open loop (Poisson arrivals at 50% and 90% of the measured capacity, outputs of 4 to 256
  tokens), continuous batching against the static waves in the same run: at 50% load, the p99
  time to first token of short requests at most 3x an unloaded request's;
- after unregistering every adapter, the work directory's size is what it was before.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from peft import LoraConfig, PeftModel, get_peft_model
from transformers import AutoModelForCausalLM, AutoTokenizer

from benchmarks.results import write_section
from runtime.engine import Engine
from runtime.request import GenParams, GenRequest
from runtime.settings import Settings
from training import datasets
from training.base import build_base
from training.package import pack, write_manifest

ALL = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
PROMPT = "pt 67yo f c/o sob and cp x3d. pmh htn, dm2. plan cxr, asa po qd, f/u 2wk."
GOALS = {"zipf_vs_seed": 3.0, "zipf_vs_peft_mixed": 1.3, "ttft_p99_short_over_unloaded": 3.0}


class BenchmarkError(AssertionError):
    """What a case timed is not right: its answers differ from the baseline's."""


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


def in_thread(fn, *args):
    """Run ``fn`` on a thread of its own that ends with it (its OpenMP pool goes with it)."""
    out: list = []
    failure: list[BaseException] = []

    def target() -> None:
        try:
            out.append(fn(*args))
        except BaseException as exc:
            failure.append(exc)

    t = threading.Thread(target=target)
    t.start()
    t.join()
    if failure:
        raise failure[0]
    return out[0]


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]


def fixed(n: int) -> GenParams:
    return GenParams(max_new_tokens=n, min_new_tokens=n)


def submit_all(engine: Engine, ids: list[int], jobs: list[tuple[str | None, int]]):
    return [engine.submit(GenRequest(adapter=a, input_ids=list(ids), params=fixed(n)))
            for a, n in jobs]  # fmt: skip


def run(engine: Engine, ids: list[int], jobs: list[tuple[str | None, int]]):
    """Submit all jobs at once; (wall seconds, requests, tokens)."""
    t0 = time.perf_counter()
    reqs = submit_all(engine, ids, jobs)
    for r in reqs:
        engine.wait(r, timeout=1800)
    wall = time.perf_counter() - t0
    return wall, reqs, sum(len(r.output_ids) for r in reqs)


class Seed:
    """The seed article's server: one request at a time, set_adapter + generate. It keeps every
    adapter loaded (the engine keeps all of them in host memory too: no disk reloads either)."""

    def __init__(self, base: Path, adapters: dict[str, Path]) -> None:
        self.tok = AutoTokenizer.from_pretrained(base)
        model = AutoModelForCausalLM.from_pretrained(base).eval()
        names = list(adapters)
        self.model = PeftModel.from_pretrained(model, adapters[names[0]], adapter_name=names[0])
        for n in names[1:]:
            self.model.load_adapter(adapters[n], adapter_name=n)

    @torch.inference_mode()
    def generate(self, adapter: str, ids: list[int], n: int) -> list[int]:
        self.model.set_adapter(adapter)
        x = torch.tensor([ids])
        out = self.model.generate(input_ids=x, attention_mask=torch.ones_like(x),
                                  max_new_tokens=n, min_new_tokens=n, do_sample=False)  # fmt: skip
        return out[0, len(ids) :].tolist()

    @torch.inference_mode()
    def mixed(self, jobs: list[tuple[str, list[int], int]]) -> list[list[int]]:
        """PEFT's own mixed batch: one ``generate`` over rows of different adapters, prompts
        left-padded to the longest, run for the longest output the batch asks for (generate
        takes one length for all rows), each row cut to its own."""
        width = max(len(ids) for _, ids, _ in jobs)
        pad = self.tok.pad_token_id
        x = torch.tensor([[pad] * (width - len(ids)) + ids for _, ids, _ in jobs])
        mask = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for _, ids, _ in jobs])
        n = max(k for _, _, k in jobs)
        out = self.model.generate(input_ids=x, attention_mask=mask, max_new_tokens=n,
                                  min_new_tokens=n, do_sample=False,
                                  adapter_names=[a for a, _, _ in jobs])  # fmt: skip
        return [row[width : width + k].tolist() for row, (_, _, k) in zip(out, jobs, strict=True)]


def check(label: str, got: list[list[int]], want: list[list[int]]) -> None:
    bad = [i for i, (g, w) in enumerate(zip(got, want, strict=True)) if g != w]
    if bad:
        raise BenchmarkError(f"{label}: {len(bad)} of {len(got)} answers differ from the "
                             f"baseline's (first: request {bad[0]})")  # fmt: skip


def engine_with(base: Path, work: Path, paths: dict[str, Path], **settings) -> Engine:
    eng = Engine(Settings(model_dir=base, max_cpu_loras=64, max_batch_size=32,
                          work_dir=work / "w", **settings))  # fmt: skip
    eng.start()
    for n, p in paths.items():
        eng.cache.register(eng.cache.validate(n, p), pin=False)
    return eng


def open_loop(engine: Engine, ids: list[int], schedule: list[tuple[float, str | None, int]]):
    """Submit each request at its arrival time (seconds from the start); the requests."""
    reqs: list[GenRequest] = []
    t0 = time.perf_counter()
    for at, adapter, n in schedule:
        delay = t0 + at - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        reqs.append(engine.submit(GenRequest(adapter=adapter, input_ids=list(ids),
                                             params=fixed(n))))  # fmt: skip
    for r in reqs:
        engine.wait(r, timeout=1800)
    return reqs


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="fewer requests (a smoke run)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "RESULTS.md")
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    work = Path(tempfile.mkdtemp(prefix="bench-serving-"))
    t_build = time.perf_counter()
    base = in_thread(build_base, ROOT / ".artifacts" / "base" / "bench", "bench", 0, print)
    n_adapters = 12
    names = [f"a{i}" for i in range(n_adapters)]
    paths = dict(zip(names, in_thread(make_adapters, base, work, n_adapters), strict=True))
    seed = in_thread(Seed, base, paths)
    print(f"bench model and {n_adapters} adapters ready in {time.perf_counter() - t_build:.1f} s")
    rows = Rows()
    results: dict[str, float] = {}
    failures: list[str] = []
    new = 8 if args.quick else 16
    eng = engine_with(base, work, paths, max_loras=8)
    ids = eng.encode(PROMPT, None)
    reference: dict[tuple[str | None, int], list[int]] = {}

    def ref(adapter: str, n: int) -> list[int]:
        if (adapter, n) not in reference:
            reference[(adapter, n)] = in_thread(seed.generate, adapter, ids, n)
        return reference[(adapter, n)]

    # a. batch composition changes: uniform and mixed batches, alternating ---------------------
    uniform, mixed = [("a0", new)] * 8, [(n, new) for n in names[:8]]
    run(eng, ids, mixed)  # warm: all eight resident
    tps: dict[str, list[float]] = {"uniform": [], "mixed": []}
    for _ in range(2 if args.quick else 4):
        for label, jobs in (("uniform", uniform), ("mixed", mixed)):
            wall, reqs, tok = run(eng, ids, jobs)
            check(f"switch ({label})", [r.output_ids for r in reqs], [ref(a, n) for a, n in jobs])
            tps[label].append(tok / wall)
    results["mixed_over_uniform"] = statistics.median(tps["mixed"]) / statistics.median(
        tps["uniform"])  # fmt: skip
    rows.append(("a. composition switches (8 rows, resident)",
                 "8 adapters vs one adapter, alternating",
                 f"{statistics.median(tps['mixed']):.1f} vs {statistics.median(tps['uniform']):.1f}"
                 f" tok/s -> {results['mixed_over_uniform']:.2f}"))  # fmt: skip

    # b. Zipf workload: engine vs seed vs PEFT mixed ----------------------------------------
    # Each request: a Zipf-drawn adapter, a prompt of its own (test inputs of the task
    # datasets, so lengths differ) and an output length of its own (8 to 48 tokens).
    rng = random.Random(7)
    weights = [1 / (k + 1) ** 1.1 for k in range(n_adapters)]
    n_req = 24 if args.quick else 64
    texts = [r.raw for task in ("medical_shorthand", "singlish_to_standard", "pii_redaction",
                                "style_transfer") for r in datasets.load(task).test[:16]]  # fmt: skip
    work_items = [(rng.choices(names, weights=weights)[0], eng.encode(texts[i % len(texts)], None),
                   rng.randint(8, 48)) for i in range(n_req)]  # fmt: skip
    eng.stop()
    throughput: dict[str, float] = {}
    outputs: dict[str, list[list[int]]] = {}
    for slots in (n_adapters, 4):  # every adapter resident, as in the baselines; then tiered
        eng = engine_with(base, work, paths, max_loras=slots)
        run(eng, ids, [(n, 2) for n in names[:slots]])
        best = 0.0
        for _ in range(2 if args.quick else 3):
            t0 = time.perf_counter()
            reqs = [eng.submit(GenRequest(adapter=a, input_ids=list(p), params=fixed(k)))
                    for a, p, k in work_items]  # fmt: skip
            for r in reqs:
                eng.wait(r, timeout=1800)
            best = max(best, sum(len(r.output_ids) for r in reqs) / (time.perf_counter() - t0))
        throughput[f"engine{slots}"], outputs[f"engine{slots}"] = best, [r.output_ids for r in reqs]
        eng.stop()

    def seed_all() -> tuple[float, list[list[int]]]:
        t0 = time.perf_counter()
        out = [seed.generate(a, p, k) for a, p, k in work_items]
        return sum(map(len, out)) / (time.perf_counter() - t0), out

    def peft_all() -> tuple[float, list[list[int]]]:
        t0 = time.perf_counter()
        out: list[list[int]] = []
        for i in range(0, n_req, 32):  # PEFT's mixed batch, as many rows as the engine's batch
            out += seed.mixed(work_items[i : i + 32])
        return sum(map(len, out)) / (time.perf_counter() - t0), out

    throughput["seed"], seed_out = in_thread(seed_all)
    throughput["peft"], peft_out = max(in_thread(peft_all) for _ in range(2 if args.quick else 3))
    for key in ("engine12", "engine4"):
        check(f"zipf: {key} vs seed", outputs[key], seed_out)
        check(f"zipf: {key} vs PEFT mixed", outputs[key], peft_out)
    ours = throughput[f"engine{n_adapters}"]
    results["zipf_vs_seed"] = ours / throughput["seed"]
    results["zipf_vs_peft_mixed"] = ours / throughput["peft"]
    results["zipf_tiered_vs_peft_mixed"] = throughput["engine4"] / throughput["peft"]
    rows.append((f"b. Zipf(1.1) over {n_adapters} adapters, {n_req} requests, prompts and "
                 "outputs (8-48 tokens) of their own",
                 "engine (12 device slots) vs seed (set_adapter + generate) vs PEFT mixed batch",
                 f"{ours:.1f} vs {throughput['seed']:.1f} vs {throughput['peft']:.1f} tok/s -> "
                 f"{results['zipf_vs_seed']:.2f}x seed (goal >= {GOALS['zipf_vs_seed']}), "
                 f"{results['zipf_vs_peft_mixed']:.2f}x PEFT (goal >= "
                 f"{GOALS['zipf_vs_peft_mixed']})"))  # fmt: skip
    rows.append(("b. the same, 4 device slots for 12 adapters", "tiered engine vs PEFT mixed "
                 "(which keeps all 12 loaded)",
                 f"{throughput['engine4']:.1f} vs {throughput['peft']:.1f} tok/s -> "
                 f"{results['zipf_tiered_vs_peft_mixed']:.2f}x"))  # fmt: skip
    for key in ("zipf_vs_seed", "zipf_vs_peft_mixed"):
        if results[key] < GOALS[key]:
            failures.append(f"{key} {results[key]:.2f} < {GOALS[key]}")
    eng = engine_with(base, work, paths, max_loras=4)

    # c. cold start: an adapter from disk, from host memory, resident --------------------------
    for name in ("a9", "a10"):  # out of the device slots; a9 out of host memory too
        rec = eng.cache.get(name)
        if rec.slot is not None:
            eng.cache._evict(rec, reason="benchmark")
    eng.cache.get("a9").host = None  # forces the disk path
    cold = run(eng, ids, [("a9", 1)])[1][0]
    warm = run(eng, ids, [("a10", 1)])[1][0]
    hot = run(eng, ids, [("a10", 1)])[1][0]
    check("cold start", [cold.output_ids, warm.output_ids, hot.output_ids],
          [ref("a9", 1), ref("a10", 1), ref("a10", 1)])  # fmt: skip
    rows.append(("c. cold start (1-token request)", "adapter from disk / host / resident",
                 f"{cold.timings['total']:.1f} (load {cold.timings['adapter_load']:.1f}) / "
                 f"{warm.timings['total']:.1f} (load {warm.timings['adapter_load']:.1f}) / "
                 f"{hot.timings['total']:.1f} ms"))  # fmt: skip
    eng.stop()

    # d. open loop: Poisson arrivals, continuous batching vs static waves ----------------------
    lengths_rng = random.Random(11)
    low, high = 4, 256

    def length() -> int:  # log-uniform between 4 and 256 tokens
        return round(math.exp(lengths_rng.uniform(math.log(low), math.log(high))))

    n_open = 40 if args.quick else 160
    open_jobs = [(rng.choices(names, weights=weights)[0], length()) for _ in range(n_open)]
    short = 16
    schedules: dict[float, list[tuple[float, str | None, int]]] = {}
    answers: dict[str, list[list[int]]] = {}
    measured: dict[str, list[GenRequest]] = {}
    # Every adapter resident, so the schedulers are compared, not the slot count (the tiered
    # engine's numbers follow, reported).
    for mode in ("continuous", "static"):  # one engine at a time (see the module doc)
        eng = engine_with(base, work, paths, max_loras=n_adapters, scheduler=mode)
        run(eng, ids, [(n, 2) for n in names])
        if mode == "continuous":
            # Capacity: the whole workload at once; an unloaded request's time to first token.
            wall, _, _ = run(eng, ids, open_jobs)
            capacity = n_open / wall
            unloaded = [run(eng, ids, [(a, 4)])[1][0].timings["first_token"] for a in names[:4]]
            ttft_unloaded = statistics.median(unloaded)
            results["capacity_rps"], results["ttft_unloaded_ms"] = capacity, ttft_unloaded
            for load in (0.5, 0.9):
                arrival_rng, t, schedules[load] = random.Random(int(load * 100)), 0.0, []
                for adapter, n in open_jobs:
                    t += arrival_rng.expovariate(load * capacity)
                    schedules[load].append((t, adapter, n))
        for load, arrivals in schedules.items():
            measured[f"{mode}@{load}"] = reqs = open_loop(eng, ids, arrivals)
            answers[f"{mode}@{load}"] = [r.output_ids for r in reqs]
        eng.stop()
    eng = engine_with(base, work, paths, max_loras=4)  # tiered: 4 slots for 12 adapters
    measured["tiered@0.5"] = open_loop(eng, ids, schedules[0.5])
    check("open loop at 0.5: tiered vs static", [r.output_ids for r in measured["tiered@0.5"]],
          answers["static@0.5"])  # fmt: skip
    eng.stop()
    for load in schedules:
        for mode in ("continuous", "static", "tiered"):
            if f"{mode}@{load}" not in measured:
                continue
            reqs = measured[f"{mode}@{load}"]
            ttft = [r.timings["first_token"] for r in reqs]
            ttft_short = [r.timings["first_token"] for r in reqs if len(r.output_ids) <= short]
            e2e = [r.timings["total"] for r in reqs]
            key = f"{mode}_{int(load * 100)}"
            results[f"{key}_ttft_p50_ms"], results[f"{key}_ttft_p99_ms"] = pct(ttft, 0.5), pct(
                ttft, 0.99)  # fmt: skip
            results[f"{key}_short_ttft_p99_ms"] = pct(ttft_short, 0.99)
            results[f"{key}_e2e_p50_ms"], results[f"{key}_e2e_p99_ms"] = pct(e2e, 0.5), pct(
                e2e, 0.99)  # fmt: skip
            label = "continuous, 4 device slots" if mode == "tiered" else mode
            rows.append((f"d. open loop, {int(load * 100)}% of {capacity:.2f} req/s, "
                         f"{n_open} requests of 4-256 tokens", label,
                         f"TTFT p50 {pct(ttft, 0.5):.0f} / p99 {pct(ttft, 0.99):.0f} ms "
                         f"(short <= {short} tokens: p99 {pct(ttft_short, 0.99):.0f} ms); "
                         f"end-to-end p50 {pct(e2e, 0.5):.0f} / p99 {pct(e2e, 0.99):.0f} ms"))  # fmt: skip
        check(f"open loop at {load}: continuous vs static",
              answers[f"continuous@{load}"], answers[f"static@{load}"])  # fmt: skip
    ratio = results["continuous_50_short_ttft_p99_ms"] / ttft_unloaded
    results["ttft_p99_short_over_unloaded"] = ratio
    rows.append(("d. short requests at 50% load", "continuous p99 TTFT / unloaded TTFT",
                 f"{results['continuous_50_short_ttft_p99_ms']:.0f} / {ttft_unloaded:.0f} ms -> "
                 f"{ratio:.2f} (goal <= {GOALS['ttft_p99_short_over_unloaded']})"))  # fmt: skip
    if ratio > GOALS["ttft_p99_short_over_unloaded"]:
        failures.append(f"short-request p99 TTFT {ratio:.2f}x the unloaded one")

    # e. disk: archives extracted by registration are removed by unregistration ----------------
    from runtime.server import _load, _owned_dir

    eng = engine_with(base, work, {}, max_loras=2)
    archives = []
    for n, p in list(paths.items())[:6]:
        d = work / f"pack-{n}"
        d.mkdir()
        for f in ("adapter_config.json", "adapter_model.safetensors"):
            (d / f).write_bytes((p / f).read_bytes())
        ident = eng.identity
        write_manifest(d, {"name": n, "version": "1",
                           "base": {"model_id": ident.model_id, "revision": ident.revision}})  # fmt: skip
        archives.append((n, work / f"{n}.tar.gz"))
        pack(d, archives[-1][1])
    before = du(eng.settings.work_dir)
    for n, archive in archives:
        loaded = _load(eng, n, str(archive))
        eng.cache.register(loaded, pin=False, owned_dir=_owned_dir(eng, loaded.src))
    during = du(eng.settings.work_dir)
    for n, _ in archives:
        eng.cache.unregister(n)
    after = du(eng.settings.work_dir)
    eng.stop()
    rows.append(("e. work directory", "before / with 6 archives registered / after unregistering",
                 f"{before:,} / {during:,} / {after:,} bytes"))  # fmt: skip
    if after != before or during <= before:
        failures.append(f"work directory {before} -> {during} -> {after} bytes")

    table = _table(rows)
    print(table)
    params = json.loads((base / "base_manifest.json").read_text())["parameters"]
    header = (
        f"## Serving benchmark (`benchmarks/serving.py`)\n\n"
        f"Command: `.venv/bin/python benchmarks/serving.py{' --quick' if args.quick else ''}` "
        f"({time.strftime('%Y-%m-%d')}, {torch.get_num_threads()} CPU threads, torch "
        f"{torch.__version__}, bench model {params:,} parameters, rank-16 all-linear adapters, "
        f"greedy; every answer checked against the "
        f"baseline's). Goals: "
        + ("all met." if not failures else "FAILED: " + "; ".join(failures))
        + "\n\n"
    )
    write_section(args.out, "## Serving benchmark", header + table + "\n\n```json\n"
                   + json.dumps({k: round(v, 4) for k, v in results.items()}, indent=2)
                   + "\n```\n")  # fmt: skip
    if failures:
        print("goals failed: " + "; ".join(failures))
        return 1
    return 0


class Rows(list):
    """The table's rows, each printed as it is measured (the whole run takes minutes)."""

    def append(self, row: tuple[str, str, str]) -> None:
        print(" | ".join(row), flush=True)
        super().append(row)


def _table(rows: list[tuple[str, str, str]]) -> str:
    out = ["| case | comparison | result |", "|---|---|---|"]
    out += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    return "\n".join(out)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchmarkError as exc:
        print(f"benchmark invalid: {exc}", file=sys.stderr)
        sys.exit(2)
