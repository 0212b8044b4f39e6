"""What every release step shares: its error, and whether it runs in CI.

A step is a module of this package with ``NAME``, ``SUMMARY``, ``missing(release)`` (what is
not done yet; empty when it is) and ``run(release)`` (do it); ``ops.steps.STEPS`` lists them in
the only order that works, and ``ops.release.Release.run`` skips each one that is done.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
#: The release a step runs in (``ops.release.Release``): a step reads the environment and its
#: clients from it and calls its probes. Named, not imported: ``ops.release`` runs the steps,
#: and a step importing it back would be an import circle.
Release = Any


class ReleaseError(RuntimeError):
    pass


def running_in_ci() -> bool:
    """GitHub Actions and most CI systems set ``CI=true``; CodeBuild (the CDK pipeline) sets
    ``CODEBUILD_BUILD_ID``."""
    return os.environ.get("CI", "").lower() in ("true", "1") or "CODEBUILD_BUILD_ID" in os.environ
