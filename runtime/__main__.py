"""``python -m runtime serve [--model-dir DIR] [--port 8080]`` (SageMaker runs ``serve``)."""

from __future__ import annotations

import argparse
import logging
import os
import sys


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m runtime")
    sub = ap.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="serve the SageMaker container contract")
    serve.add_argument("--model-dir", help="default: $SM_MODEL_DIR or /opt/ml/model")
    serve.add_argument("--host", default="0.0.0.0")  # noqa: S104 - the container contract
    serve.add_argument("--port", type=int, default=8080)
    args = ap.parse_args(argv)

    from runtime.hardware import iomp_preload

    # On a CPU, vLLM's docs ask for Intel OpenMP preloaded; that takes a new process image.
    env = iomp_preload(dict(os.environ))
    if env is not None:
        os.execve(sys.executable, [sys.executable, "-m", "runtime", *sys.argv[1:]], env)  # noqa: S606

    import uvicorn

    from runtime.engine import Engine
    from runtime.server import create_app
    from runtime.settings import Settings

    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
    engine = Engine(Settings.from_env(args.model_dir))
    uvicorn.run(create_app(engine), host=args.host, port=args.port, log_level="warning")
    return 0


if __name__ == "__main__":
    sys.exit(main())
