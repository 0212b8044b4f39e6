"""``python -m training.train_all``: build the local base, train every catalog adapter of the
local environment on the CPU, gate each on its test split, print a table and record it in
benchmarks/RESULTS.md (this command is the only writer of that section).

Exits 3 when an adapter is not publishable (it does not beat the base with a 95% bootstrap
lower bound above zero, or misses one of its task's floors).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from config import Deployment, load_deployment
from config.layout import archives_dir
from contracts.manifests import AdapterManifest, BaseManifest
from training.base import build_local
from training.metrics import headline
from training.train import TrainResult, train

ROOT = Path(__file__).resolve().parents[1]
#: The companions each row shows besides the headline: the ones the task's floors name.
SHOWN = ("faithfulness", "json_valid", "json_field_f1", "pii_leak_rate")


def _row(name: str, profile, res, reused: bool) -> tuple[str, bool]:
    ev = res.manifest.eval or {}
    boot = ev["bootstrap"]
    floors = {*profile.minimums, *profile.maximums, "faithfulness"}
    shown = [k for k in SHOWN if k in ev["adapter"] and k in floors]
    extras = ", ".join(f"{k} {ev['adapter'][k]:.3f} (base {ev['base'][k]:.3f})" for k in shown)
    verdict = "yes" if ev["publishable"] else "NO: " + "; ".join(ev["failures"])
    rival = ev.get("strongest_baseline", "base")
    rival_score = (ev["base"] if rival == "base" else ev["baselines"][rival])["score"]
    trained = res.manifest.training
    ended = {"early": "early stop", "cap": "step cap"}.get(trained.ended if trained else None, "-")
    steps = trained.steps if trained else "-"
    return (
        f"| {name}{' (reused)' if reused else ''} | r={profile.rank} a={profile.alpha} "
        f"{profile.targets} | {steps} ({ended}) | {headline(ev['metric'])} | "
        f"{ev['adapter']['score']:.3f} | {ev['base']['score']:.3f} | {rival} "
        f"{rival_score:.3f} | [{boot['ci_low']:.3f}, {boot['ci_high']:.3f}] | {extras} | "
        f"{verdict} | {res.seconds:.0f} |",
        bool(ev["publishable"]),
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--env", default="local")
    ap.add_argument(
        "--out", type=Path, help="default: .artifacts/adapters/BASE_KEY (config.layout)"
    )
    ap.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "RESULTS.md")
    ap.add_argument("--adapter", action="append", help="only these (default: every adapter)")
    ap.add_argument(
        "--reuse",
        action="store_true",
        help="report an archive this command (or `make up`) already trained with the "
        "same settings on the same base instead of training it again; its row shows "
        "the evaluation and seconds recorded when it was trained",
    )
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    dep = load_deployment(args.env)
    args.out = args.out or archives_dir(ROOT / ".artifacts" / "adapters", dep.base_key)
    base_dir = ROOT / ".artifacts" / "base" / dep.base_key
    cached = BaseManifest.load(base_dir) is not None
    base = build_local(dep.base.model_id, base_dir)
    info = BaseManifest.read(base_dir)
    t_base = time.perf_counter() - t0
    rows, ok, reused_s = [], True, {}
    for a in dep.adapters:
        if args.adapter and a.name not in args.adapter:
            continue
        res = _cached(dep, a.name, args.out, info) if args.reuse else None
        if res is None:
            res = train(a.name, env=args.env, base_dir=base, out_dir=args.out)
        else:
            reused_s[a.name] = res.seconds
        row, passed = _row(a.name, a.profile, res, a.name in reused_s)
        rows.append(row)
        ok &= passed
    total = time.perf_counter() - t0
    table = "\n".join(
        [
            "| adapter | LoRA | steps (ended by) | metric | adapter | base | strongest baseline | "
            "95% CI of the difference to it | floors | publishable | seconds |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
            *rows,
        ]
    )
    print(table)
    print(f"total {total:.0f} s (base {t_base:.0f} s)")
    from benchmarks.results import cores, write_section

    command = (
        "`.venv/bin/python -m training.train_all"
        + ("".join(f" --adapter {n}" for n in args.adapter) if args.adapter else "")
        + (" --reuse" if args.reuse else "")
        + (f" --env {args.env}`" if args.env != "local" else "`")
    )
    provenance = f" Total {total:.0f} s."
    if reused_s:
        provenance = (
            f" {len(reused_s)} of the {len(rows)} rows are archives trained earlier with the "
            "same settings on this machine (by this command, or one adapter at a time), "
            "reported with the evaluation and seconds their manifests recorded; their training "
            f"took {sum(reused_s.values()):.0f} s in all."
        ) + (provenance if len(reused_s) < len(rows) else "")
    write_section(
        args.results,
        "## Local training",
        "## Local training (`python -m training.train_all`)\n\n"
        f"Command: {command} ({time.strftime('%Y-%m-%d')}, CPU, "
        f"{cores()} cores). Base: {dep.base.model_id} ({info.parameters or 0:,} parameters; "
        + ("reused from the cache" if cached else f"built in {t_base:.0f} s in this run")
        + "). Each adapter trained with its task profile and the environment's training plan, "
        "with early stopping on its validation split (the steps column says whether it or the "
        "step cap ended training), then run greedily on its test split (never seen in "
        "training) beside its base, the echo of the input, the nearest and the most frequent "
        "training label; "
        "publishable means a 95% paired-bootstrap interval of the difference to the strongest "
        "of them above zero and the task's floors met. Rows marked (reused) are archives "
        "trained earlier on the same dataset with the same scorer."
        + provenance
        + "\n\n"
        + table
        + "\n",
    )
    return 0 if ok else 3


def _cached(
    dep: Deployment, name: str, out: Path, base_manifest: BaseManifest
) -> TrainResult | None:
    """The archive already trained for this entry, settings and base; None when there is none.

    The reuse rule is the local platform's own (``training.reuse``), so this table and
    ``make up`` agree on which archives are current.
    """
    from training.package import sha256_file
    from training.reuse import cached_adapter

    if cached_adapter(dep, name, out, base_manifest, None) is not None:
        return None
    manifest = AdapterManifest.read(out / name)
    archive = out / f"{name}.tar.gz"
    seconds = manifest.training.seconds if manifest.training else None
    return TrainResult(name, archive, sha256_file(archive), manifest, float(seconds or 0.0))


if __name__ == "__main__":
    sys.exit(main())
