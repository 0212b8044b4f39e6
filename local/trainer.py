"""The local platform's background trainer: adapters train one after another while the platform
serves, and each comes online as soon as it passes its gate.

``python -m local up`` starts it (``python -m local trainer ...``) when adapters are missing or
stale, then returns: the base, the router and the playground serve at once, and a first
``make up`` does not wait an hour for seven CPU trainings. Progress is a JSON file,
``STATE/training.json``, which ``python -m local status`` and the playground read:

    {"pid": 123, "adapters": {"sales-json": {"state": "training", "step": 10, "steps": 25,
     ...}}}

States: ``queued`` -> ``training`` -> ``evaluating`` -> ``online`` (declared to the endpoint),
or ``not publishable`` (its gate failed: it is not served unless the platform was started with
``--serve-unpublishable``), or ``failed`` (training raised; the detail says why).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from config.layout import archives_dir
from local.options import Options
from local.processes import alive, read_state, reap, spawn, write_state

STATUS_FILE = "training.json"
_STEP = re.compile(r"step (\d+)/(\d+)")


def read_status(state_dir: Path) -> dict[str, Any]:
    path = state_dir / STATUS_FILE
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return {}


class Status:
    """``training.json``, rewritten whole (write then rename) at every change."""

    def __init__(self, state_dir: Path, queued: list[str]) -> None:
        self.path = state_dir / STATUS_FILE
        self.data: dict[str, Any] = {
            "pid": os.getpid(),
            "started": round(time.time(), 3),
            "finished": None,
            "adapters": {n: {"state": "queued"} for n in queued},
        }
        self._write()

    def set(self, name: str, **fields: Any) -> None:
        self.data["adapters"].setdefault(name, {}).update(fields)
        self._write()

    def done(self) -> None:
        self.data["finished"] = round(time.time(), 3)
        self._write()

    def _write(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=1) + "\n")
        tmp.replace(self.path)


def run(opts: Any, todo: list[str], declare: Any, log=print) -> int:
    """Train ``todo`` in order; after each adapter that may be served, ``declare()`` the
    components again (the endpoint then registers it and the router's cache drops its keys).
    Returns the number that could not be brought online."""
    from config import load_deployment
    from training.train import train

    lower_priority()
    status = Status(opts.state_dir, todo)
    dep = load_deployment(opts.env, opts.catalog, opts.environments_dir)
    base_dir = opts.artifacts / "base" / dep.base_key
    out = archives_dir(opts.artifacts / "adapters", dep.base_key)
    out.mkdir(parents=True, exist_ok=True)
    offline = 0
    queue, attempted = list(todo), set()
    while queue or (queue := _added(opts, attempted, status)):
        name = queue.pop(0)
        attempted.add(name)
        t0 = time.time()
        status.set(name, state="training", started=round(t0, 3), step=0)

        def progress(line: str, name: str = name) -> None:
            log(f"[{name}] {line}" if not line.startswith("[") else line)
            m = _STEP.search(line)
            if m:
                status.set(name, step=int(m[1]), steps=int(m[2]))
            elif "evaluating" in line:
                status.set(name, state="evaluating")

        try:
            res = train(
                name,
                env=dep.env.name,
                base_dir=base_dir,
                out_dir=out,
                max_steps=opts.max_steps,
                catalog=opts.catalog,
                environments_dir=opts.environments_dir,
                log=progress,
            )
        except Exception as exc:
            log(traceback.format_exc())
            status.set(
                name,
                state="failed",
                detail=f"{type(exc).__name__}: {exc}"[:500],
                seconds=round(time.time() - t0, 1),
            )
            offline += 1
            continue
        ev = res.manifest.eval or {}
        summary = {
            "score": ev["adapter"]["score"],
            "base_score": ev["base"]["score"],
            "ci_low": ev["bootstrap"]["ci_low"],
            "metric": ev["metric"],
            "seconds": round(res.seconds, 1),
        }
        if not ev["publishable"] and not opts.serve_unpublishable:
            status.set(name, state="not publishable", detail="; ".join(ev["failures"]), **summary)
            offline += 1
            continue
        try:
            declare()
        except Exception as exc:  # the platform may be going down: the next up declares it
            log(traceback.format_exc())
            status.set(
                name, state="failed", detail=f"trained, but not declared: {exc}"[:500], **summary
            )
            offline += 1
            continue
        status.set(
            name,
            state="online",
            online_at=round(time.time(), 3),
            publishable=bool(ev["publishable"]),
            **summary,
        )
        log(f"[{name}] online after {time.time() - t0:.0f} s")
    status.done()
    return offline


def _added(opts: Any, attempted: set[str], status: Status) -> list[str]:
    """Adapters that need training now and were not tried in this run: entries added to the
    catalog (or changed) while it trained. ``up`` does not start a second trainer, so this one
    takes them when its queue ends."""
    from config import load_deployment
    from contracts.manifests import BaseManifest
    from local.artifacts import plan_adapters

    dep = load_deployment(opts.env, opts.catalog, opts.environments_dir)
    manifest = BaseManifest.read(opts.artifacts / "base" / dep.base_key)
    plan = plan_adapters(dep, opts, manifest)
    added = [name for name, _ in plan.todo if name not in attempted]
    for name in added:
        status.set(name, state="queued")
    return added


# -- starting it, from up ---------------------------------------------------------------


def trainer_command(opts: Options, todo: list[str]) -> list[str]:
    cmd = [
        sys.executable,
        "-m",
        "local",
        "trainer",
        "--env",
        opts.env,
        "--catalog",
        str(opts.catalog),
        "--environments-dir",
        str(opts.environments_dir),
        "--state-dir",
        str(opts.state_dir),
        "--artifacts",
        str(opts.artifacts),
        "--gateway-port",
        str(opts.gateway_port),
        "--endpoint-port",
        str(opts.endpoint_port),
        "--runtime-port",
        str(opts.runtime_port),
    ]
    if opts.max_steps is not None:
        cmd += ["--max-steps", str(opts.max_steps)]
    if opts.serve_unpublishable:
        cmd.append("--serve-unpublishable")
    return [*cmd, *todo]


#: The lowest scheduling priority: background training yields the cores to what the user runs.
BACKGROUND_NICE = 19


def lower_priority() -> None:
    """Background work at the lowest priority (``nice`` 19)."""
    with contextlib.suppress(OSError):
        os.nice(BACKGROUND_NICE - os.nice(0))


def priority(pid: int) -> tuple[int, bool] | None:
    """A process's nice value and whether it is stopped (paused), from /proc; None when it is
    gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[16]), fields[0] == "T"


