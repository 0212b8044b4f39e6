"""benchmarks/RESULTS.md, written only by the scripts that measure: each replaces its own
section. Kept apart from the benchmarks so a writer (``training.train_all`` too) imports no
benchmark's dependencies."""

from __future__ import annotations

import json
import os
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"


def write_section(path: Path, heading: str, body: str) -> None:
    """Replace this benchmark's section in RESULTS.md, keeping the other benchmarks' sections."""
    text = path.read_text() if path.exists() else "# Benchmark results\n\n"
    if heading in text:
        start = text.index(heading)
        nxt = text.find("\n## ", start + len(heading))
        text = text[:start] + body.rstrip("\n") + "\n\n" + (text[nxt + 1 :] if nxt >= 0 else "")
    else:
        text = text.rstrip() + "\n\n" + body
    path.write_text(text)


def cores() -> int:
    """The CPU cores this process may run on (what a figure was measured with)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def report(
    path: Path,
    heading: str,
    header: str,
    table: str,
    results: dict[str, float],
    failures: list[str],
) -> int:
    """Write the section (the header's command line, ``Goals:`` met or which failed, the table
    and the figures as JSON) and return the script's exit status: 1 when a goal failed."""
    goals = "Goals: " + ("all met." if not failures else "FAILED: " + "; ".join(failures))
    write_section(
        path,
        heading,
        f"{heading}\n\n{header} {goals}\n\n{table}\n\n```json\n"
        + json.dumps({k: round(v, 4) for k, v in results.items()}, indent=2)
        + "\n```\n",
    )
    if failures:
        print("goals failed: " + "; ".join(failures))
        return 1
    return 0
