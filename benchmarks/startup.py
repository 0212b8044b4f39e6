"""Local platform start-up: how long a first ``make up`` takes until the playground answers and
until each adapter is online, and how long a second, cached one takes until ready.

    .venv/bin/python benchmarks/startup.py [--env local] [--keep-artifacts DIR]

The first run starts from nothing (a fresh artifacts directory: the base is downloaded from the
package registry and converted, every adapter trains in the background), exactly as a new
user's ``make up`` after set-up. Meanwhile the script polls the gateway from outside. It asserts
what it times: each adapter that comes online answers through the router, and the medical and
PII adapters' answers to test inputs keep their facts and leak nothing. Goals (exit 1 when one
fails): the playground answers within 5 minutes, every adapter comes online (passes its gate),
the cached run is ready within 60 s. Writes its section of benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.results import cores, write_section
from config import load_deployment
from local.options import port_flags

PLAYGROUND_GOAL_S = 300.0
CACHED_GOAL_S = 60.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Platform:
    def __init__(self, env: str, artifacts: Path, state: Path) -> None:
        self.env, self.artifacts, self.state = env, artifacts, state
        self.ports = {"gateway": free_port(), "endpoint": free_port(), "runtime": free_port()}
        self.gateway = f"http://127.0.0.1:{self.ports['gateway']}"

    def cmd(self, verb: str, *extra: str) -> list[str]:
        base = [
            sys.executable,
            "-m",
            "local",
            verb,
            "--env",
            self.env,
            "--state-dir",
            str(self.state),
            "--artifacts",
            str(self.artifacts),
        ]
        if verb == "up":
            base += [*port_flags(self.ports), "--no-tour"]
        return [*base, *extra]

    def up(self, log: Path) -> subprocess.Popen:
        return subprocess.Popen(
            self.cmd("up"),
            cwd=ROOT,
            stdout=log.open("w"),
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )

    def down(self) -> None:
        subprocess.run(self.cmd("down"), cwd=ROOT, capture_output=True, check=False, timeout=120)

    def answers(self) -> bool:
        try:
            page = httpx.get(f"{self.gateway}/", timeout=2)
            listed = httpx.get(f"{self.gateway}/v1/adapters", timeout=5)
        except httpx.HTTPError:
            return False
        return page.status_code == 200 and listed.status_code == 200

    def availability(self) -> dict[str, dict]:
        try:
            return (
                httpx.get(f"{self.gateway}/local/status", timeout=10).json().get("availability", {})
            )
        except (httpx.HTTPError, ValueError):
            return {}


def check_answers(p: Platform, dep) -> list[str]:
    """Every online adapter answers a test input through the router; the medical and PII
    answers keep the input's facts and leak nothing. Returns what failed."""
    from config import CATALOG_PATH
    from training import datasets
    from training.metrics import faithfulness, pii_example

    problems = []
    for a in dep.adapters:
        rec = datasets.for_entry(a.entry, CATALOG_PATH.parent)[0].test[0]
        body = {"inputs": rec.raw, "parameters": {"max_new_tokens": 96}}
        r = httpx.post(f"{p.gateway}/v1/adapters/{a.name}/generate", json=body, timeout=300)
        if r.status_code != 200:
            problems.append(f"{a.name}: HTTP {r.status_code}")
            continue
        out = r.json()["output"]
        print(f"  {a.name}: {rec.raw[:60]!r} -> {out[:100]!r}")
        if a.entry.task == "medical_shorthand" and faithfulness(out, rec.facts) < 1.0:
            problems.append(f"{a.name}: facts {rec.facts} not all kept in {out!r}")
        if a.entry.task == "pii_redaction" and pii_example(out, rec.label, json.loads(rec.note))[0]:
            problems.append(f"{a.name}: leaked personal data in {out!r}")
    return problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--env", default="local")
    ap.add_argument(
        "--keep-artifacts",
        type=Path,
        default=None,
        help="copy the trained artifacts here afterwards (e.g. .artifacts)",
    )
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "RESULTS.md")
    args = ap.parse_args(argv)
    dep = load_deployment(args.env)
    work = Path(tempfile.mkdtemp(prefix="bench-platform-"))
    p = Platform(args.env, work / "artifacts", work / "state")
    print(f"first up from nothing: artifacts {p.artifacts}, logs {p.state / 'logs'}")
    t0 = time.perf_counter()
    proc = p.up(work / "up-1.log")
    playground = None
    online: dict[str, float] = {}
    final: dict[str, dict] = {}
    trainer_done = False
    while True:
        now = time.perf_counter() - t0
        if playground is None and p.answers():
            playground = now
            print(f"  playground answers after {now:.0f} s")
        if playground is not None:
            avail = p.availability()
            for name, st in avail.items():
                if st.get("state") == "online" and name not in online:
                    online[name] = now
                    print(f"  {name} online after {now:.0f} s")
            final = avail or final
            status = (
                json.loads((p.state / "training.json").read_text())
                if (p.state / "training.json").exists()
                else {}
            )
            trainer_done = bool(status.get("finished"))
            settled = all(
                st.get("state") in ("online", "not publishable", "failed") for st in avail.values()
            )
            if avail and settled and (trainer_done or len(online) == len(dep.adapters)):
                break
        if proc.poll() not in (None, 0):
            print((work / "up-1.log").read_text()[-3000:])
            return 1
        if now > 4 * 3600:
            print("gave up after 4 hours")
            break
        time.sleep(1.0)
    first_total = time.perf_counter() - t0
    proc.wait(timeout=60)
    problems = check_answers(p, dep)
    p.down()

    t1 = time.perf_counter()
    again = subprocess.run(p.cmd("up"), cwd=ROOT, capture_output=True, text=True, check=False)
    cached = time.perf_counter() - t1
    cached_online = sum(1 for st in p.availability().values() if st.get("state") == "online")
    p.down()
    (work / "up-2.log").write_text(again.stdout + again.stderr)

    rows = [
        f"| playground answers (first up) | {playground:.0f} s | within {PLAYGROUND_GOAL_S:.0f} s |"
    ]
    for a in dep.adapters:
        st = final.get(a.name, {}).get("state", "?")
        when = f"{online[a.name]:.0f} s" if a.name in online else st
        rows.append(f"| {a.name} online (first up) | {when} | passes its gate |")
    rows.append(f"| every adapter settled (first up) | {first_total:.0f} s | |")
    rows.append(
        f"| cached up, until ready | {cached:.1f} s ({cached_online} adapters online) "
        f"| within {CACHED_GOAL_S:.0f} s |"
    )
    table = "\n".join(["| what | time | goal |", "|---|---|---|", *rows])
    print(table)
    failures = list(problems)
    if playground is None or playground > PLAYGROUND_GOAL_S:
        failures.append(f"the playground answered after {playground} s")
    missing = [a.name for a in dep.adapters if a.name not in online]
    if missing:
        failures.append(f"not online: {missing}")
    if again.returncode != 0 or cached > CACHED_GOAL_S or cached_online != len(online):
        failures.append(f"cached up: rc {again.returncode}, {cached:.1f} s, {cached_online} online")
    n_cores = cores()
    body = (
        "## Local platform start-up (`benchmarks/startup.py`)\n\n"
        f"Command: `.venv/bin/python benchmarks/startup.py --env {args.env}` "
        f"({time.strftime('%Y-%m-%d')}, {n_cores} CPU cores, base {dep.base.model_id}). The first "
        "`python -m local up` starts from an empty artifacts directory (download and conversion "
        "of the base, then every adapter trained in the background, one after another); times "
        "count from its start. The second is a cached `up` after `down`. The script checked "
        "that every adapter online answers through the router, and that the medical and PII "
        "answers to test inputs keep their facts and leak nothing"
        + (": " + "; ".join(failures) if failures else " (they did).")
        + "\n\n"
        + table
        + "\n"
    )
    write_section(args.out, "## Local platform start-up", body)
    if args.keep_artifacts is not None:
        shutil.copytree(p.artifacts, args.keep_artifacts, dirs_exist_ok=True)
    if failures:
        print("goals failed: " + "; ".join(failures))
        return 1
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
