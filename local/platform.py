"""``python -m local up`` / ``down``: the whole system on one machine.

``up`` is idempotent and incremental: the base is built once (cached by its recipe), adapters
are trained only when their archive is missing or was trained with other settings, running
processes are reused when they serve the same base, and the adapter components are declared
to the local endpoint as the catalog lists them. Adding a catalog entry and running ``up``
again therefore trains and registers just that adapter; the base keeps running.

Processes (each its own session, logs under ``STATE/logs``): the runtime server (the
container's model server), the local SageMaker endpoint, and the local API gateway with the
router and the playground. Their pids and ports are in ``STATE/state.json``; ``down`` stops
them.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from config import CATALOG_PATH, ENVIRONMENTS_DIR, Deployment, load_deployment

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"


@dataclass
class Options:
    env: str = "local"
    catalog: Path = CATALOG_PATH
    environments_dir: Path = ENVIRONMENTS_DIR
    state_dir: Path = ROOT / ".local"
    artifacts: Path = ROOT / ".artifacts"
    host: str = "127.0.0.1"
    gateway_port: int = 8000
    endpoint_port: int = 8081
    runtime_port: int = 8080
    redis_url: str | None = DEFAULT_REDIS_URL
    max_steps: int | None = None  # cap training steps (quick platforms for tests)
    tour: bool = True
    log: Any = field(default=print)

    def url(self, port: int) -> str:
        return f"http://{self.host}:{port}"


class PlatformError(RuntimeError):
    pass


# -- artifacts -------------------------------------------------------------------------------


def base_preset(dep: Deployment) -> str:
    """The ``training.base`` preset that builds this environment's local base."""
    if dep.base.source != "local":
        raise PlatformError(
            f"environment {dep.env.name!r} serves {dep.base.model_id} from the hub; the local "
            "platform runs only local bases (nothing can be downloaded here)"
        )
    preset = dep.base.model_id.removeprefix("local/qwen3-")
    from training.base import PRESETS

    if preset not in PRESETS:
        raise PlatformError(
            f"no local preset builds {dep.base.model_id} (known: {sorted(PRESETS)})"
        )
    return preset


def cached_adapter(dep: Deployment, name: str, out: Path, base_manifest: dict,
                   max_steps: int | None) -> str | None:  # fmt: skip
    """Why the archive in ``out`` cannot be reused, or None when it can."""
    archive, manifest_path = out / f"{name}.tar.gz", out / name / "manifest.json"
    if not archive.is_file() or not manifest_path.is_file():
        return "no artifact yet"
    m = json.loads(manifest_path.read_text())
    entry = dep.adapter(name).entry
    if m.get("version") != entry.version:
        return f"version {m.get('version')} -> {entry.version}"
    base = m.get("base") or {}
    if (base.get("model_id"), base.get("revision"), base.get("tokenizer_sha256")) != (
        base_manifest["model_id"],
        base_manifest["revision"],
        base_manifest["tokenizer_sha256"],
    ):
        return "trained on another base"
    from training.train import recorded_hyperparameters

    if m.get("hyperparameters") != recorded_hyperparameters(entry.profile(), max_steps):
        return "hyperparameters changed"
    return None


def build_artifacts(dep: Deployment, opts: Options) -> tuple[Path, dict[str, Path]]:
    import datasets as hf_datasets
    import transformers

    from training.base import build_base
    from training.train import train

    # Progress here is one line per step of the platform; the libraries' bars and deprecation
    # notices (about arguments TRL passes, not ours) would bury it.
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"transformers\.")
    hf_datasets.disable_progress_bars()
    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    log = opts.log
    preset = base_preset(dep)
    base_dir = opts.artifacts / "base" / dep.base_key
    log(f"[1/4] base model {dep.base.model_id}@{dep.base.revision} (preset {preset})")
    t0 = time.perf_counter()
    build_base(base_dir, preset=preset, log=lambda m: log(f"      {m}"))
    base_manifest = json.loads((base_dir / "base_manifest.json").read_text())
    if (base_manifest["model_id"], base_manifest["revision"]) != (
        dep.base.model_id, dep.base.revision
    ):  # fmt: skip
        raise PlatformError(
            f"{base_dir} holds {base_manifest['model_id']}@{base_manifest['revision']}, but the "
            f"catalog's {dep.base_key} is {dep.base.model_id}@{dep.base.revision}"
        )
    log(f"      ready in {time.perf_counter() - t0:.1f} s")

    out = opts.artifacts / "adapters"
    out.mkdir(parents=True, exist_ok=True)
    todo = []
    for a in dep.adapters:
        why = cached_adapter(dep, a.name, out, base_manifest, opts.max_steps)
        if why is not None:
            todo.append((a.name, why))
    log(f"[2/4] adapters: {len(dep.adapters) - len(todo)} cached, {len(todo)} to train")
    for i, (name, why) in enumerate(todo, 1):
        log(f"      ({i}/{len(todo)}) {name}: {why}")
        res = train(name, env=dep.env.name, base_dir=base_dir, out_dir=out,
                    max_steps=opts.max_steps, catalog=opts.catalog,
                    environments_dir=opts.environments_dir,
                    log=lambda m: log(f"        {m}"))  # fmt: skip
        if not res.manifest["eval"]["beats_base"]:
            log(f"      ! {name} does not beat its base on held-out data (served anyway here; "
                "training.publish would refuse it)")  # fmt: skip
    return base_dir, {a.name: out / f"{a.name}.tar.gz" for a in dep.adapters}


