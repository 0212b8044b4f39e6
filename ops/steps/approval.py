"""The ``approval`` step: every version the release deploys (stable and canary) approved in the
Model Registry for the archive the catalog pins; approving is a person's or a named check's
(``training.approve``), so the release stops here until it is done."""

from __future__ import annotations

from ops.steps.base import Release, ReleaseError
from training.registry import approval_problems

NAME = "approval"
SUMMARY = "every version to deploy approved in the Model Registry (training.approve)"


def missing(r: Release) -> list[str]:
    return approval_problems(r.sm, r.dep, r.env)


def run(r: Release) -> None:
    """Approval is a person's or a named check's (``training.approve``): the release stops
    here until every version it would deploy is approved."""
    raise ReleaseError(
        "the Model Registry has not approved every version this release "
        "deploys: " + "; ".join(missing(r))
    )
