"""How synth scales with the catalog: 10, 100 and 1,000 adapters on the dev environment.

``.venv/bin/python benchmarks/synth_scale.py [--sizes 10 100 1000]`` writes a catalog with N
adapters (the real catalog's bases, entries spread over every task), synthesizes it exactly as
``npx cdk synth -c env=dev`` does (``app.py``, cdk-nag's three packs on), and prints, for each
size, the synth seconds, the number of stacks, the most resources in one template and the
largest template in bytes, against CloudFormation's 500 resources / 1 MB limits and our margin
(400 / 800 KB). The table goes to benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.results import write_section
from config import CATALOG_PATH, TASK_PROFILES
from infra.adapters import MAX_RESOURCES_PER_TEMPLATE, MAX_TEMPLATE_BYTES
from ops.snapshots import synth


def catalog_with(n: int, dest: Path) -> Path:
    data = yaml.safe_load(CATALOG_PATH.read_text())
    tasks = sorted(TASK_PROFILES)
    data["adapters"] = [
        {
            "name": f"tenant-{i:04d}-{tasks[i % len(tasks)].replace('_', '-')}",
            "version": "1.0.0",
            "base": "qwen3-4b",
            "task": tasks[i % len(tasks)],
            "allow": {"tenants": [f"team-{i % 37}"]},
        }
        for i in range(n)
    ]
    path = dest / f"adapters-{n}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def measure(n: int, work: Path) -> dict:
    catalog = catalog_with(n, work)
    out = work / f"out-{n}"
    t0 = time.perf_counter()
    templates = synth("dev", out, catalog)
    seconds = time.perf_counter() - t0
    sizes = {name: (out / f"{name}.template.json").stat().st_size for name in templates}
    counts = {name: len(t.get("Resources", {})) for name, t in templates.items()}
    components = sum(
        1
        for t in templates.values()
        for r in t.get("Resources", {}).values()
        if r["Type"] == "AWS::SageMaker::InferenceComponent"
    )
    router = templates[next(t for t in templates if t.endswith("-router"))]
    invoke_policies = sum(
        1
        for rid, r in router.get("Resources", {}).items()
        if r["Type"] == "AWS::IAM::ManagedPolicy" and "InvokePolicy" in rid
    )
    return {
        "adapters": n,
        "router_invoke_policies": invoke_policies,
        "seconds": round(seconds, 1),
        "stacks": len(templates),
        "components": components,
        "max_resources": max(counts.values()),
        "max_resources_stack": max(counts, key=counts.__getitem__),
        "max_bytes": max(sizes.values()),
        "max_bytes_stack": max(sizes, key=sizes.__getitem__),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", type=int, nargs="+", default=[10, 100, 1000])
    ap.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "RESULTS.md")
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="synth-scale-") as tmp:
        for n in args.sizes:
            print(f"synthesizing dev with {n} adapters ...", flush=True)
            rows.append(measure(n, Path(tmp)))
    header = (
        "| adapters | synth s | s per 100 adapters | stacks | inference components (base + adapters) | "
        "most resources in one template | largest template (bytes) | router invoke policies |"
    )
    lines = [header, "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['adapters']} | {r['seconds']} | {100 * r['seconds'] / r['adapters']:.2f} | "
            f"{r['stacks']} | {r['components']} | {r['max_resources']} "
            f"({r['max_resources_stack']}) | {r['max_bytes']:,} ({r['max_bytes_stack']}) | "
            f"{r['router_invoke_policies']} |"
        )
    table = "\n".join(lines)
    print(table)
    ok = all(
        r["max_resources"] <= MAX_RESOURCES_PER_TEMPLATE and r["max_bytes"] <= MAX_TEMPLATE_BYTES
        for r in rows
    )
    small, large = rows[0], rows[-1]
    growth = (large["seconds"] / small["seconds"]) / (large["adapters"] / small["adapters"])
    verdict = (
        f"Synth time grew {large['seconds'] / small['seconds']:.1f}x for "
        f"{large['adapters'] / small['adapters']:.0f}x the adapters "
        f"({growth:.2f} of linear)."
    )
    print(verdict)
    print(
        "limits",
        "kept" if ok else "EXCEEDED",
        f"(<= {MAX_RESOURCES_PER_TEMPLATE} resources, "
        f"<= {MAX_TEMPLATE_BYTES:,} bytes per template)",
    )
    write_section(
        args.results,
        "## Synth scale",
        "## Synth scale (`benchmarks/synth_scale.py`)\n\n"
        f"Command: `.venv/bin/python benchmarks/synth_scale.py` ({time.strftime('%Y-%m-%d')}, "
        "2 cores): `app.py -c env=dev` with cdk-nag's three packs, a catalog of N adapters. "
        f"{verdict} "
        + (
            "Every template stays within our margin under CloudFormation's limits "
            if ok
            else "**A template EXCEEDS our margin under CloudFormation's limits** "
        )
        + f"({MAX_RESOURCES_PER_TEMPLATE} of 500 resources, {MAX_TEMPLATE_BYTES // 1024} KB of "
        "1 MB). The last column counts the router role's managed invoke policies (40 component "
        "ARNs each, IAM's 6,144-character policy limit): IAM attaches 10 managed policies to a "
        "role by default (a quota AWS raises to 20 on request), which the largest catalogs "
        "pass; that is IAM's limit at deploy time, not the template's.\n\n"
        + table
        + "\n\n```json\n"
        + json.dumps(rows, indent=1)
        + "\n```\n",
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
