"""The catalog as the local endpoint's components: the ready adapters declared to it, those
still training as "Creating", and merged entries as model processes of their own."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import sys
from pathlib import Path
from typing import Any

import httpx

from config import Deployment, load_deployment
from contracts.manifests import BaseManifest
from local.artifacts import AdapterPlan, base_dir, plan_adapters
from local.options import Options
from local.processes import (
    alive,
    healthy,
    merged_runtime_environment,
    read_state,
    spawn,
    wait_healthy,
    write_routing_table,
    write_state,
)


def declare_components(
    dep: Deployment, plan: AdapterPlan, opts: Options, flush: list[str] | None = None
) -> list[dict[str, Any]]:
    """Tell the endpoint which adapter components serve (the ready ones) and which are still
    being made (the ones training: SageMaker's "Creating", answered as not ready yet), then
    point the router at the table and drop cached answers of adapters that changed."""
    write_routing_table(dep, opts.state_dir)
    components = {a.name: a.serving_component for a in dep.adapters}
    merged = {a.name for a in dep.adapters if a.merged}
    wanted = [
        {"component": components[n], "artifact": str(path)}
        for n, path in plan.ready.items()
        if n not in merged
    ]
    models, restarted = [], []
    for n, path in plan.ready.items():
        if n in merged:
            url, started = merged_server(dep, n, path, opts)
            models.append({"component": components[n], "url": url})
            if started:  # new merged weights: answers cached from the old ones must go
                restarted.append(n)
    pending = [components[n] for n, _ in plan.todo]
    resp = httpx.put(
        f"{opts.url(opts.endpoint_port)}/_local/components",
        json={"adapters": wanted, "pending": pending, "models": models},
        timeout=300.0,
    )
    resp.raise_for_status()
    actions = resp.json()["actions"]
    by_component = {c: n for n, c in components.items()}
    changed = [
        by_component.get(x["component"], x["component"])
        for x in actions
        if x["action"] in ("created", "updated", "deleted")
    ]
    flushed = sorted({*changed, *restarted, *(flush or [])})
    httpx.post(
        f"{opts.url(opts.gateway_port)}/_local/reload", json={"flush": flushed}, timeout=30.0
    ).raise_for_status()
    return actions


def merged_model_dir(dep: Deployment, name: str, archive: Path, opts: Options) -> Path:
    """The archive merged into the local base (``training.merge``), made once per archive."""
    from training.merge import merge
    from training.package import sha256_file

    out = opts.artifacts / "merged" / f"{name}-{sha256_file(archive)[:12]}"
    if not (out / "merged_manifest.json").is_file():
        tmp = out.with_name(out.name + ".partial")
        shutil.rmtree(tmp, ignore_errors=True)
        opts.log(f"      {name}: merging into the base (serving: merged)")
        merge(base_dir(dep, opts), archive, tmp, log=lambda m: None)
        shutil.rmtree(out, ignore_errors=True)
        tmp.rename(out)
    return out


def merged_server(dep: Deployment, name: str, archive: Path, opts: Options) -> tuple[str, bool]:
    """The URL of the model process serving ``name`` merged (a base component of its own, as
    on SageMaker), and whether it was started now: reused while it runs this archive's merged
    weights, else started."""
    model_dir = merged_model_dir(dep, name, archive, opts)
    key = f"merged-{name}"
    state = read_state(opts.state_dir)
    running = state.get("processes", {}).get(key)
    if (
        running
        and running.get("model_dir") == str(model_dir)
        and alive(running["pid"])
        and (healthy(running["health"]))
    ):
        return running["health"].rsplit("/", 1)[0], False
    if running and alive(running["pid"]):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(running["pid"], signal.SIGTERM)
    with socket.socket() as s:
        s.bind((opts.host, 0))
        port = s.getsockname()[1]
    env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "HF_HUB_OFFLINE": "1",
        **merged_runtime_environment(dep, base_dir(dep, opts), opts.state_dir),
    }
    cmd = [
        sys.executable,
        "-m",
        "runtime",
        "serve",
        "--model-dir",
        str(model_dir),
        "--host",
        opts.host,
        "--port",
        str(port),
    ]
    proc = spawn(key, cmd, env, opts.state_dir)
    health = f"{opts.url(port)}/ping"
    state = read_state(opts.state_dir)
    state.setdefault("processes", {})[key] = {
        "pid": proc.pid,
        "health": health,
        "cmd": cmd,
        "model_dir": str(model_dir),
    }
    write_state(opts.state_dir, state)
    opts.log(f"      {name}: starting its own model process (pid {proc.pid})")
    wait_healthy(health, proc, key, opts.state_dir / "logs" / f"{key}.log", timeout_s=600.0)
    return opts.url(port), True


def declare_ready(opts: Options) -> list[dict[str, Any]]:
    """Declare what is ready now (the trainer calls this after each adapter comes online)."""
    dep = load_deployment(opts.env, opts.catalog, opts.environments_dir)
    manifest = BaseManifest.read(base_dir(dep, opts))
    return declare_components(dep, plan_adapters(dep, opts, manifest), opts)
