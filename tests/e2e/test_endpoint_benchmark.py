"""``make bench-endpoint`` against the local platform: the same code a user points at a deployed
router (unsigned here; the local gateway plays SigV4 with its tenant header). It writes its
section of RESULTS.md and every request as JSON, checks every answer, and its figures match the
requests it sent."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.e2e


def test_the_endpoint_benchmark_measures_the_local_platform(platform, tmp_path) -> None:
    from benchmarks.endpoint import main

    results = tmp_path / "RESULTS.md"
    out = tmp_path / "endpoint.json"
    code = main(
        [
            "--url",
            platform.gateway + "/",
            "--requests",
            "12",
            "--rate",
            "6",
            "--stream",
            "0.5",
            "--max-new-tokens",
            "6",
            "--results",
            str(results),
            "--out",
            str(out),
            "--quiet",
        ]
    )
    data = json.loads(out.read_text())
    summary, samples = data["summary"], data["samples"]
    assert code == 0, summary
    assert summary["requests"] == len(samples) == 12 and summary["errors"] == 0
    assert 0 < summary["streamed"] < 12 and summary["ttft_p50_ms"] > 0
    assert summary["output_tokens_per_s"] > 0
    assert all(s["ok"] and 0 < s["output_tokens"] <= 6 for s in samples)
    text = results.read_text()
    assert "## Endpoint (local)" in text and "TTFT p50 / p99" in text