def pause_running_trainer(state_dir: Path) -> int | None:
    """Pause (SIGSTOP) the background trainer ``make up`` started, if one runs: on two cores a
    trainer keeps a core whatever its priority, and a foreground job (the test suite, a
    benchmark) timed out beside it. Its pid, for ``resume``; None when none runs."""
    from local.processes import alive, read_state

    running = read_state(state_dir).get("trainer") or {}
    pid = running.get("pid")
    if not pid or not alive(pid) or read_status(state_dir).get("finished"):
        return None
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGSTOP)
        return pid
    return None


def resume(pid: int) -> None:
    """Let a paused trainer go on where it stopped."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGCONT)


def start_trainer(opts: Options, todo: list[str]) -> int | None:
    """Start the background trainer for ``todo`` unless one already runs; its pid."""
    state = read_state(opts.state_dir)
    running = state.get("trainer")
    if running and alive(running["pid"]):
        queued = running.get("adapters", [])
        later = ", ".join(a for a in todo if a not in queued) or "nothing else"
        opts.log(
            f"      the trainer (pid {running['pid']}) is already training "
            f"{', '.join(queued)}; it takes {later} when its queue ends"
        )
        return running["pid"]
    env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }
    proc = spawn("trainer", trainer_command(opts, todo), env, opts.state_dir)
    state["trainer"] = {"pid": proc.pid, "adapters": todo, "health": None}
    write_state(opts.state_dir, state)
    return proc.pid


def wait_for_trainer(opts: Options, pid: int, poll_s: float = 2.0) -> None:
    """Follow the trainer's progress until it exits (``--wait``)."""
    shown: dict[str, str] = {}
    while True:
        status = read_status(opts.state_dir).get("adapters", {})
        for name, st in status.items():
            line = st.get("state", "?")
            if line == "training" and st.get("steps"):
                line += f" {st.get('step', 0)}/{st['steps']}"
            if shown.get(name) != line:
                shown[name] = line
                opts.log(f"      {name}: {line}")
        reap(pid)  # the trainer is this process's child: an exited one lingers until reaped
        if not alive(pid):
            break
        time.sleep(poll_s)
