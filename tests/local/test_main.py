"""``python -m local status``: what runs, and what the trainer is doing."""

from __future__ import annotations

import json
import os

from local.__main__ import main


def test_status_lists_each_process_and_the_trainers_progress(tmp_path, capsys) -> None:
    """Split from platform.py, the command once named a local variable after the function it
    called (``alive = alive(...)``) and failed on the first process it listed."""
    state = {"processes": {"runtime": {"pid": os.getpid(), "health": "http://127.0.0.1:9/ping"}}}
    (tmp_path / "state.json").write_text(json.dumps(state))
    (tmp_path / "training.json").write_text(
        json.dumps(
            {
                "pid": os.getpid(),
                "started": 0.0,
                "finished": None,
                "adapters": {"sales-json": {"state": "training", "step": 3, "steps": 25}},
            }
        )
    )
    assert main(["status", "--state-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"runtime   pid {os.getpid()}" in out and "DOWN" in out  # nothing answers port 9
    assert "sales-json" in out and "training step 3/25" in out
