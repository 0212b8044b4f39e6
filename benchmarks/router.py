"""Router overhead: the handler's own latency (model time excluded), cache miss vs Redis hit.

SageMaker is botocore's Stubber (each call validated against the real API model, answered at
once), Redis is the one on 127.0.0.1:6379. Both cases run side by side in one process.

    .venv/bin/python benchmarks/router.py [--n 500]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("POWERTOOLS_TRACE_DISABLED", "true")
os.environ.setdefault("POWERTOOLS_METRICS_NAMESPACE", "LoraFleetBench")
os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")

import boto3
import redis
from botocore.response import StreamingBody
from botocore.stub import Stubber

from benchmarks.results import write_section
from lambda_proxy import handler as h
from lambda_proxy.cache import ResponseCache
from lambda_proxy.settings import RouterSettings
from tests.lambda_proxy.conftest import TABLE, Context, event


def _answer() -> dict:
    body = json.dumps({"generated_text": "ok", "finish_reason": "stop"}).encode()
    return {"Body": StreamingBody(io.BytesIO(body), len(body)), "ContentType": "application/json"}


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "RESULTS.md")
    args = ap.parse_args(argv)
    client = boto3.client("sagemaker-runtime", region_name="us-east-1")
    stub = Stubber(client)
    stub.activate()
    cache = ResponseCache(redis.Redis(host="127.0.0.1", port=6379), ttl_s=3600)
    h.configure(h.Dependencies(RouterSettings(routing_table=TABLE), cache, client))
    ctx = Context()
    miss, hit = [], []
    for i in range(args.n + 20):
        body = {"inputs": f"bench {uuid.uuid4().hex}", "parameters": {"max_new_tokens": 8}}
        stub.add_response("invoke_endpoint", _answer())
        t0 = time.perf_counter()
        out = h.handler(event(body=body), ctx)
        t1 = time.perf_counter()
        model_ms = json.loads(out["body"])["timings_ms"]["model"]
        h.handler(event(body=body), ctx)  # the same request again: a Redis hit
        t2 = time.perf_counter()
        assert json.loads(out["body"])["cache"] == "miss"
        if i >= 20:  # warm-up
            miss.append((t1 - t0) * 1000 - model_ms)
            hit.append((t2 - t1) * 1000)
    rows = [("cache miss (model time excluded)", miss), ("Redis cache hit", hit)]
    table = ["| case | p50 ms | p99 ms |", "|---|---|---|"]
    table += [f"| {label} | {_pct(v, 0.5):.3f} | {_pct(v, 0.99):.3f} |" for label, v in rows]
    text = "\n".join(table)
    print(text)
    write_section(
        args.out,
        "## Router overhead",
        f"## Router overhead (`benchmarks/router.py`)\n\nCommand: `.venv/bin/python "
        f"benchmarks/router.py --n {args.n}` ({time.strftime('%Y-%m-%d')}; handler in-process, "
        f"SageMaker via botocore Stubber, Redis on localhost; {args.n} requests per case).\n\n"
        + text
        + "\n",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
