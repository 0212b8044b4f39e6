"""Natural inputs on the served adapters: what a user types, not what a template produced.

    .venv/bin/python benchmarks/natural.py

Brings up the local platform (``make up``'s base) with every built-in adapter, and the shipped
example's (``support-triage``), whose archive ``make up`` or ``python -m training.train_all``
trained for this catalog and base, published or not (``--serve-unpublishable``; the table says which passed its gate), and sends each of its
task's hand-written inputs (``training.datasets.natural``) twice: natively through the router
as plain ``inputs``, and through the official ``openai`` client as a chat with only a user turn.
Each answer is scored with its task's scorer against a correct answer: the share of the
input's facts it keeps, for PII whether any value leaked, for sales whether the record is
schema-valid and its fields' F1. Prints a table, writes its section of RESULTS.md, and exits 1
when a published adapter misses the goal (facts kept >= 0.8; no PII leak; every JSON record
valid for its entry's schema with field F1 >= 0.7), 2 when no trained adapter is here.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.local_up import local_platform
from benchmarks.results import cores, write_section
from config import load_deployment
from training.datasets.natural import natural
from training.metrics import score
from training.reuse import trained_here

HEADING = "## Natural inputs (`benchmarks/natural.py`)"
#: The goal, per task: (summary column, least or most allowed).
GOALS = {
    "medical_shorthand": ("faithfulness", ">=", 0.8),
    "singlish_to_standard": ("faithfulness", ">=", 0.8),
    "sentiment_neutralization": ("faithfulness", ">=", 0.8),
    "style_transfer": ("faithfulness", ">=", 0.8),
    "pii_redaction": ("pii_leak_rate", "<=", 0.0),
    "sales_json": ("json_field_f1", ">=", 0.7),
    # The shipped example (examples/support-triage.jsonl): a task its entry defines.
    "support_triage": ("json_field_f1", ">=", 0.7),
}
SHOWN = ("faithfulness", "pii_leak_rate", "json_valid", "json_field_f1")


def met(task: str, summary: dict[str, float]) -> bool:
    column, op, bound = GOALS[task]
    value = summary[column]
    ok = value >= bound if op == ">=" else value <= bound
    return ok and summary.get("json_valid", 1.0) == 1.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "RESULTS.md")
    args = ap.parse_args(argv)
    dep = load_deployment("local")
    served = trained_here(
        dep,
        ROOT / ".artifacts",
        [a.name for a in dep.adapters if natural(a.entry.task, a.entry.dataset)],
    )
    if not served:
        print("no trained built-in adapter here: run `make up` or python -m training.train_all")
        return 2
    rows, missed, examples = [], [], []
    t0 = time.perf_counter()
    with local_platform(sorted(served), "--serve-unpublishable") as platform:
        for name, published in sorted(served.items()):
            entry = dep.adapter(name).entry
            cases = list(natural(entry.task, entry.dataset))
            for route, ask in (("native", platform.native), ("OpenAI chat", platform.chat)):
                answers = [ask(name, c.raw) for c in cases]
                scored = score(
                    dep.adapter(name).profile.metric,
                    answers,
                    cases,
                    schema=entry.json_schema_document,
                )
                summary = scored.summary
                ok = met(entry.task, summary)
                if published and not ok:
                    missed.append(f"{name} ({route})")
                shown = ", ".join(f"{k} {summary[k]:.2f}" for k in SHOWN if k in summary)
                rows.append(
                    f"| {name} | {'yes' if published else 'no'} | {route} | {len(cases)} | "
                    f"{shown} | {'met' if ok else 'missed'} |"
                )
                print(rows[-1], flush=True)
                examples.append(f"- {name}, {route}: {cases[0].raw!r} -> {answers[0]!r}")
    table = "\n".join(
        [
            "| adapter | passed its gate | route | inputs | scores | goal |",
            "|---|---|---|---|---|---|",
            *rows,
        ]
    )
    text = (
        f"{HEADING}\n\nCommand: `.venv/bin/python benchmarks/natural.py` "
        f"({time.strftime('%Y-%m-%d')}, {cores()} cores; local platform on SmolLM2-135M-"
        "Instruct with every built-in adapter trained here, greedy, at most 128 new tokens; "
        f"the run took {time.perf_counter() - t0:.0f} s including start-up). Inputs: "
        "`training/datasets/natural.py`, typed by hand, produced by no template. Goal for the "
        "adapters that passed their gate: facts kept >= 0.8 (rewrites), no PII leak, every "
        "JSON record (sales, support triage) schema-valid with field F1 >= 0.7: "
        + ("met." if not missed else f"MISSED by {', '.join(missed)}.")
        + "\n\n"
        + table
        + "\n\nFirst input of each, and its answer:\n\n"
        + "\n".join(examples)
        + "\n"
    )
    print(text)
    write_section(args.out, HEADING, text)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
