"""``python -m local up | down | status`` (and the ``endpoint`` / ``gateway`` servers and the
``trainer`` it starts)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from config import CATALOG_PATH, ENVIRONMENTS_DIR, CatalogError


def _platform_args(p: argparse.ArgumentParser) -> None:
    from local.options import ROOT

    p.add_argument(
        "--env", default=None, help="environment file (default: local; local-quick with --quick)"
    )
    p.add_argument("--catalog", type=Path, default=CATALOG_PATH)
    p.add_argument("--environments-dir", type=Path, default=ENVIRONMENTS_DIR)
    p.add_argument(
        "--state-dir",
        type=Path,
        default=ROOT / ".local",
        help="pids, logs, routing table, extracted components",
    )
    p.add_argument(
        "--artifacts",
        type=Path,
        default=ROOT / ".artifacts",
        help="the built base and the trained adapter archives (cached)",
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m local", description=__doc__)
    sub = ap.add_subparsers(dest="command", required=True)

    up = sub.add_parser(
        "up", help="build, start everything, train what is missing in the background, tour"
    )
    _platform_args(up)
    _ports(up)
    up.add_argument(
        "--redis-url",
        default="redis://127.0.0.1:6379/0",
        help="used when it answers PING; otherwise an in-process cache",
    )
    _training_args(up)
    up.add_argument("--no-tour", action="store_true")
    up.add_argument(
        "--wait", action="store_true", help="wait for the background training before the tour"
    )
    up.add_argument(
        "--quick",
        action="store_true",
        help="the small Qwen3 base made here (environment local-quick): up in minutes; "
        "its adapters are served although they cannot pass the gate",
    )

    tr = sub.add_parser("trainer", help="(started by up) train adapters in the background")
    _platform_args(tr)
    _ports(tr)
    _training_args(tr)
    tr.add_argument("adapters", nargs="+")

    down = sub.add_parser("down", help="stop what `up` started")
    _platform_args(down)
    status = sub.add_parser("status", help="the running processes")
    _platform_args(status)
    use = sub.add_parser("usage", help="requests, tokens, cache hits, latency per tenant/adapter")
    _platform_args(use)
    use.add_argument("--csv", type=Path, default=None, help="also write the rows as CSV")

    ep = sub.add_parser("endpoint", help="(started by up) the local SageMaker endpoint")
    ep.add_argument("--host", default="127.0.0.1")
    ep.add_argument("--port", type=int, required=True)
    ep.add_argument("--runtime-url", required=True)
    ep.add_argument("--endpoint-name", required=True)
    ep.add_argument("--base-component", required=True)
    ep.add_argument("--work-dir", type=Path, required=True)

    gw = sub.add_parser("gateway", help="(started by up) the local API gateway and playground")
    gw.add_argument("--host", default="127.0.0.1")
    gw.add_argument("--port", type=int, required=True)
    gw.add_argument("--endpoint-url", required=True)
    gw.add_argument("--runtime-url", required=True)
    gw.add_argument("--routing-table", type=Path, required=True)
    gw.add_argument("--catalog", type=Path, default=None)
    gw.add_argument("--region", default="us-east-1")
    gw.add_argument("--redis-url", default=None)
    gw.add_argument("--tenant", default="demo")
    gw.add_argument(
        "--router-environments",
        type=int,
        default=1,
        help="the router's execution environments: buffered requests served at once (Redis)",
    )
    gw.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help="where the background trainer writes its progress",
    )

    args = ap.parse_args(argv)
    if args.command in ("endpoint", "gateway"):
        return _serve(args)
    if getattr(args, "env", None) is None:
        args.env = "local-quick" if getattr(args, "quick", False) else "local"

    from local import components, platform, processes
    from local.options import Options, PlatformError

    if args.command == "down":
        n = processes.stop(args.state_dir)
        print(f"stopped {n} processes" if n else "nothing was running")
        return 0
    if args.command == "status":
        return _status(args.state_dir)
    if args.command == "usage":
        from local.usage import show

        return show(args.state_dir, args.csv)
    opts = Options(
        env=args.env,
        catalog=args.catalog.resolve(),
        environments_dir=args.environments_dir.resolve(),
        state_dir=args.state_dir.resolve(),
        artifacts=args.artifacts.resolve(),
        gateway_port=args.gateway_port,
        endpoint_port=args.endpoint_port,
        runtime_port=args.runtime_port,
        redis_url=getattr(args, "redis_url", None) or None,
        max_steps=args.max_steps,
        tour=not getattr(args, "no_tour", True),
        wait=getattr(args, "wait", False),
        serve_unpublishable=args.serve_unpublishable or getattr(args, "quick", False),
    )
    if args.command == "trainer":
        from local import trainer

        return 1 if trainer.run(opts, args.adapters, lambda: components.declare_ready(opts)) else 0
    try:
        result = platform.up(opts)
    except CatalogError as exc:
        print(f"catalog error:\n{exc}", file=sys.stderr)
        return 1
    except PlatformError as exc:
        print(f"local platform: {exc}", file=sys.stderr)
        return 1
    (opts.state_dir / "last_up.json").write_text(json.dumps(result, indent=1, default=str))
    failed = [r for r in result["tour"] if r["status"] != 200]
    return 1 if failed else 0


def _ports(p: argparse.ArgumentParser) -> None:
    p.add_argument("--gateway-port", type=int, default=8000)
    p.add_argument("--endpoint-port", type=int, default=8081)
    p.add_argument("--runtime-port", type=int, default=8080)


def _training_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--max-steps",
        type=int,
        default=None,
        help="cap each adapter's training steps (quicker, worse)",
    )
    p.add_argument(
        "--serve-unpublishable",
        action="store_true",
        help="serve adapters that did not pass their gate (marked as such)",
    )


def _status(state_dir: Path) -> int:
    from local import processes
    from local.trainer import priority, read_status

    state = processes.read_state(state_dir)
    procs = state.get("processes", {})
    if not procs:
        print("not running (start with: make up)")
        return 1
    for name, p in procs.items():
        alive = processes.alive(p["pid"]) and processes.healthy(p["health"])
        print(f"{name:<9} pid {p['pid']:<7} {'up' if alive else 'DOWN'}  {p['health']}")
    training = read_status(state_dir)
    if training:
        running = processes.alive(training["pid"]) and training.get("finished") is None
        how = ""
        if running and (prio := priority(training["pid"])) is not None:
            nice, paused = prio
            how = f" at low priority (nice {nice})" + (
                ", paused while a foreground job runs" if paused else ""
            )
        print(
            f"trainer   pid {training['pid']:<7} "
            + (
                "training" + how
                if running
                else "finished"
                if training.get("finished")
                else "stopped before finishing"
            )
        )
        for name, st in training.get("adapters", {}).items():
            detail = st.get("state", "?")
            if detail == "online" and st.get("publishable") is False:
                detail += ", NOT publishable (served: --serve-unpublishable)"
            if detail == "training" and st.get("steps"):
                detail += f" step {st.get('step', 0)}/{st['steps']}"
            if st.get("online_at"):
                took = st["online_at"] - training["started"]
                detail += f" ({took:.0f} s after training began)"
            if st.get("detail"):
                detail += f": {st['detail']}"
            if not running and st.get("state") in ("queued", "training", "evaluating"):
                detail += " (interrupted; `make up` resumes)"
            print(f"  {name:<24} {detail}")
    return 0


def _serve(args: argparse.Namespace) -> int:
    import logging

    import uvicorn

    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
    if args.command == "endpoint":
        from local.endpoint import LocalEndpoint, create_app

        args.work_dir.mkdir(parents=True, exist_ok=True)
        app = create_app(
            LocalEndpoint(
                name=args.endpoint_name,
                base_component=args.base_component,
                runtime_url=args.runtime_url,
                work_dir=args.work_dir,
            )
        )
    else:
        from local.gateway import LocalGateway, create_app

        app = create_app(
            LocalGateway(
                routing_table=args.routing_table,
                endpoint_url=args.endpoint_url,
                runtime_url=args.runtime_url,
                redis_url=args.redis_url,
                catalog_file=args.catalog,
                tenant=args.tenant,
                region=args.region,
                state_dir=args.state_dir,
                environments=args.router_environments,
            )
        )
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0


if __name__ == "__main__":
    sys.exit(main())
