"""``python -m local up | down | status`` (and the ``endpoint`` / ``gateway`` servers it starts)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from config import CATALOG_PATH, ENVIRONMENTS_DIR, CatalogError


def _platform_args(p: argparse.ArgumentParser) -> None:
    from local.platform import ROOT

    p.add_argument("--env", default="local", help="environment file (default: local)")
    p.add_argument("--catalog", type=Path, default=CATALOG_PATH)
    p.add_argument("--environments-dir", type=Path, default=ENVIRONMENTS_DIR)
    p.add_argument("--state-dir", type=Path, default=ROOT / ".local",
                   help="pids, logs, routing table, extracted components")  # fmt: skip
    p.add_argument("--artifacts", type=Path, default=ROOT / ".artifacts",
                   help="the built base and the trained adapter archives (cached)")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m local", description=__doc__)
    sub = ap.add_subparsers(dest="command", required=True)

    up = sub.add_parser("up", help="build, train what is missing, start everything, tour")
    _platform_args(up)
    up.add_argument("--gateway-port", type=int, default=8000)
    up.add_argument("--endpoint-port", type=int, default=8081)
    up.add_argument("--runtime-port", type=int, default=8080)
    up.add_argument(
        "--redis-url",
        default="redis://127.0.0.1:6379/0",
        help="used when it answers PING; otherwise an in-process cache",
    )
    up.add_argument(
        "--max-steps", type=int, default=None, help="cap each adapter's training steps (quicker)"
    )
    up.add_argument("--no-tour", action="store_true")

    down = sub.add_parser("down", help="stop what `up` started")
    _platform_args(down)
    status = sub.add_parser("status", help="the running processes")
    _platform_args(status)

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

    args = ap.parse_args(argv)
    if args.command in ("endpoint", "gateway"):
        return _serve(args)

    from local import platform

    if args.command == "down":
        n = platform.stop(args.state_dir)
        print(f"stopped {n} processes" if n else "nothing was running")
        return 0
    if args.command == "status":
        state = platform.read_state(args.state_dir)
        procs = state.get("processes", {})
        if not procs:
            print("not running (start with: make up)")
            return 1
        for name, p in procs.items():
            alive = platform._alive(p["pid"]) and platform._healthy(p["health"])
            print(f"{name:<9} pid {p['pid']:<7} {'up' if alive else 'DOWN'}  {p['health']}")
        return 0
    opts = platform.Options(
        env=args.env, catalog=args.catalog.resolve(), environments_dir=args.environments_dir,
        state_dir=args.state_dir.resolve(), artifacts=args.artifacts.resolve(),
        gateway_port=args.gateway_port, endpoint_port=args.endpoint_port,
        runtime_port=args.runtime_port, redis_url=args.redis_url or None,
        max_steps=args.max_steps, tour=not args.no_tour,
    )  # fmt: skip
    try:
        result = platform.up(opts)
    except CatalogError as exc:
        print(f"catalog error:\n{exc}", file=sys.stderr)
        return 1
    except platform.PlatformError as exc:
        print(f"local platform: {exc}", file=sys.stderr)
        return 1
    (opts.state_dir / "last_up.json").write_text(json.dumps(result, indent=1, default=str))
    failed = [r for r in result["tour"] if r["status"] != 200]
    return 1 if failed else 0


def _serve(args: argparse.Namespace) -> int:
    import logging

    import uvicorn

    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
    if args.command == "endpoint":
        from local.endpoint import LocalEndpoint, create_app

        args.work_dir.mkdir(parents=True, exist_ok=True)
        app = create_app(
            LocalEndpoint(name=args.endpoint_name, base_component=args.base_component,
                          runtime_url=args.runtime_url, work_dir=args.work_dir)
        )  # fmt: skip
    else:
        from local.gateway import LocalGateway, create_app

        app = create_app(
            LocalGateway(routing_table=args.routing_table, endpoint_url=args.endpoint_url,
                         runtime_url=args.runtime_url, redis_url=args.redis_url,
                         catalog_file=args.catalog, tenant=args.tenant, region=args.region)
        )  # fmt: skip
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0


if __name__ == "__main__":
    sys.exit(main())
