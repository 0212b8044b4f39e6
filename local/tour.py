"""The tour ``up`` ends with: one request per serving adapter through the router, and whether
each answer kept its input's facts."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx

from config import Deployment


def _shorten(text: str | None, width: int = 60) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= width else text[: width - 1] + "…"


def tour(
    dep: Deployment,
    gateway_url: str,
    log=print,
    max_new_tokens: int = 64,
    only: set[str] | None = None,
) -> list[dict]:
    """One request per serving adapter through the gateway, then one repeat to show a cache
    hit. Each sends an input the way a user types it (``training.datasets.natural``; a
    test-split input, never seen in training, for a task an entry defines) as plain
    ``inputs``, the seed article's request form (the runtime gives it the chat shape the
    adapter was trained on), and shows whether the output kept the input's facts (and, for
    PII, leaked nothing)."""
    from config import CATALOG_PATH
    from training import datasets
    from training.datasets.natural import natural

    adapters = [a for a in dep.adapters if only is None or a.name in only]
    samples = {
        a.name: (
            natural(a.entry.task, a.entry.dataset)
            or datasets.for_entry(a.entry, CATALOG_PATH.parent)[0].test
        )[0]
        for a in adapters
    }
    rows = []
    with httpx.Client(base_url=gateway_url, timeout=120.0) as client:
        for label, a in [(a.name, a) for a in adapters] + (
            [(f"{adapters[0].name} (again)", adapters[0])] if adapters else []
        ):
            rows.append(_tour_row(client, label, a.name, samples[a.name], max_new_tokens))
    width = max(len(r["adapter"]) for r in rows) if rows else 10
    log(f"  {'adapter':<{width}}  status  latency   cache   facts  input -> output")
    for r in rows:
        shown = f"{_shorten(r['input'], 34)!r} -> {_shorten(r['output'])!r}"
        log(
            f"  {r['adapter']:<{width}}  {r['status']:<6}  {r['ms']:>6.0f} ms {r['cache']:<7} "
            f"{r['facts']:<6} {shown}"
        )
    return rows


def _tour_row(
    client: httpx.Client, label: str, adapter: str, sample: Any, max_new_tokens: int
) -> dict[str, Any]:
    from training.metrics import faithfulness, pii_example

    body = {
        "inputs": sample.raw,
        "parameters": {"max_new_tokens": max_new_tokens, "do_sample": False},
    }
    t0 = time.perf_counter()
    resp = client.post(f"/v1/adapters/{adapter}/generate", json=body)
    ms = (time.perf_counter() - t0) * 1000
    answer = resp.json()
    output = answer.get("output", answer.get("error")) or ""
    facts = f"{round(faithfulness(output, sample.facts) * len(sample.facts))}/{len(sample.facts)}"
    if not sample.facts:  # a team's own record: does the answer match its label?
        facts = "equal" if output.strip() == sample.label.strip() else "differs"
    if sample.category == "pii_redaction":
        leak, _ = pii_example(output, sample.label, json.loads(sample.note))
        facts = "leak" if leak else "no leak"
    return {
        "adapter": label,
        "status": resp.status_code,
        "ms": ms,
        "facts": facts,
        "cache": answer.get("cache", "-"),
        "input": sample.raw,
        "output": output,
    }
