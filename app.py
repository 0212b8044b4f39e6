#!/usr/bin/env python3
"""CDK entry point: ``npx cdk synth -c env=dev`` (local, dev, staging, prod)."""

from __future__ import annotations

import sys
from pathlib import Path

from aws_cdk import App, Environment

from config import (
    CATALOG_PATH,
    ENVIRONMENTS_DIR,
    PIPELINE_PATH,
    CatalogError,
    load_deployment,
    load_pipeline,
)
from config.plan import CapacityError
from infra.nag import add_nag_packs
from infra.stacks import build


def pipeline(app: App) -> None:
    """``-c pipeline=true``: only the CDK Pipelines stack (config/pipeline.yaml)."""
    from infra.pipeline import PipelineStack

    cfg = load_pipeline(app.node.try_get_context("pipeline_file") or PIPELINE_PATH)
    if not cfg.enabled:
        print("the pipeline is off: set enabled: true in config/pipeline.yaml", file=sys.stderr)
        sys.exit(1)
    deployments = {name: load_deployment(name) for name in cfg.stages}
    PipelineStack(
        app,
        "lora-fleet-pipeline",
        config=cfg,
        deployments=deployments,
        env=Environment(account=cfg.account, region=cfg.region),
    )


def main() -> None:
    app = App()
    if str(app.node.try_get_context("pipeline") or "").lower() in ("1", "true", "yes"):
        try:
            pipeline(app)
        except (CatalogError, CapacityError) as exc:
            print(f"catalog error in the pipeline's environments:\n{exc}", file=sys.stderr)
            sys.exit(1)
        add_nag_packs(app)
        app.synth()
        return
    env_name = app.node.try_get_context("env") or "dev"
    catalog = app.node.try_get_context("catalog") or CATALOG_PATH
    environments = Path(app.node.try_get_context("environments_dir") or ENVIRONMENTS_DIR)
    try:
        dep = load_deployment(env_name, catalog, environments)
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
