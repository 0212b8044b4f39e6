"""Structured output on the real local adapter: sales-json's answers on its whole test split,
through the router's native route and through the official ``openai`` client.

    .venv/bin/python benchmarks/structured.py

Brings up the local platform (SmolLM2-135M-Instruct, ``make up``'s base) with the catalog's
sales-json entry alone, training its adapter first when ``.artifacts`` holds none for this
catalog entry (about five minutes on two cores), then asks it every test input twice: natively
(``inputs``) and as an OpenAI chat with only a user turn. Neither request names a schema: the
catalog's ``json_schema: sales-record`` applies. Each answer must parse as JSON and validate
against the schema (``jsonschema``). Prints a table, writes its section of RESULTS.md and exits
1 unless every answer is valid.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml
from jsonschema import Draft202012Validator

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.local_up import local_platform
from benchmarks.results import cores, write_section
from config import CATALOG_PATH
from config.loader import SCHEMAS_DIR
from training import datasets

HEADING = "## Structured output (`benchmarks/structured.py`)"
ADAPTER = "sales-json"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "RESULTS.md")
    ap.add_argument("--limit", type=int, default=0, help="first N test inputs (0: all)")
    args = ap.parse_args(argv)
    catalog = yaml.safe_load(CATALOG_PATH.read_text())
    t0 = time.perf_counter()
    schema = json.loads((SCHEMAS_DIR / "sales-record.json").read_text())
    validator = Draft202012Validator(schema)
    entry = next(a for a in catalog["adapters"] if a["name"] == ADAPTER)
    split = datasets.load(entry["task"], entry.get("dataset_seed", 0))
    cases = split.test[: args.limit] if args.limit else split.test
    failures: list[str] = []
    rows = []
    results: dict[str, float] = {}
    with local_platform([ADAPTER]) as started:
        routes = (
            ("native (router)", started.native),
            ("OpenAI chat, user turn only", started.chat),
        )
        for route, ask in routes:
            t1 = time.perf_counter()
            with ThreadPoolExecutor(8) as pool:
                answers = list(
                    pool.map(lambda text, ask=ask: ask(ADAPTER, text), [c.raw for c in cases])
                )
            took = time.perf_counter() - t1
            valid = exact = 0
            for case, answer in zip(cases, answers, strict=True):
                try:
                    record = json.loads(answer)
                    validator.validate(record)
                    valid += 1
                    exact += record == json.loads(case.label)
                except (json.JSONDecodeError, ValueError) as exc:
                    failures.append(f"{route}: {answer[:120]!r} ({type(exc).__name__})")
            key = "native" if route.startswith("native") else "openai"
            results[f"{key}_valid_share"] = valid / len(cases)
            results[f"{key}_exact_share"] = exact / len(cases)
            rows.append(
                f"| {route} | {len(cases)} | {valid}/{len(cases)} | "
                f"{exact}/{len(cases)} | {took:.0f} s |"
            )
            print(rows[-1], flush=True)
    table = "\n".join(
        [
            "| route | test inputs | schema-valid | equal to the label | time |",
            "|---|---|---|---|---|",
            *rows,
        ]
    )
    text = (
        f"{HEADING}\n\nCommand: `.venv/bin/python benchmarks/structured.py` "
        f"({time.strftime('%Y-%m-%d')}, {cores()} cores; local platform on SmolLM2-135M-"
        f"Instruct with the catalog's sales-json adapter, requests naming no schema, so the "
        f"catalog's `sales-record` applies; greedy, at most 128 new tokens (the local router's cap); the run took "
        f"{time.perf_counter() - t0:.0f} s including start-up"
        + (" and training" if "training" in started.stdout else "")
        + "). Goal: every "
        "answer schema-valid: " + ("met." if not failures else "FAILED.") + "\n\n" + table + "\n"
    )
    print(text)
    for f in failures[:10]:
        print("invalid:", f)
    write_section(args.out, HEADING, text)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
