"""``python -m local usage``: the local platform's usage by tenant and adapter, from the same
records the deployed router writes (``lambda_proxy.usage``), which the local gateway appends to
``STATE/usage.jsonl``; aggregated and printed as ``make usage`` prints CloudWatch's
(``contracts.usage``), without a cost (nothing is billed here)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

FILE = "usage.jsonl"


def keeper(state_dir: Path) -> Callable[[dict[str, Any]], None]:
    """A ``lambda_proxy.usage`` sink that appends each record as one JSON line."""
    path = state_dir / FILE
    lock = threading.Lock()

    def keep(record: dict[str, Any]) -> None:
        line = json.dumps(record, sort_keys=True) + "\n"
        with lock, path.open("a") as f:
            f.write(line)

    return keep


def read(state_dir: Path) -> list[dict[str, Any]]:
    path = state_dir / FILE
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def show(state_dir: Path, csv_path: Path | None = None, out=print) -> int:
    from contracts.usage import aggregate, render, to_csv

    records = read(state_dir)
    if not records:
        out(f"no usage recorded yet in {state_dir / FILE} (make up, then use the playground)")
        return 0
    rows = aggregate(records)
    out(f"usage on the local platform: {len(records)} requests, by tenant and adapter")
    out(render(rows))
    if csv_path is not None:
        csv_path.write_text(to_csv(rows))
        out(f"wrote {csv_path}")
    return 0
