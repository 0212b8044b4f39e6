"""Waiting on a command by its progress, not by a fixed clock (a machine busy with other work,
such as ``make up``'s trainer, slows a command down without stalling it)."""

from __future__ import annotations

import queue
import subprocess
import threading
import time
from pathlib import Path


def run_with_progress(
    argv: list[str], *, cwd: Path, stall_s: float, bound_s: float
) -> subprocess.CompletedProcess:
    """Runs ``argv`` to its end while it keeps printing: each output line is progress. Kills it
    and returns exit code -9 (with a line saying why) after ``stall_s`` without a line or
    ``bound_s`` in all."""
    proc = subprocess.Popen(
        argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
    )
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    out: list[str] = []
    start = last = time.monotonic()
    why = None
    while True:
        try:
            line = lines.get(timeout=1.0)
        except queue.Empty:
            line = ""
        if line is None:
            break
        now = time.monotonic()
        if line:
            out.append(line)
            last = now
        if now - last > stall_s:
            why = f"no progress for {stall_s:.0f} s"
        elif now - start > bound_s:
            why = f"still running after {bound_s:.0f} s"
        if why is not None:
            proc.kill()
            proc.wait()
            out.append(f"\n[run_with_progress] killed: {why}\n")
            return subprocess.CompletedProcess(argv, -9, "".join(out), "")
    return subprocess.CompletedProcess(argv, proc.wait(), "".join(out), "")
