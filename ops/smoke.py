"""``python -m ops.smoke --env NAME``: invoke every adapter once through the deployed router.

An adapter inference component reports InService even when the container refused to register
its artifact, so a deploy is checked by calling each adapter: one SigV4-signed request per
catalog entry to ``POST /v1/adapters/NAME/generate``, sampled (so the response cache cannot
answer for the component), printing status, latency and the artifact that served it. The
runtime answers with the artifact's own identity (its manifest's name and version, and its
weights' sha256), since SageMaker does not document what adapter identifier it passes; exit 1
when any adapter fails, or is served by an artifact other than its catalog name and version.

The router's URL comes from the ``RouterUrl`` output of the ``PREFIX-router`` stack, or
``--url`` (which also points the check at the local platform's gateway).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from config import (
    CATALOG_PATH,
    ENVIRONMENTS_DIR,
    CatalogError,
    Deployment,
    load_deployment,
)

SMOKE_INPUT = "smoke test: reply with a few words"


@dataclass
class Result:
    adapter: str
    version: str
    status: int
    ms: float
    artifact: dict[str, Any] | None
    detail: str

    @property
    def served(self) -> str:
        a = self.artifact or {}
        if not a:
            return "-"
        sha = (a.get("sha256") or "")[:12]
        return f"{a.get('name')}@{a.get('version')}" + (f" sha256:{sha}" if sha else "")

    @property
    def mismatch(self) -> str | None:
        a = self.artifact or {}
        if not a:
            return "the container reported no artifact"
        if (a.get("name"), a.get("version")) != (self.adapter, self.version):
            return f"expected {self.adapter}@{self.version}"
        return None

    @property
    def ok(self) -> bool:
        return self.status == 200 and self.mismatch is None


def router_url(dep: Deployment) -> str:
    from config.aws import AwsEnv

    stack = f"{dep.env.prefix}-router"
    cfn = AwsEnv(dep.env).client("cloudformation")
    outputs = cfn.describe_stacks(StackName=stack)["Stacks"][0].get("Outputs", [])
    for o in outputs:
        if o["OutputKey"].startswith("RouterUrl"):
            return o["OutputValue"]
    raise SystemExit(f"stack {stack} has no RouterUrl output; is the router deployed?")


def _signed(
    url: str, body: bytes, region: str, extra: dict[str, str] | None = None
) -> urllib.request.Request:
    """A request signed for execute-api with the caller's credentials (none: unsigned)."""
    headers = {"Content-Type": "application/json", **(extra or {})}
    import boto3
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest

    credentials = boto3.Session().get_credentials()
    if credentials is not None:
        aws = AWSRequest(method="POST", url=url, data=body, headers=headers)
        SigV4Auth(credentials.get_frozen_credentials(), "execute-api", region).add_auth(aws)
        headers = dict(aws.headers.items())
    return urllib.request.Request(url, data=body, headers=headers, method="POST")  # noqa: S310


def invoke_all(dep: Deployment, url: str, timeout_s: float = 60.0) -> list[Result]:
    """One request per adapter; for an adapter with a canary, requests under new session keys
    until the canary's version answers too (the router sends it ``weight`` percent of new
    keys), and a failed result for it when it never does (rolled back by the router). A shadow
    canary answers no caller until the router's paired test promotes it, so only the stable
    version is required of it; its version is accepted when it answers (it was promoted)."""
    base = url.rstrip("/")
    if not base.startswith(("https://", "http://")):
        raise SystemExit(f"router URL {url!r} is not http(s)")
    results = []
    run = uuid.uuid4().hex[:8]
    for a in dep.adapters:
        canary = a.entry.canary
        shadow = canary is not None and canary.shadow is not None
        wanted = [a.entry.version] + ([canary.version] if canary and not shadow else [])
        allowed = wanted + ([canary.version] if shadow and canary else [])
        tries = 1 if canary is None else 3 + math.ceil(100 / (canary.weight or 10))
        seen: dict[str, Result] = {}
        failure = None
        for i in range(tries):
            r = _ask(dep, base, a.name, f"smoke-{run}-{i}", timeout_s)
            if not r.ok or r.version not in allowed:
                failure = r
                break
            seen.setdefault(r.version, r)
            if set(wanted) <= set(seen):
                break
        results += [seen[v] for v in allowed if v in seen]
        if failure is not None:
            results.append(failure)
            continue
        results += [
            Result(
                a.name,
                v,
                0,
                0.0,
                None,
                "no request reached this version in "
                f"{tries} new session keys (did the router roll the canary back?)",
            )
            for v in wanted
            if v not in seen
        ]
    return results


def _ask(dep: Deployment, base: str, adapter: str, session: str, timeout_s: float) -> Result:
    entry = dep.adapter(adapter).entry
    body = json.dumps(
        {
            "messages": [
                {"role": "system", "content": entry.profile().instruction},
                {"role": "user", "content": SMOKE_INPUT},
            ],
            # Sampled, so the router bypasses its cache and the component itself answers.
            "parameters": {"max_new_tokens": 8, "do_sample": True, "temperature": 0.7, "seed": 7},
        }
    ).encode()
    req = _signed(
        f"{base}/v1/adapters/{adapter}/generate", body, dep.env.region, {"X-Session-Key": session}
    )
    t0 = time.perf_counter()
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:  # noqa: S310
            status, raw = resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read()
    except (urllib.error.URLError, TimeoutError) as exc:
        status, raw = 0, json.dumps({"error": str(exc)}).encode()
    ms = (time.perf_counter() - t0) * 1000
    try:
        answer: dict[str, Any] = json.loads(raw)
    except ValueError:
        answer = {"error": raw[:200].decode(errors="replace")}
    detail = (
        (answer.get("output") or "")
        if status == 200
        else str(answer.get("error") or answer.get("message") or answer)
    )
    # The version the router routed to (a canary's, for its share of session keys).
    routed = str(answer.get("version") or entry.version)
    return Result(
        adapter, routed, status, ms, answer.get("artifact"), " ".join(detail.split())[:60]
    )


def render(results: list[Result]) -> str:
    width = max([len(r.adapter) for r in results] + [7])
    lines = [f"{'adapter':<{width}}  status  latency    served artifact / detail"]
    for r in results:
        mark = "ok " if r.ok else "FAIL"
        served = r.served
        if r.status == 200 and r.mismatch:
            served += f" ({r.mismatch})"
        lines.append(
            f"{r.adapter:<{width}}  {r.status:<6}  {r.ms:>7.0f} ms  {mark} {served}  {r.detail!r}"
        )
    failed = [r for r in results if not r.ok]
    lines.append(
        f"{len(results) - len(failed)}/{len(results)} adapters answered with their catalog version"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ops.smoke", description=__doc__)
    ap.add_argument("--env", required=True)
    ap.add_argument("--url", help="router base URL (default: the router stack's RouterUrl)")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per request")
    ap.add_argument("--catalog", type=Path, default=CATALOG_PATH)
    ap.add_argument("--environments-dir", type=Path, default=ENVIRONMENTS_DIR)
    args = ap.parse_args(argv)
    try:
        dep = load_deployment(args.env, args.catalog, args.environments_dir)
    except CatalogError as exc:
        print(f"catalog error:\n{exc}", file=sys.stderr)
        return 1
    if not dep.adapters:
        print(f"{args.env}: no adapters in the catalog")
        return 0
    results = invoke_all(dep, args.url or router_url(dep), args.timeout)
    print(render(results))
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
