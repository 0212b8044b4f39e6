"""The ``deploy`` step: every other stack (serving, adapters, router, observability), once what
they reference is in place."""

from __future__ import annotations

from ops.steps.base import Release

NAME = "deploy"
SUMMARY = "deploy every other stack"


def missing(r: Release) -> list[str]:
    return r._stacks_missing(sorted(r.templates))


def run(r: Release) -> None:
    r._before_registry_deploy()
    r._cdk_deploy(["--all"])
