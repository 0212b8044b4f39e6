"""benchmarks/RESULTS.md, written only by the scripts that measure: each replaces its own
section. Kept apart from the benchmarks so a writer (``training.train_all`` too) imports no
benchmark's dependencies."""

from __future__ import annotations

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
