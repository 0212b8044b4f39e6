"""``python -m local up`` / ``down``: the whole system on one machine.

``up`` is idempotent and incremental: the base is built once (cached by its recipe), running
processes are reused when they serve the same base, adapters whose archive is cached and passed
its gate are declared to the local endpoint at once, and the others train in the background
(``local.trainer``), one after another, each coming online as it passes its gate. So the
platform (base, router, playground) answers within minutes of a first ``up``, and adding a
catalog entry and running ``up`` again trains and registers just that adapter; the base keeps
running.

Processes (each its own session, logs under ``STATE/logs``): the runtime server (the
container's model server), the local SageMaker endpoint, the local API gateway with the router
and the playground, and the trainer while it has work. Their pids and ports are in
``STATE/state.json``; ``down`` stops them.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from config import CATALOG_PATH, ENVIRONMENTS_DIR, Deployment, load_deployment
from config.processes import merged_runtime_settings, router_settings, runtime_settings
from contracts.manifests import AdapterManifest, BaseManifest, ManifestError
from contracts.settings import RuntimeSettings

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
    #: Wait for the background trainer before the tour (tests; a user's ``up`` returns).
    wait: bool = False
    #: Serve adapters that did not pass their gate (the quick platform's small base cannot).
    serve_unpublishable: bool = False
    log: Any = field(default=print)

    def url(self, port: int) -> str:
        return f"http://{self.host}:{port}"


class PlatformError(RuntimeError):
    pass


# -- artifacts -------------------------------------------------------------------------------


def base_dir(dep: Deployment, opts: Options) -> Path:
    return opts.artifacts / "base" / dep.base_key


def build_base(dep: Deployment, opts: Options) -> BaseManifest:
    """Build or reuse the environment's local base; its ``base_manifest.json``."""
    from training.base import build_local

    if dep.base.source != "local":
        raise PlatformError(
            f"environment {dep.env.name!r} serves {dep.base.model_id} from the hub; the local "
            "platform runs only local bases (nothing can be downloaded from a hub here)"
        )
    directory = base_dir(dep, opts)
    opts.log(f"[1/4] base model {dep.base.model_id}@{dep.base.revision}")
    t0 = time.perf_counter()
    try:
        build_local(dep.base.model_id, directory, log=lambda m: opts.log(f"      {m}"))
    except KeyError as exc:
        raise PlatformError(str(exc.args[0])) from None
    manifest = BaseManifest.read(directory)
    if (manifest.model_id, manifest.revision) != (dep.base.model_id, dep.base.revision):
        raise PlatformError(
            f"{directory} holds {manifest.model_id}@{manifest.revision}, but the "
            f"catalog's {dep.base_key} is {dep.base.model_id}@{dep.base.revision}"
        )
    opts.log(f"      ready in {time.perf_counter() - t0:.1f} s")
    return manifest


def cached_adapter(
    dep: Deployment, name: str, out: Path, base_manifest: BaseManifest, max_steps: int | None
) -> str | None:
    """Why the archive in ``out`` cannot be reused, or None when it can."""
    archive = out / f"{name}.tar.gz"
    try:
        m = AdapterManifest.load(out / name)
    except ManifestError as exc:
        return f"its manifest is unreadable ({exc})"
    if not archive.is_file() or m is None:
        return "no artifact yet"
    entry = dep.adapter(name).entry
    if m.version != entry.version:
        return f"version {m.version} -> {entry.version}"
    trained_on = (m.base.model_id, m.base.revision, m.base.tokenizer_sha256)
    if trained_on != (
        base_manifest.model_id,
        base_manifest.revision,
        base_manifest.tokenizer_sha256,
    ):
        return "trained on another base"
    from training.train import recorded_hyperparameters

    if m.hyperparameters != recorded_hyperparameters(dep.adapter(name).profile, max_steps):
        return "hyperparameters changed"
    from training.metrics import SCORER_VERSION

    if (m.eval or {}).get("scorer") != SCORER_VERSION:
        return "evaluated by an older gate"
    from config import CATALOG_PATH
    from training import datasets

    split, _ = datasets.for_entry(entry, CATALOG_PATH.parent)
    if m.dataset.get("sha256") != split.sha256():
        return "its dataset changed"
    return None


@dataclass
class AdapterPlan:
    """Which adapters serve now, which train, and which stay off (their gate failed)."""

    ready: dict[str, Path] = field(default_factory=dict)
    todo: list[tuple[str, str]] = field(default_factory=list)
    held: dict[str, str] = field(default_factory=dict)
    #: Ready adapters that did not pass their gate, served only with ``serve_unpublishable``.
    unpublishable: list[str] = field(default_factory=list)


