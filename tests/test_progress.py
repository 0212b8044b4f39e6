"""The progress watchdog: a slow command that keeps printing finishes; a silent one is stopped."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.progress import run_with_progress

HERE = Path(__file__).parent


def _python(code: str) -> list[str]:
    return [sys.executable, "-u", "-c", code]


def test_a_command_that_keeps_printing_runs_past_the_stall_bound() -> None:
    slow = "import time\nfor i in range(6):\n    print(i, flush=True); time.sleep(0.5)"
    done = run_with_progress(_python(slow), cwd=HERE, stall_s=1.5, bound_s=60)
    assert done.returncode == 0 and done.stdout.split() == [str(i) for i in range(6)]


def test_a_silent_command_is_stopped_and_says_why() -> None:
    silent = "import time\nprint('started', flush=True)\ntime.sleep(60)"
    done = run_with_progress(_python(silent), cwd=HERE, stall_s=1.0, bound_s=60)
    assert done.returncode == -9 and "no progress for 1 s" in done.stdout
    assert done.stdout.startswith("started")


def test_the_overall_bound_stops_a_command_that_never_ends() -> None:
    chatty = "import time\nwhile True:\n    print('.', flush=True); time.sleep(0.2)"
    done = run_with_progress(_python(chatty), cwd=HERE, stall_s=5, bound_s=1.5)
    assert done.returncode == -9 and "still running after 2 s" in done.stdout
