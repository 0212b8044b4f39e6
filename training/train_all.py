"""``python -m training.train_all``: build the local base, train every catalog adapter of the
local environment on the CPU, print a table and record it in benchmarks/RESULTS.md."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from config import load_deployment
from training.base import build_base
from training.metrics import headline
from training.train import train

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", type=Path, default=ROOT / ".artifacts" / "adapters")
    ap.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "RESULTS.md")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    base = build_base(ROOT / ".artifacts" / "base" / "qwen3-local", preset="local")
    t_base = time.perf_counter() - t0
    rows, ok = [], True
    for a in load_deployment("local").adapters:
        res = train(a.name, env="local", base_dir=base, out_dir=args.out)
        ev = res.manifest["eval"]
        ok &= bool(ev["beats_base"])
        p = a.entry.profile()
        metric = headline(ev["metric"])
        if "pii_leak_rate" in ev["adapter"]:
            leaks = ev["adapter"]["pii_leak_rate"], ev["base"]["pii_leak_rate"]
            metric += f" (leak rate {leaks[0]:.3f} vs {leaks[1]:.3f})"
        rows.append(f"| {a.name} | r={p.rank} a={p.alpha} {p.targets} | {metric} | "
                    f"{ev['adapter']['score']:.3f} | {ev['base']['score']:.3f} | "
                    f"{'yes' if ev['beats_base'] else 'NO'} | {res.seconds:.0f} |")  # fmt: skip
    total = time.perf_counter() - t0
    table = "\n".join(
        ["| adapter | LoRA | metric | adapter | base | beats base | seconds |",
         "|---|---|---|---|---|---|---|", *rows]
    )  # fmt: skip
    print(table)
    print(f"total {total:.0f} s (base {t_base:.0f} s)")
    from benchmarks.serving import _write_section

    _write_section(
        args.results,
        "## Local training",
        "## Local training (`python -m training.train_all`)\n\n"
        f"Command: `.venv/bin/python -m training.train_all` ({time.strftime('%Y-%m-%d')}, CPU, "
        f"2 cores). Base: the local Qwen3 preset (1.3 M parameters; "
        + ("reused from the cache" if t_base < 1 else f"built and pre-trained in {t_base:.0f} s")
        + "). Every native adapter trained with its task profile "
        f"and evaluated greedily on 64 held-out examples against the base. Total {total:.0f} s.\n\n"
        + table
        + "\n",
    )
    return 0 if ok else 3


if __name__ == "__main__":
    sys.exit(main())