# -- processes -------------------------------------------------------------------------------


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _healthy(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2.0).status_code == 200
    except httpx.HTTPError:
        return False


def _wait(url: str, proc: subprocess.Popen | None, name: str, log_file: Path,
          timeout_s: float = 180.0) -> None:  # fmt: skip
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if _healthy(url):
            return
        if proc is not None and proc.poll() is not None:
            tail = log_file.read_text(errors="replace")[-3000:] if log_file.exists() else ""
            raise PlatformError(f"{name} exited with code {proc.returncode}:\n{tail}")
        time.sleep(0.25)
    raise PlatformError(f"{name} did not answer {url} within {timeout_s:.0f} s (log: {log_file})")


def read_state(state_dir: Path) -> dict[str, Any]:
    path = state_dir / "state.json"
    return json.loads(path.read_text()) if path.exists() else {}


def _write_state(state_dir: Path, state: dict[str, Any]) -> None:
    (state_dir / "state.json").write_text(json.dumps(state, indent=2) + "\n")


def _spawn(name: str, cmd: list[str], env: dict[str, str], state_dir: Path) -> subprocess.Popen:
    logs = state_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log_file = (logs / f"{name}.log").open("ab")
    return subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=log_file, stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip


def runtime_environment(dep: Deployment, base_dir: Path, state_dir: Path) -> dict[str, str]:
    """The container environment the runtime gets (the names infra/serving.py sets)."""
    s, base = dep.env.serving, dep.base
    manifest = json.loads((base_dir / "base_manifest.json").read_text())
    return {
        "OPTION_MAX_LORAS": str(s.max_loras or 4),
        "OPTION_MAX_CPU_LORAS": str(s.max_cpu_loras),
        "OPTION_MAX_LORA_RANK": str(base.max_lora_rank),
        "OPTION_VRAM_HEADROOM": str(s.vram_headroom),
        "OPTION_MAX_BATCH_SIZE": str(s.max_batch_size),
        "OPTION_DTYPE": "auto",
        "OPTION_WORK_DIR": str(state_dir / "runtime-work"),
        "BASE_MODEL_ID": base.model_id,
        "BASE_REVISION": base.revision,
        # The local base's tokenizer hash is known (the builder wrote it), so the start-up
        # check that guards Qwen3-4B on SageMaker runs here too.
        "BASE_TOKENIZER_SHA256": base.tokenizer_sha256 or manifest["tokenizer_sha256"],
    }


