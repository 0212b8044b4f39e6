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

import time
from typing import Any

import httpx

from config import load_deployment
from local.artifacts import base_dir, build_base, plan_adapters, quiet_libraries
from local.components import declare_components
from local.options import Options
from local.processes import start_services
from local.tour import tour
from local.trainer import start_trainer, wait_for_trainer


def up(opts: Options) -> dict[str, Any]:
    log = opts.log
    t0 = time.perf_counter()
    dep = load_deployment(opts.env, opts.catalog, opts.environments_dir)
    log(
        f"lora-fleet local platform: environment {dep.env.name!r}, {len(dep.adapters)} adapters, "
        f"catalog {opts.catalog}"
    )
    quiet_libraries()
    base_manifest = build_base(dep, opts)
    plan = plan_adapters(dep, opts, base_manifest)
    log(
        f"[2/4] adapters: {len(plan.ready)} ready, {len(plan.todo)} to train"
        + (f", {len(plan.held)} not publishable (not served)" if plan.held else "")
        + (
            f", {len(plan.unpublishable)} of the ready NOT publishable (served: "
            "--serve-unpublishable)"
            if plan.unpublishable
            else ""
        )
    )
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
    log(
        "[4/4] adapter components on "
        + dep.endpoint_name
        + ": "
        + (", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "none yet")
    )
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
    log(f"  docs              {gateway_url}/docs/  (built on the first visit)")
    log(f"  logs              {opts.state_dir / 'logs'}   stop with: make down")
    log(f"\nplatform ready in {ready_s:.0f} s")
    trainer = None
    if plan.todo:
        names = [n for n, _ in plan.todo]
        trainer = start_trainer(opts, names)
        log(
            f"training in the background (pid {trainer}): {', '.join(names)}; each comes "
            "online when it passes its gate. Progress: `python -m local status`, the playground, "
            f"{opts.state_dir / 'logs' / 'trainer.log'}"
        )
        if opts.wait:
            wait_for_trainer(opts, trainer)
            plan = plan_adapters(dep, opts, base_manifest)
    rows = []
    if opts.tour and plan.ready:
        log("")
        log("tour: one request per serving adapter through the router (deterministic, cacheable)")
        rows = tour(dep, gateway_url, log=log, only=set(plan.ready))
    log(f"\nready in {time.perf_counter() - t0:.0f} s")
    return {
        "state": state,
        "actions": actions,
        "tour": rows,
        "cache": cache,
        "ready_seconds": round(ready_s, 1),
        "training": [n for n, _ in plan.todo],
        "held": plan.held,
    }
