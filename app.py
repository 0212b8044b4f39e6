#!/usr/bin/env python3
"""CDK entry point: ``npx cdk synth -c env=dev`` (local, dev, staging, prod)."""

from __future__ import annotations

import sys

from aws_cdk import App

from config import CATALOG_PATH, CatalogError, load_deployment
from config.plan import CapacityError
from infra.nag import add_nag_packs
from infra.stacks import build


def main() -> None:
    app = App()
    env_name = app.node.try_get_context("env") or "dev"
    catalog = app.node.try_get_context("catalog") or CATALOG_PATH
    try:
        dep = load_deployment(env_name, catalog)
        if not dep.env.deployable:
            print(
                f"environment {env_name!r} runs on one machine only (deployable: false); "
                "synth dev, staging or prod",
                file=sys.stderr,
            )
            sys.exit(1)
        build(app, dep)
    except (CatalogError, CapacityError) as exc:
        # A bad catalog entry fails synth here, naming the entry, not at deploy time.
        print(f"catalog error in environment {env_name!r}:\n{exc}", file=sys.stderr)
        sys.exit(1)
    add_nag_packs(app)
    app.synth()


if __name__ == "__main__":
    main()