def plan_adapters(dep: Deployment, opts: Options, base_manifest: BaseManifest) -> AdapterPlan:
    out = opts.artifacts / "adapters"
    plan = AdapterPlan()
    for a in dep.adapters:
        why = cached_adapter(dep, a.name, out, base_manifest, opts.max_steps)
        if why is not None:
            plan.todo.append((a.name, why))
            continue
        ev = AdapterManifest.read(out / a.name).eval or {}
        if ev.get("publishable") or opts.serve_unpublishable:
            plan.ready[a.name] = out / f"{a.name}.tar.gz"
            if not ev.get("publishable"):
                plan.unpublishable.append(a.name)
        else:
            plan.held[a.name] = "not publishable: " + "; ".join(ev.get("failures") or [])
    return plan


def quiet_libraries() -> None:
    """Progress here is one line per step of the platform; the libraries' bars and deprecation
    notices (about arguments TRL passes, not ours) would bury it."""
    import datasets as hf_datasets
    import transformers

    warnings.filterwarnings("ignore", category=FutureWarning, module=r"transformers\.")
    hf_datasets.disable_progress_bars()
    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()


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
                     "--state-dir", str(state_dir),
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
    procs = dict(state.get("processes", {}))
    if state.get("trainer"):  # stopped first: it declares adapters to the endpoint
        procs = {**procs, "trainer": state["trainer"]}
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
    table = dep.routing_table()
    for route in table["adapters"].values():
        # A canary's own component is SageMaker's; the local endpoint serves each entry's
        # stable version, so no share of requests may be sent to a component it lacks.
        route.pop("canary", None)
    path.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
    return path


