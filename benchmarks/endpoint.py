"""``make bench-endpoint ENV=dev`` (``python benchmarks/endpoint.py --env dev``): your own deployed
endpoint, measured through the router as your users reach it.

This project has no GPU to measure on; a deployed environment does. The script drives the
router with SigV4 (the boto3 session's credentials, as ``lambda_proxy.client`` signs for the
``openai`` client) on the adapters the caller may use (``GET /v1/adapters``), with:

- a Zipf workload over those adapters (``--zipf``, 1.1 by default: a few popular, a long tail);
- an open loop: requests start on a Poisson schedule at ``--rate`` per second, whether or not
  earlier ones have answered (a closed loop would slow down with the endpoint and hide queueing);
- a share of streamed requests (``--stream``), whose time to first token is the first token
  event's arrival;

and prints time to first token (TTFT), time per output token (TPOT, streams), throughput in
output tokens per second, the error rate, and the p99 latency of the popular quarter of adapters
against the rare quarter. Every answer is checked: a 200 must carry text, a finish reason and
the adapter it was asked of (``adapter`` and ``artifact.name``), a stream must end with its
``done`` event; anything else counts as an error. It writes its section of
``benchmarks/RESULTS.md`` (``--results``) and a JSON file of every request (``--out``), and
exits non-zero when the error rate passes ``--max-error-rate``.

The same code measures the local platform (``--url http://127.0.0.1:8000/``, unsigned; the
local gateway reads the tenant from ``X-Local-Tenant``), which is how it is tested.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.results import RESULTS, write_section

PROMPTS = (
    "pt 81yo f c/o pnd and fx pain x4d, hx htn",
    "Customer says the parcel never came and wants a refund for order 55102.",
    "Rep: how many laptops? Client: 40 units at 1,200 each, delivery in March.",
    "My name is Dana Kim, phone 415-555-0134; please update my address.",
)


@dataclass
class Sample:
    adapter: str
    rank: int
    stream: bool
    status: int
    ok: bool
    why: str
    start_s: float
    latency_ms: float
    ttft_ms: float | None
    output_tokens: int


def zipf_weights(n: int, s: float) -> list[float]:
    w = [1.0 / (k**s) for k in range(1, n + 1)]
    total = sum(w)
    return [x / total for x in w]


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Client:
    """The router over HTTP: SigV4 for a deployed API, the tenant header for the local one."""

    def __init__(self, url: str, *, sign: bool, tenant: str | None, timeout_s: float) -> None:
        auth = None
        if sign:
            import boto3

            from lambda_proxy.client import SigV4Auth

            auth = SigV4Auth(boto3.Session())  # signs for the region the URL names
        headers = {"X-Local-Tenant": tenant} if tenant else {}
        self.http = httpx.Client(
            base_url=url.rstrip("/") + "/", auth=auth, headers=headers, timeout=timeout_s
        )

    def adapters(self) -> list[str]:
        r = self.http.get("v1/adapters")
        r.raise_for_status()
        return [a["name"] for a in r.json()["adapters"]]

    def one(self, adapter: str, rank: int, stream: bool, max_new: int, t0: float) -> Sample:
        body = {
            "inputs": PROMPTS[rank % len(PROMPTS)],
            "parameters": {"max_new_tokens": max_new, "temperature": 0},
            "stream": stream,
        }
        start = time.perf_counter()
        ttft = None
        try:
            if stream:
                status, answer, ttft = self._stream(adapter, body, start)
            else:
                r = self.http.post(f"v1/adapters/{adapter}/generate", json=body)
                status, answer = r.status_code, (r.json() if r.content else {})
        except (httpx.HTTPError, ValueError) as exc:
            status, answer = 0, {"error": f"{type(exc).__name__}: {exc}"}
        latency = (time.perf_counter() - start) * 1000
        ok, why = check(adapter, status, answer)
        tokens = int(((answer or {}).get("usage") or {}).get("output_tokens") or 0)
        return Sample(
            adapter, rank, stream, status, ok, why, start - t0, latency, ttft, tokens if ok else 0
        )

    def _stream(self, adapter: str, body: dict, start: float) -> tuple[int, dict, float | None]:
        ttft, event, done = None, None, {}
        with self.http.stream("POST", f"v1/adapters/{adapter}/generate", json=body) as r:
            if r.status_code != 200:
                r.read()
                return r.status_code, (r.json() if r.content else {}), None
            for line in r.iter_lines():
                if line.startswith("event: "):
                    event = line[7:]
                elif line.startswith("data: "):
                    if event == "token" and ttft is None:
                        ttft = (time.perf_counter() - start) * 1000
                    elif event == "done":
                        done = json.loads(line[6:])
                    elif event == "error":
                        return 200, {"error": json.loads(line[6:]).get("error")}, ttft
        return 200, done or {"error": "the stream ended without its done event"}, ttft


def check(adapter: str, status: int, answer: dict) -> tuple[bool, str]:
    """Whether an answer is one: what the benchmark counts as served."""
    if status != 200:
        return False, f"status {status}: {str((answer or {}).get('error'))[:120]}"
    if "error" in answer:
        return False, str(answer["error"])[:120]
    if not isinstance(answer.get("output"), str) or not answer.get("finish_reason"):
        return False, "no text or no finish reason"
    artifact = answer.get("artifact") or {}
    if answer.get("adapter") != adapter or (
        artifact and artifact.get("name") not in (None, adapter)
    ):
        return False, f"answered by {answer.get('adapter')}/{artifact.get('name')}, not {adapter}"
    return True, ""


def run(client: Client, args: argparse.Namespace) -> list[Sample]:
    adapters = client.adapters()[: args.adapters] if args.adapters else client.adapters()
    if not adapters:
        raise SystemExit("the caller may use no adapter (GET /v1/adapters is empty)")
    rng = random.Random(args.seed)
    rng.shuffle(adapters)  # popularity is no property of a name's order
    weights = zipf_weights(len(adapters), args.zipf)
    samples: list[Sample] = []
    lock = threading.Lock()
    threads = []
    t0 = time.perf_counter()
    at = 0.0
    for i in range(args.requests):
        at += rng.expovariate(args.rate)  # Poisson arrivals: an open loop
        rank = rng.choices(range(len(adapters)), weights)[0]
        stream = rng.random() < args.stream
        delay = t0 + at - time.perf_counter()
        if delay > 0:
            time.sleep(delay)

        def go(rank: int = rank, stream: bool = stream) -> None:
            s = client.one(adapters[rank], rank, stream, args.max_new_tokens, t0)
            with lock:
                samples.append(s)

        t = threading.Thread(target=go, name=f"request-{i}", daemon=True)
        t.start()
        threads.append(t)
        if args.progress and (i + 1) % max(1, args.requests // 10) == 0:
            print(f"  {i + 1}/{args.requests} requests started", flush=True)
    for t in threads:
        t.join()
    return sorted(samples, key=lambda s: s.start_s)


def summarize(samples: list[Sample], n_adapters: int) -> dict[str, Any]:
    ok = [s for s in samples if s.ok]
    wall = max((s.start_s + s.latency_ms / 1000 for s in samples), default=0.0)
    ttfts = [s.ttft_ms if s.ttft_ms is not None else s.latency_ms for s in ok]
    tpots = [
        (s.latency_ms - s.ttft_ms) / (s.output_tokens - 1)
        for s in ok
        if s.stream and s.ttft_ms is not None and s.output_tokens > 1
    ]
    quarter = max(1, n_adapters // 4)
    popular = [s.latency_ms for s in ok if s.rank < quarter]
    rare = [s.latency_ms for s in ok if s.rank >= n_adapters - quarter]
    return {
        "requests": len(samples),
        "errors": len(samples) - len(ok),
        "error_rate": (len(samples) - len(ok)) / len(samples) if samples else 0.0,
        "adapters": n_adapters,
        "streamed": sum(s.stream for s in samples),
        "ttft_p50_ms": percentile(ttfts, 0.5),
        "ttft_p99_ms": percentile(ttfts, 0.99),
        "tpot_p50_ms": percentile(tpots, 0.5),
        "tpot_p99_ms": percentile(tpots, 0.99),
        "latency_p50_ms": percentile([s.latency_ms for s in ok], 0.5),
        "output_tokens_per_s": sum(s.output_tokens for s in ok) / wall if wall else 0.0,
        "popular_p99_ms": percentile(popular, 0.99),
        "rare_p99_ms": percentile(rare, 0.99),
        "first_errors": sorted({s.why for s in samples if not s.ok})[:5],
    }


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f}"


def table(summary: dict[str, Any]) -> str:
    s = summary
    rows = [
        ("requests (streamed)", f"{s['requests']} ({s['streamed']})"),
        ("adapters", str(s["adapters"])),
        ("errors", f"{s['errors']} ({s['error_rate']:.1%})"),
        ("TTFT p50 / p99 (ms)", f"{_ms(s['ttft_p50_ms'])} / {_ms(s['ttft_p99_ms'])}"),
        ("TPOT p50 / p99 (ms, streams)", f"{_ms(s['tpot_p50_ms'])} / {_ms(s['tpot_p99_ms'])}"),
        ("latency p50 (ms)", _ms(s["latency_p50_ms"])),
        ("output tokens/s", f"{s['output_tokens_per_s']:.1f}"),
        ("p99 latency, popular quarter (ms)", _ms(s["popular_p99_ms"])),
        ("p99 latency, rare quarter (ms)", _ms(s["rare_p99_ms"])),
    ]
    return "\n".join(["| measure | value |", "|---|---|", *(f"| {a} | {b} |" for a, b in rows)])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--env", default="dev", help="the environment whose router is measured")
    ap.add_argument("--url", help="the router's base URL (default: the router stack's RouterUrl)")
    ap.add_argument("--tenant", help="X-Local-Tenant for the local gateway (unsigned)")
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--rate", type=float, default=2.0, help="requests started per second")
    ap.add_argument("--zipf", type=float, default=1.1)
    ap.add_argument("--stream", type=float, default=0.5, help="share of streamed requests")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--adapters", type=int, default=0, help="use at most this many (0: all)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=150.0)
    ap.add_argument("--max-error-rate", type=float, default=0.01)
    ap.add_argument("--results", type=Path, default=RESULTS)
    ap.add_argument("--out", type=Path, help="every request as JSON (default beside --results)")
    ap.add_argument("--quiet", dest="progress", action="store_false")
    args = ap.parse_args(argv)
    local = args.url is not None and httpx.URL(args.url).host in ("127.0.0.1", "localhost")
    url = args.url
    if url is None:
        from config import load_deployment
        from ops.smoke import router_url

        url = router_url(load_deployment(args.env))
    client = Client(url, sign=not local, tenant=args.tenant, timeout_s=args.timeout)
    print(
        f"measuring {url}: {args.requests} requests at {args.rate}/s, Zipf {args.zipf}", flush=True
    )
    samples = run(client, args)
    summary = summarize(samples, len({s.adapter for s in samples}) or 1)
    summary["adapters"] = len(
        client.adapters()[: args.adapters] if args.adapters else client.adapters()
    )
    text = table(summary)
    print(text)
    goal = summary["error_rate"] <= args.max_error_rate
    verdict = (
        f"error rate {summary['error_rate']:.1%} "
        + ("within" if goal else "OVER")
        + f" the goal of {args.max_error_rate:.1%}"
    )
    print(verdict)
    out = args.out or args.results.with_name(f"endpoint-{'local' if local else args.env}.json")
    out.write_text(
        json.dumps({"summary": summary, "samples": [asdict(s) for s in samples]}, indent=1)
    )
    where = "the local platform" if local else f"environment {args.env}"
    write_section(
        args.results,
        f"## Endpoint ({'local' if local else args.env})",
        f"## Endpoint ({'local' if local else args.env}): `benchmarks/endpoint.py`\n\n"
        f"Command: `.venv/bin/python benchmarks/endpoint.py {' '.join(argv or sys.argv[1:])}` "
        f"({time.strftime('%Y-%m-%d')}), {where} through its router: {args.requests} requests, "
        f"an open loop at {args.rate}/s, Zipf {args.zipf} over the caller's adapters, "
        f"{args.stream:.0%} streamed, {args.max_new_tokens} new tokens at most, every answer "
        f"checked. {verdict}. Every request is in `{out.name}`.\n\n" + text + "\n",
    )
    if summary["first_errors"]:
        print("errors, first kinds:", *summary["first_errors"], sep="\n  ")
    return 0 if goal else 1


if __name__ == "__main__":
    sys.exit(main())
