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
    sub.add_parser("doctor", help="check what start-up needs, without serving", add_help=False)
    args, rest = ap.parse_known_args(argv)
    if args.command == "doctor":
        from runtime.doctor import main as doctor

        return doctor(rest)
    if rest:
        ap.error(f"unrecognized arguments: {' '.join(rest)}")

    from runtime.hardware import iomp_preload, prepare_process

    # Before anything imports torch or vLLM: no CUDA check that poisons fork, and spawned
    # engine processes on a GPU (runtime.hardware).
    prepare_process()

    # On a CPU, vLLM's docs ask for Intel OpenMP preloaded; that takes a new process image.
    env = iomp_preload(dict(os.environ))
    if env is not None:
        os.execve(sys.executable, [sys.executable, "-m", "runtime", *sys.argv[1:]], env)  # noqa: S606

    import uvicorn

    from contracts.settings import RuntimeSettings, SettingsError
    from runtime.engine import Engine
    from runtime.server import create_app

    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
    given = {"model_dir": args.model_dir} if args.model_dir else {}
    try:
        settings = RuntimeSettings.from_env(**given)
    except SettingsError as exc:
        raise SystemExit(str(exc)) from None
    engine = Engine(settings)
    uvicorn.run(create_app(engine), host=args.host, port=args.port, log_level="warning")
    return 0


if __name__ == "__main__":
    sys.exit(main())