def declare_components(dep: Deployment, plan: AdapterPlan, opts: Options,
                       flush: list[str] | None = None) -> list[dict[str, Any]]:  # fmt: skip
    """Tell the endpoint which adapter components serve (the ready ones) and which are still
    being made (the ones training: SageMaker's "Creating", answered as not ready yet), then
    point the router at the table and drop cached answers of adapters that changed."""
    write_routing_table(dep, opts.state_dir)
    components = {a.name: a.serving_component for a in dep.adapters}
    merged = {a.name for a in dep.adapters if a.merged}
    wanted = [{"component": components[n], "artifact": str(path)}
              for n, path in plan.ready.items() if n not in merged]  # fmt: skip
    models, restarted = [], []
    for n, path in plan.ready.items():
        if n in merged:
            url, started = merged_server(dep, n, path, opts)
            models.append({"component": components[n], "url": url})
            if started:  # new merged weights: answers cached from the old ones must go
                restarted.append(n)
    pending = [components[n] for n, _ in plan.todo]
    resp = httpx.put(f"{opts.url(opts.endpoint_port)}/_local/components",
                     json={"adapters": wanted, "pending": pending, "models": models},
                     timeout=300.0)  # fmt: skip
    resp.raise_for_status()
    actions = resp.json()["actions"]
    by_component = {c: n for n, c in components.items()}
    changed = [by_component.get(x["component"], x["component"]) for x in actions
               if x["action"] in ("created", "updated", "deleted")]  # fmt: skip
    flushed = sorted({*changed, *restarted, *(flush or [])})
    httpx.post(f"{opts.url(opts.gateway_port)}/_local/reload", json={"flush": flushed},
               timeout=30.0).raise_for_status()  # fmt: skip
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
        and _alive(running["pid"])
        and (_healthy(running["health"]))
    ):
        return running["health"].rsplit("/", 1)[0], False
    if running and _alive(running["pid"]):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(running["pid"], signal.SIGTERM)
    with socket.socket() as s:
        s.bind((opts.host, 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1",
           **merged_runtime_environment(dep, base_dir(dep, opts), opts.state_dir)}  # fmt: skip
    cmd = [sys.executable, "-m", "runtime", "serve", "--model-dir", str(model_dir),
           "--host", opts.host, "--port", str(port)]  # fmt: skip
    proc = _spawn(key, cmd, env, opts.state_dir)
    health = f"{opts.url(port)}/ping"
    state = read_state(opts.state_dir)
    state.setdefault("processes", {})[key] = {"pid": proc.pid, "health": health, "cmd": cmd,
                                              "model_dir": str(model_dir)}  # fmt: skip
    _write_state(opts.state_dir, state)
    opts.log(f"      {name}: starting its own model process (pid {proc.pid})")
    _wait(health, proc, key, opts.state_dir / "logs" / f"{key}.log", timeout_s=600.0)
    return opts.url(port), True


def declare_ready(opts: Options) -> list[dict[str, Any]]:
    """Declare what is ready now (the trainer calls this after each adapter comes online)."""
    dep = load_deployment(opts.env, opts.catalog, opts.environments_dir)
    manifest = BaseManifest.read(base_dir(dep, opts))
    return declare_components(dep, plan_adapters(dep, opts, manifest), opts)


# -- the background trainer ------------------------------------------------------------------


def trainer_command(opts: Options, todo: list[str]) -> list[str]:
    cmd = [sys.executable, "-m", "local", "trainer", "--env", opts.env,
           "--catalog", str(opts.catalog), "--environments-dir", str(opts.environments_dir),
           "--state-dir", str(opts.state_dir), "--artifacts", str(opts.artifacts),
           "--gateway-port", str(opts.gateway_port), "--endpoint-port", str(opts.endpoint_port),
           "--runtime-port", str(opts.runtime_port)]  # fmt: skip
    if opts.max_steps is not None:
        cmd += ["--max-steps", str(opts.max_steps)]
    if opts.serve_unpublishable:
        cmd.append("--serve-unpublishable")
    return [*cmd, *todo]


def start_trainer(opts: Options, todo: list[str]) -> int | None:
    """Start the background trainer for ``todo`` unless one already runs; its pid."""
    state = read_state(opts.state_dir)
    running = state.get("trainer")
    if running and _alive(running["pid"]):
        queued = running.get("adapters", [])
        later = ", ".join(a for a in todo if a not in queued) or "nothing else"
        opts.log(f"      the trainer (pid {running['pid']}) is already training "
                 f"{', '.join(queued)}; it takes {later} when its queue ends")  # fmt: skip
        return running["pid"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1"}  # fmt: skip
    proc = _spawn("trainer", trainer_command(opts, todo), env, opts.state_dir)
    state["trainer"] = {"pid": proc.pid, "adapters": todo, "health": None}
    _write_state(opts.state_dir, state)
    return proc.pid


def wait_for_trainer(opts: Options, pid: int, poll_s: float = 2.0) -> None:
    """Follow the trainer's progress until it exits (``--wait``)."""
    from local.trainer import read_status

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
        _reap(pid)  # the trainer is this process's child: an exited one lingers until reaped
        if not _alive(pid):
            break
        time.sleep(poll_s)


# -- the tour --------------------------------------------------------------------------------


def _shorten(text: str | None, width: int = 60) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= width else text[: width - 1] + "…"


def tour(dep: Deployment, gateway_url: str, log=print, max_new_tokens: int = 64,
         only: set[str] | None = None) -> list[dict]:  # fmt: skip
    """One request per serving adapter through the gateway, then one repeat to show a cache
    hit. Each sends a test-split input (never seen in training) as plain ``inputs``, the seed
    article's request form (the runtime gives it the chat shape the adapter was trained on),
    and shows whether the output kept the input's facts (and, for PII, leaked nothing)."""
    from config import CATALOG_PATH
    from training import datasets

    adapters = [a for a in dep.adapters if only is None or a.name in only]
    samples = {a.name: datasets.for_entry(a.entry, CATALOG_PATH.parent)[0].test[0]
               for a in adapters}  # fmt: skip
    rows = []
    with httpx.Client(base_url=gateway_url, timeout=120.0) as client:
        for label, a in [(a.name, a) for a in adapters] + (
            [(f"{adapters[0].name} (again)", adapters[0])] if adapters else []
        ):
            rows.append(_tour_row(client, label, a.name, samples[a.name], max_new_tokens))
    width = max(len(r["adapter"]) for r in rows) if rows else 10
    log(f"  {'adapter':<{width}}  status  latency   cache   facts  input -> output")
    for r in rows:
        shown = f"{_shorten(r['input'], 34)!r} -> {_shorten(r['output'])!r}"
        log(f"  {r['adapter']:<{width}}  {r['status']:<6}  {r['ms']:>6.0f} ms {r['cache']:<7} "
            f"{r['facts']:<6} {shown}")  # fmt: skip
    return rows


def _tour_row(client: httpx.Client, label: str, adapter: str, sample: Any,
              max_new_tokens: int) -> dict[str, Any]:  # fmt: skip
    from training.metrics import faithfulness, pii_example

    body = {"inputs": sample.raw,
            "parameters": {"max_new_tokens": max_new_tokens, "do_sample": False}}  # fmt: skip
    t0 = time.perf_counter()
    resp = client.post(f"/v1/adapters/{adapter}/generate", json=body)
    ms = (time.perf_counter() - t0) * 1000
    answer = resp.json()
    output = answer.get("output", answer.get("error")) or ""
    facts = f"{round(faithfulness(output, sample.facts) * len(sample.facts))}/{len(sample.facts)}"
    if not sample.facts:  # a team's own record: does the answer match its label?
        facts = "equal" if output.strip() == sample.label.strip() else "differs"
    if sample.category == "pii_redaction":
        leak, _ = pii_example(output, sample.label, json.loads(sample.note))
        facts = "leak" if leak else "no leak"
    return {"adapter": label, "status": resp.status_code, "ms": ms, "facts": facts,
            "cache": answer.get("cache", "-"), "input": sample.raw, "output": output}  # fmt: skip


# -- up --------------------------------------------------------------------------------------


def up(opts: Options) -> dict[str, Any]:
    log = opts.log
    t0 = time.perf_counter()
    dep = load_deployment(opts.env, opts.catalog, opts.environments_dir)
    log(f"lora-fleet local platform: environment {dep.env.name!r}, {len(dep.adapters)} adapters, "
        f"catalog {opts.catalog}")  # fmt: skip
    quiet_libraries()
    base_manifest = build_base(dep, opts)
    plan = plan_adapters(dep, opts, base_manifest)
    log(f"[2/4] adapters: {len(plan.ready)} ready, {len(plan.todo)} to train"
        + (f", {len(plan.held)} not publishable (not served)" if plan.held else "")
        + (f", {len(plan.unpublishable)} of the ready NOT publishable (served: "
           "--serve-unpublishable)" if plan.unpublishable else ""))  # fmt: skip
    for name, why in plan.todo:
        log(f"      {name}: {why}")
    for name, why in plan.held.items():
        log(f"      ! {name}: {why}")
    for name in plan.unpublishable:
        log(f"      ! {name}: served, but it did not pass its gate")
    state = start_services(dep, base_dir(dep, opts), opts)
    endpoint_url, gateway_url = opts.url(opts.endpoint_port), opts.url(opts.gateway_port)
    actions = declare_components(dep, plan, opts)
    counts: dict[str, int] = {}
    for x in actions:
        counts[x["action"]] = counts.get(x["action"], 0) + 1
    log("[4/4] adapter components on " + dep.endpoint_name + ": "
        + (", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "none yet"))  # fmt: skip
    for x in actions:
        if x["action"] in ("failed", "registration-failed"):
            log(f"      ! {x['component']}: {x.get('detail')}")
    cache = httpx.get(f"{gateway_url}/local/status", timeout=10.0).json().get("cache")
    ready_s = time.perf_counter() - t0
    log("")
    log(f"  playground        {gateway_url}/")
    log(f"  router (gateway)  {gateway_url}/v1/adapters/NAME/generate")
    log(f"  OpenAI API        {gateway_url}/v1/chat/completions  (model = adapter name)")
    log(f"  SageMaker runtime {endpoint_url}/endpoints/{dep.endpoint_name}/invocations")
    log(f"  model server      {opts.url(opts.runtime_port)}  (/adapters, /metrics, /trace)")
    log(f"  response cache    {cache}")
    log(f"  logs              {opts.state_dir / 'logs'}   stop with: make down")
    log(f"\nplatform ready in {ready_s:.0f} s")
    trainer = None
    if plan.todo:
        names = [n for n, _ in plan.todo]
        trainer = start_trainer(opts, names)
        log(f"training in the background (pid {trainer}): {', '.join(names)}; each comes "
            "online when it passes its gate. Progress: `python -m local status`, the playground, "
            f"{opts.state_dir / 'logs' / 'trainer.log'}")  # fmt: skip
        if opts.wait:
            wait_for_trainer(opts, trainer)
            plan = plan_adapters(dep, opts, base_manifest)
    rows = []
    if opts.tour and plan.ready:
        log("")
        log("tour: one request per serving adapter through the router (deterministic, cacheable)")
        rows = tour(dep, gateway_url, log=log, only=set(plan.ready))
    log(f"\nready in {time.perf_counter() - t0:.0f} s")
    return {"state": state, "actions": actions, "tour": rows, "cache": cache,
            "ready_seconds": round(ready_s, 1), "training": [n for n, _ in plan.todo],
            "held": plan.held}  # fmt: skip
