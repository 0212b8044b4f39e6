"""The platform's processes: the model server, the local SageMaker endpoint and the gateway,
started in sessions of their own with the environments infra would give them
(``config.processes``), their pids and health URLs in ``STATE/state.json``, and stopped."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from config import Deployment
from config.processes import merged_runtime_settings, router_settings, runtime_settings
from contracts.manifests import BaseManifest
from contracts.settings import RuntimeSettings
from local.options import ROOT, Options, PlatformError


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def healthy(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2.0).status_code == 200
    except httpx.HTTPError:
        return False


def wait_healthy(
    url: str, proc: subprocess.Popen | None, name: str, log_file: Path, timeout_s: float = 180.0
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if healthy(url):
            return
        if proc is not None and proc.poll() is not None:
            tail = log_file.read_text(errors="replace")[-3000:] if log_file.exists() else ""
            raise PlatformError(f"{name} exited with code {proc.returncode}:\n{tail}")
        time.sleep(0.25)
    raise PlatformError(f"{name} did not answer {url} within {timeout_s:.0f} s (log: {log_file})")


def read_state(state_dir: Path) -> dict[str, Any]:
    path = state_dir / "state.json"
    return json.loads(path.read_text()) if path.exists() else {}


def write_state(state_dir: Path, state: dict[str, Any]) -> None:
    (state_dir / "state.json").write_text(json.dumps(state, indent=2) + "\n")


def spawn(name: str, cmd: list[str], env: dict[str, str], state_dir: Path) -> subprocess.Popen:
    logs = state_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log_file = (logs / f"{name}.log").open("ab")
    return subprocess.Popen(
        cmd,
        cwd=ROOT,
        env=env,
        stdout=log_file,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )


#: What the local runtime sets on top of the deployment's settings, and why each must differ.
def _local_runtime(base_dir: Path, state_dir: Path, settings: RuntimeSettings) -> dict[str, Any]:
    manifest = BaseManifest.read(base_dir)
    return {
        # A directory of this platform's own, not the container's /tmp.
        "work_dir": state_dir / "runtime-work",
        # vLLM's CPU build: its KV cache in host memory (the GPU's is OPTION_VRAM_HEADROOM).
        "cpu_kvcache_gib": 2,
        # The local base's tokenizer hash is known (the builder wrote it), so the start-up
        # check that guards Qwen3-4B on SageMaker runs here too.
        "base_tokenizer_sha256": settings.base_tokenizer_sha256 or manifest.tokenizer_sha256,
    }


def runtime_environment(dep: Deployment, base_dir: Path, state_dir: Path) -> dict[str, str]:
    """The container environment the runtime gets: infra's (``config.processes``), plus the
    fields ``_local_runtime`` names."""
    base = runtime_settings(dep)
    return base.replaced(**_local_runtime(base_dir, state_dir, base)).to_env()


def merged_runtime_environment(dep: Deployment, base: Path, state_dir: Path) -> dict[str, str]:
    """A merged model's server: the base's options without LoRA, as infra's."""
    merged = merged_runtime_settings(dep)
    return merged.replaced(**_local_runtime(base, state_dir, merged)).to_env()


def router_environment(dep: Deployment) -> dict[str, str]:
    """The router's limits, as infra/router.py puts them in the function's environment."""
    return router_settings(dep).to_env()


