"""Router overhead: the router's own latency (model time excluded), cache miss vs Redis hit,
for the Powertools handler alone and for the path a deployed request takes (AWS's Lambda Web
Adapter sends it as HTTP to ``lambda_proxy.web`` under uvicorn, which rebuilds the event and
hands it to the handler; here over loopback, as in the function).

SageMaker is botocore's Stubber (each call validated against the real API model, answered at
once), Redis is the one on 127.0.0.1:6379. Every case runs side by side in one process.

    .venv/bin/python benchmarks/router.py [--n 500]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("POWERTOOLS_TRACE_DISABLED", "true")
os.environ.setdefault("POWERTOOLS_METRICS_NAMESPACE", "LoraFleetBench")
os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
# The deployed level (infra/router.py): the per-request usage line is part of the overhead.
os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "INFO")

import boto3
import httpx
import redis
import uvicorn
from botocore.response import StreamingBody
from botocore.stub import Stubber

from benchmarks.results import write_section
from contracts.settings import RouterSettings
from lambda_proxy import handler as h
from lambda_proxy import service
from lambda_proxy.cache import ResponseCache
from lambda_proxy.web import app
from tests.lambda_proxy.conftest import (
    ALLOWED_ROLE,
    MEDICAL_ARTIFACT,
    TABLE,
    Context,
    event,
    free_port,
)


def _answer() -> dict:
    # The artifact the route names: the router caches only an answer that says it was served
    # by the routed adapter version (service._served_as_routed).
    body = json.dumps(
        {"generated_text": "ok", "finish_reason": "stop", "artifact": MEDICAL_ARTIFACT}
    ).encode()
    return {"Body": StreamingBody(io.BytesIO(body), len(body)), "ContentType": "application/json"}


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


def main(argv: list[str] | None = None) -> int:
    from lambda_proxy.telemetry import logger

    # Formatted and written as in Lambda, to a sink instead of this table's terminal.
    logger.registered_handler.setStream(open(os.devnull, "w"))  # noqa: SIM115
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "RESULTS.md")
    args = ap.parse_args(argv)
    client = boto3.client("sagemaker-runtime", region_name="us-east-1")
    stub = Stubber(client)
    stub.activate()
    cache = ResponseCache(redis.Redis(host="127.0.0.1", port=6379), ttl_s=3600)
    service.configure(service.Dependencies(RouterSettings(routing_table=TABLE), cache, client))
    ctx = Context()

    def direct(body: dict) -> tuple[int, dict]:
        out = h.handler(event(body=body), ctx)
        return out["statusCode"], json.loads(out["body"])

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.02)
    web = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30)
    # The API owner's account is the caller's: the route names its tenant by role name, which
    # the router qualifies with the owner's account.
    owner = ALLOWED_ROLE.split(":")[4]
    context = {
        "identity": {"userArn": ALLOWED_ROLE},
        "accountId": owner,
        "resourcePath": "/v1/adapters/{adapter}/generate",
        "stage": "v1",
    }
    lambda_context = json.dumps(
        {
            "request_id": "bench",
            "invoked_function_arn": f"arn:aws:lambda:us-east-1:{owner}:function:router",
        }
    )

    def through_web(body: dict) -> tuple[int, dict]:
        headers = {
            "x-amzn-request-context": json.dumps({**context, "requestId": uuid.uuid4().hex}),
            "x-amzn-lambda-context": lambda_context,
        }
        resp = web.post("/v1/adapters/medical/generate", json=body, headers=headers)
        return resp.status_code, resp.json()

    results: dict[str, list[float]] = {}
    for label, call in (("handler", direct), ("web", through_web)):
        miss, hit = results.setdefault(f"{label} miss", []), results.setdefault(f"{label} hit", [])
        for i in range(args.n + 20):
            body = {"inputs": f"bench {uuid.uuid4().hex}", "parameters": {"max_new_tokens": 8}}
            stub.add_response("invoke_endpoint", _answer())
            t0 = time.perf_counter()
            status, first = call(body)
            t1 = time.perf_counter()
            status_again, again = call(body)  # the same request again: a Redis hit
            t2 = time.perf_counter()
            got = (
                status,
                status_again,
                first["cache"],
                again["cache"],
                first["output"],
                again["output"],
            )
            if got != (200, 200, "miss", "hit", "ok", "ok"):
                raise AssertionError(f"{label}: the router did not answer as timed: {got}")
            if i >= 20:  # warm-up
                miss.append((t1 - t0) * 1000 - first["timings_ms"]["model"])
                hit.append((t2 - t1) * 1000)
    server.should_exit = True
    stub.assert_no_pending_responses()
    rows = [
        ("handler alone: cache miss (model time excluded)", results["handler miss"]),
        ("handler alone: Redis cache hit", results["handler hit"]),
        (
            "deployed path (HTTP to lambda_proxy.web): cache miss (model time excluded)",
            results["web miss"],
        ),
        ("deployed path (HTTP to lambda_proxy.web): Redis cache hit", results["web hit"]),
    ]
    table = ["| case | p50 ms | p99 ms |", "|---|---|---|"]
    table += [f"| {label} | {_pct(v, 0.5):.3f} | {_pct(v, 0.99):.3f} |" for label, v in rows]
    text = "\n".join(table)
    print(text)
    write_section(
        args.out,
        "## Router overhead",
        f"## Router overhead (`benchmarks/router.py`)\n\nCommand: `.venv/bin/python "
        f"benchmarks/router.py --n {args.n}` ({time.strftime('%Y-%m-%d')}; the handler in-process, "
        "and the deployed path: HTTP over loopback to lambda_proxy.web under uvicorn, as AWS's "
        "Lambda Web Adapter sends it; SageMaker via botocore Stubber, Redis on localhost; "
        f"{args.n} requests per case; every answer checked).\n\n" + text + "\n",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