def router_environment(dep: Deployment) -> dict[str, str]:
    """The router's limits, as infra/router.py puts them in the function's environment."""
    r = dep.env.router
    return {
        "MAX_NEW_TOKENS_CAP": str(r.max_new_tokens_cap),
        "MAX_STOP_SEQUENCES": str(r.max_stop_sequences),
        "MAX_BODY_BYTES": str(r.max_body_bytes),
        "CACHE_TTL_HOURS": str(dep.env.cache.ttl_hours),
        "INVOKE_DEADLINE_S": str(r.invoke_deadline_s),
    }


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
    running = bool(procs) and all(_alive(p["pid"]) for p in procs.values())
    if (
        running
        and old.get("fingerprint") == fingerprint
        and all(_healthy(p["health"]) for p in procs.values())
    ):
        opts.log(f"[3/4] services: reusing the running platform (runtime pid "
                 f"{procs['runtime']['pid']}; the base is not restarted)")  # fmt: skip
        return old
    if procs:
        opts.log("[3/4] services: configuration changed; restarting")
        stop(state_dir, log=lambda m: opts.log(f"      {m}"))
    else:
        opts.log("[3/4] services: starting")

    routing = write_routing_table(dep, state_dir)
    py = sys.executable
    base_env = {**os.environ, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1"}  # fmt: skip
    runtime_url = opts.url(opts.runtime_port)
    endpoint_url = opts.url(opts.endpoint_port)
    gateway_url = opts.url(opts.gateway_port)
    specs = [
        ("runtime", [py, "-m", "runtime", "serve", "--model-dir", str(base_dir), "--host",
                     opts.host, "--port", str(opts.runtime_port)],
         {**base_env, **fingerprint["runtime_env"]}, f"{runtime_url}/ping"),
        ("endpoint", [py, "-m", "local", "endpoint", "--host", opts.host, "--port",
                      str(opts.endpoint_port), "--runtime-url", runtime_url,
                      "--endpoint-name", dep.endpoint_name,
                      "--base-component", dep.base_component_name,
                      "--work-dir", str(state_dir / "components")],
         base_env, f"{endpoint_url}/ping"),
        ("gateway", [py, "-m", "local", "gateway", "--host", opts.host, "--port",
                     str(opts.gateway_port), "--endpoint-url", endpoint_url,
                     "--runtime-url", runtime_url, "--routing-table", str(routing),
                     "--catalog", str(opts.catalog), "--region", dep.env.region,
                     *(["--redis-url", opts.redis_url] if opts.redis_url else [])],
         {**base_env, **fingerprint["router_env"]}, f"{gateway_url}/health"),
    ]  # fmt: skip
    state: dict[str, Any] = {"fingerprint": fingerprint, "processes": {}}
    for name, cmd, env, health in specs:
        proc = _spawn(name, cmd, env, state_dir)
        state["processes"][name] = {"pid": proc.pid, "health": health, "cmd": cmd}
        _write_state(state_dir, state)
        _wait(health, proc, name, state_dir / "logs" / f"{name}.log")
        opts.log(f"      {name:<8} pid {proc.pid:<7} {health.rsplit('/', 1)[0]}")
    return state


def stop(state_dir: Path, log=print, timeout_s: float = 10.0) -> int:
    """Stop every process ``up`` started; the number stopped."""
    state = read_state(state_dir)
    procs = state.get("processes", {})
    stopped = 0
    for name, p in reversed(list(procs.items())):
        pid = p["pid"]
        if not _alive(pid):
            continue
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            continue
        deadline = time.monotonic() + timeout_s
        while _alive(pid) and time.monotonic() < deadline:
            _reap(pid)
            time.sleep(0.1)
        if _alive(pid):
            os.killpg(pid, signal.SIGKILL)
        _reap(pid)
        stopped += 1
        log(f"stopped {name} (pid {pid})")
    (state_dir / "state.json").unlink(missing_ok=True)
    return stopped


def _reap(pid: int) -> None:
    """Collect a child that exited, so it does not linger as a zombie that looks alive."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


# -- catalog -> components -------------------------------------------------------------------


def write_routing_table(dep: Deployment, state_dir: Path) -> Path:
    """The table the router ships with (``Deployment.routing_table()``), for the gateway."""
    path = state_dir / "routing_table.json"
    path.write_text(json.dumps(dep.routing_table(), indent=1, sort_keys=True) + "\n")
    return path


def declare_components(dep: Deployment, artifacts: dict[str, Path], opts: Options,
                       endpoint_url: str, gateway_url: str) -> list[dict[str, Any]]:  # fmt: skip
    """Tell the endpoint which adapter components exist and point the router at the table."""
    write_routing_table(dep, opts.state_dir)
    wanted = [{"component": a.component_name, "artifact": str(artifacts[a.name])}
              for a in dep.adapters]  # fmt: skip
    resp = httpx.put(f"{endpoint_url}/_local/components", json={"adapters": wanted},
                     timeout=300.0)  # fmt: skip
    resp.raise_for_status()
    actions = resp.json()["actions"]
    by_component = {a.component_name: a.name for a in dep.adapters}
    changed = [by_component.get(x["component"], x["component"]) for x in actions
               if x["action"] in ("created", "updated", "deleted")]  # fmt: skip
    httpx.post(f"{gateway_url}/_local/reload", json={"flush": changed},
               timeout=30.0).raise_for_status()  # fmt: skip
    return actions


# -- the tour --------------------------------------------------------------------------------


def _shorten(text: str | None, width: int = 60) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= width else text[: width - 1] + "…"


def tour(dep: Deployment, gateway_url: str, log=print, max_new_tokens: int = 48) -> list[dict]:
    """One request per adapter through the gateway, then one repeat to show a cache hit."""
    from config import TASK_PROFILES
    from training import datasets

    rows = []
    with httpx.Client(base_url=gateway_url, timeout=120.0) as client:
        for a in dep.adapters:
            task = a.entry.task
            sample = datasets.load(a.entry.dataset or task, a.entry.dataset_seed).held_out[0].raw
            body = request_body(TASK_PROFILES[task].instruction, sample, max_new_tokens)
            t0 = time.perf_counter()
            resp = client.post(f"/v1/adapters/{a.name}/generate", json=body)
            ms = (time.perf_counter() - t0) * 1000
            answer = resp.json()
            rows.append({"adapter": a.name, "status": resp.status_code, "ms": ms,
                         "cache": answer.get("cache", "-"), "input": sample,
                         "output": answer.get("output", answer.get("error"))})  # fmt: skip
        if dep.adapters:
            first = dep.adapters[0]
            sample = rows[0]["input"]
            body = request_body(TASK_PROFILES[first.entry.task].instruction, sample,
                                max_new_tokens)  # fmt: skip
            t0 = time.perf_counter()
            resp = client.post(f"/v1/adapters/{first.name}/generate", json=body)
            answer = resp.json()
            rows.append({"adapter": f"{first.name} (again)", "status": resp.status_code,
                         "ms": (time.perf_counter() - t0) * 1000,
                         "cache": answer.get("cache", "-"), "input": sample,
                         "output": answer.get("output", answer.get("error"))})  # fmt: skip
    width = max(len(r["adapter"]) for r in rows) if rows else 10
    log(f"  {'adapter':<{width}}  status  latency   cache   input -> output")
    for r in rows:
        log(f"  {r['adapter']:<{width}}  {r['status']:<6}  {r['ms']:>6.0f} ms {r['cache']:<7} "
            f"{_shorten(r['input'], 34)!r} -> {_shorten(r['output'])!r}")  # fmt: skip
    return rows


def request_body(instruction: str, text: str, max_new_tokens: int) -> dict[str, Any]:
    """A deterministic request in the shape adapters are trained on (task instruction first)."""
    return {
        "messages": [{"role": "system", "content": instruction}, {"role": "user", "content": text}],
        "parameters": {"max_new_tokens": max_new_tokens, "do_sample": False},
    }


# -- up --------------------------------------------------------------------------------------


def up(opts: Options) -> dict[str, Any]:
    log = opts.log
    t0 = time.perf_counter()
    dep = load_deployment(opts.env, opts.catalog, opts.environments_dir)
    log(f"lora-fleet local platform: environment {dep.env.name!r}, {len(dep.adapters)} adapters, "
        f"catalog {opts.catalog}")  # fmt: skip
    base_dir, artifacts = build_artifacts(dep, opts)
    state = start_services(dep, base_dir, opts)
    endpoint_url, gateway_url = opts.url(opts.endpoint_port), opts.url(opts.gateway_port)
    actions = declare_components(dep, artifacts, opts, endpoint_url, gateway_url)
    counts: dict[str, int] = {}
    for x in actions:
        counts[x["action"]] = counts.get(x["action"], 0) + 1
    log("[4/4] adapter components on " + dep.endpoint_name + ": "
        + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())))  # fmt: skip
    for x in actions:
        if x["action"] in ("failed", "registration-failed"):
            log(f"      ! {x['component']}: {x.get('detail')}")
    cache = httpx.get(f"{gateway_url}/local/status", timeout=10.0).json().get("cache")
    log("")
    log(f"  playground        {gateway_url}/")
    log(f"  router (gateway)  {gateway_url}/v1/adapters/NAME/generate")
    log(f"  SageMaker runtime {endpoint_url}/endpoints/{dep.endpoint_name}/invocations")
    log(f"  model server      {opts.url(opts.runtime_port)}  (/adapters, /metrics, /trace)")
    log(f"  response cache    {cache}")
    log(f"  logs              {opts.state_dir / 'logs'}   stop with: make down")
    rows = []
    if opts.tour:
        log("")
        log("tour: one request per adapter through the router (deterministic, so cacheable)")
        rows = tour(dep, gateway_url, log=log)
    log(f"\nready in {time.perf_counter() - t0:.0f} s")
    return {"state": state, "actions": actions, "tour": rows, "cache": cache}