#: Every process's output unbuffered (its log is read as it runs), and no model hub reached.
_OFFLINE = {"PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def start_services(dep: Deployment, base_dir: Path, opts: Options) -> dict[str, Any]:
    state_dir = opts.state_dir
    state_dir.mkdir(parents=True, exist_ok=True)
    old = read_state(state_dir)
    fingerprint = {
        "base_dir": str(base_dir),
        "base": f"{dep.base.model_id}@{dep.base.revision}",
        "runtime_env": runtime_environment(dep, base_dir, state_dir),
        "router_env": router_environment(dep),
        "ports": [opts.runtime_port, opts.endpoint_port, opts.gateway_port],
        "redis_url": opts.redis_url,
        "catalog": str(opts.catalog),
    }
    procs = old.get("processes", {})
    running = bool(procs) and all(alive(p["pid"]) for p in procs.values())
    if (
        running
        and old.get("fingerprint") == fingerprint
        and all(healthy(p["health"]) for p in procs.values())
    ):
        opts.log(
            f"[3/4] services: reusing the running platform (runtime pid "
            f"{procs['runtime']['pid']}; the base is not restarted)"
        )
        return old
    if procs:
        opts.log("[3/4] services: configuration changed; restarting")
        stop(state_dir, log=lambda m: opts.log(f"      {m}"))
    else:
        opts.log("[3/4] services: starting")

    routing = write_routing_table(dep, state_dir)
    py = sys.executable
    base_env = {**os.environ, **_OFFLINE}
    runtime_url = opts.url(opts.runtime_port)
    endpoint_url = opts.url(opts.endpoint_port)
    gateway_url = opts.url(opts.gateway_port)
    specs = [
        (
            "runtime",
            [
                py,
                "-m",
                "runtime",
                "serve",
                "--model-dir",
                str(base_dir),
                "--host",
                opts.host,
                "--port",
                str(opts.runtime_port),
            ],
            {**base_env, **fingerprint["runtime_env"]},
            f"{runtime_url}/ping",
        ),
        (
            "endpoint",
            [
                py,
                "-m",
                "local",
                "endpoint",
                "--host",
                opts.host,
                "--port",
                str(opts.endpoint_port),
                "--runtime-url",
                runtime_url,
                "--endpoint-name",
                dep.endpoint_name,
                "--base-component",
                dep.base_component_name,
                "--work-dir",
                str(state_dir / "components"),
            ],
            base_env,
            f"{endpoint_url}/ping",
        ),
        (
            "gateway",
            [
                py,
                "-m",
                "local",
                "gateway",
                "--host",
                opts.host,
                "--port",
                str(opts.gateway_port),
                "--endpoint-url",
                endpoint_url,
                "--runtime-url",
                runtime_url,
                "--routing-table",
                str(routing),
                "--catalog",
                str(opts.catalog),
                "--region",
                dep.env.region,
                "--state-dir",
                str(state_dir),
                *(["--redis-url", opts.redis_url] if opts.redis_url else []),
                # As many as the function may run (the gateway caps it: local.environments).
                "--router-environments",
                str(dep.env.router.reserved_concurrency),
            ],
            {**base_env, **fingerprint["router_env"]},
            f"{gateway_url}/health",
        ),
    ]
    state: dict[str, Any] = {"fingerprint": fingerprint, "processes": {}}
    for name, cmd, env, health in specs:
        proc = spawn(name, cmd, env, state_dir)
        state["processes"][name] = {"pid": proc.pid, "health": health, "cmd": cmd}
        write_state(state_dir, state)
        wait_healthy(health, proc, name, state_dir / "logs" / f"{name}.log")
        opts.log(f"      {name:<8} pid {proc.pid:<7} {health.rsplit('/', 1)[0]}")
    return state


def stop(state_dir: Path, log=print, timeout_s: float = 10.0) -> int:
    """Stop every process ``up`` started; the number stopped."""
    state = read_state(state_dir)
    procs = dict(state.get("processes", {}))
    if state.get("trainer"):  # stopped first: it declares adapters to the endpoint
        procs = {**procs, "trainer": state["trainer"]}
    stopped = 0
    for name, p in reversed(list(procs.items())):
        pid = p["pid"]
        if not alive(pid):
            continue
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            continue
        deadline = time.monotonic() + timeout_s
        while alive(pid) and time.monotonic() < deadline:
            reap(pid)
            time.sleep(0.1)
        if alive(pid):
            os.killpg(pid, signal.SIGKILL)
        reap(pid)
        stopped += 1
        log(f"stopped {name} (pid {pid})")
    (state_dir / "state.json").unlink(missing_ok=True)
    return stopped


def reap(pid: int) -> None:
    """Collect a child that exited, so it does not linger as a zombie that looks alive."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def write_routing_table(dep: Deployment, state_dir: Path) -> Path:
    """The table the router ships with (``Deployment.routing_table()``), for the gateway."""
    path = state_dir / "routing_table.json"
    # A canary's own component is SageMaker's; the local endpoint serves each entry's stable
    # version, so no share of requests may be sent to a component it lacks.
    path.write_text(dep.routing_table().without_canaries().dumps() + "\n")
    return path
