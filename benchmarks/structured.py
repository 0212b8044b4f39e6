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
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import openai
import yaml
from jsonschema import Draft202012Validator

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.results import cores, write_section
from config import CATALOG_PATH, ENVIRONMENTS_DIR
from config.loader import SCHEMAS_DIR
from training import datasets

HEADING = "## Structured output (`benchmarks/structured.py`)"
ADAPTER = "sales-json"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "RESULTS.md")
    ap.add_argument("--limit", type=int, default=0, help="first N test inputs (0: all)")
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="bench-structured-"))
    catalog = yaml.safe_load(CATALOG_PATH.read_text())
    catalog["adapters"] = [a for a in catalog["adapters"] if a["name"] == ADAPTER]
    (work / "adapters.yaml").write_text(yaml.safe_dump(catalog, sort_keys=False))
    env = yaml.safe_load((ENVIRONMENTS_DIR / "local.yaml").read_text())
    overrides = env.get("training", {}).get("adapters") or {}
    env.setdefault("training", {})["adapters"] = {
        k: v for k, v in overrides.items() if k == ADAPTER
    }
    (work / "environments").mkdir()
    (work / "environments" / "local.yaml").write_text(yaml.safe_dump(env, sort_keys=False))
    ports = {"gateway": free_port(), "endpoint": free_port(), "runtime": free_port()}
    up = [
        sys.executable,
        "-m",
        "local",
        "up",
        "--catalog",
        str(work / "adapters.yaml"),
        "--environments-dir",
        str(work / "environments"),
        "--state-dir",
        str(work / "state"),
        "--artifacts",
        str(ROOT / ".artifacts"),
        "--gateway-port",
        str(ports["gateway"]),
        "--endpoint-port",
        str(ports["endpoint"]),
        "--runtime-port",
        str(ports["runtime"]),
        "--wait",
        "--no-tour",
    ]
    t0 = time.perf_counter()
    started = subprocess.run(up, cwd=ROOT, text=True, capture_output=True, check=False)
    print(started.stdout[-3000:])
    if started.returncode != 0:
        print(started.stderr[-3000:], file=sys.stderr)
        return 2
    gateway = f"http://127.0.0.1:{ports['gateway']}"
    schema = json.loads((SCHEMAS_DIR / "sales-record.json").read_text())
    validator = Draft202012Validator(schema)
    entry = next(a for a in catalog["adapters"] if a["name"] == ADAPTER)
    split = datasets.load(entry["task"], entry.get("dataset_seed", 0))
    cases = split.test[: args.limit] if args.limit else split.test
    failures: list[str] = []
    try:
        http = httpx.Client(base_url=gateway, timeout=600)
        client = openai.OpenAI(
            base_url=f"{gateway}/v1", api_key="unused", max_retries=0, timeout=600
        )

        def native(text: str) -> str:
            r = http.post(
                f"/v1/adapters/{ADAPTER}/generate",
                json={"inputs": text, "parameters": {"max_new_tokens": 128}},
            )
            r.raise_for_status()
            return r.json()["output"]

        def chat(text: str) -> str:
            out = client.chat.completions.create(
                model=ADAPTER,
                max_tokens=128,
                temperature=0,
                messages=[{"role": "user", "content": text}],
            )
            return out.choices[0].message.content or ""

        rows = []
        results: dict[str, float] = {}
        for route, ask in (("native (router)", native), ("OpenAI chat, user turn only", chat)):
            t1 = time.perf_counter()
            with ThreadPoolExecutor(8) as pool:
                answers = list(pool.map(ask, [c.raw for c in cases]))
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
    finally:
        subprocess.run(
            [sys.executable, "-m", "local", "down", "--state-dir", str(work / "state")],
            cwd=ROOT,
            check=False,
            capture_output=True,
        )
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
