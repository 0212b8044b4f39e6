"""A published version's model package in SageMaker Model Registry, found by its version.

``training.publish`` registers each version in its adapter's model package group (named like
the stable component: ``training.registry.group_name``) with the version in its customer
metadata; the release reads the package back to check its approval, and the router records a
shadow canary's decision in it (``lambda_proxy.registry``). One lookup for both, here, since
the router ships with ``contracts`` and never with ``training``. Standard library only: the
SageMaker client is passed in, and its errors are read by their shape (botocore's
``ClientError`` carries ``response``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

APPROVED, PENDING = "Approved", "PendingManualApproval"
#: The lifecycle stage a shadow canary's decision is recorded under (``ModelLifeCycle.Stage``);
#: the router's permission to update a package is conditioned on it (``infra.router``).
SHADOW_STAGE = "shadow-canary"
#: A decision -> its lifecycle status (StageStatus: ``[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}``), the
#: only statuses the router's role may write.
SHADOW_STATUS = {"rollback": "rolled-back", "promote": "promoted", "held": "held"}
#: The status publish gives a shadow canary's package at registration, before any decision:
#: only packages in SHADOW_STAGE may be updated by the router (its policy conditions on the
#: package's current stage), and a stable version never is in it.
SHADOW_PENDING = "judging"
#: The tag publish puts on a shadow canary's package (CreateModelPackage's Tags), which the
#: router's UpdateModelPackage permission requires (``aws:ResourceTag``, a condition key the
#: Service Authorization Reference gives the model-package resource). A stable version never
#: carries it, and the router may not tag.
SHADOW_TAG = "lora-fleet-stage"
#: CustomerMetadataProperties holds at most this many entries (botocore's sagemaker model,
#: shape CustomerMetadataMap).
METADATA_MAX = 50


@dataclass(frozen=True)
class Package:
    arn: str
    status: str
    metadata: dict[str, str]
    description: str = ""
    #: The archive's sha256 as registered in ``ModelMetrics`` (set at creation only: no
    #: UpdateModelPackage field reaches it, unlike the customer metadata the router may write).
    archive_digest: str | None = None
    #: A shadow canary's recorded decision (a ``SHADOW_STATUS`` value), None before one.
    decision: str | None = None

    @property
    def approved(self) -> bool:
        return self.status == APPROVED


def find(sm: Any, group: str, version: str) -> Package | None:
    """The package registered for ``version`` in ``group``, if any."""
    # ListModelPackages' documented default is UNVERSIONED only (botocore's sagemaker model).
    # Newest first: the version asked for is most often the last one registered (a canary, a
    # release's new version), and each package costs one DescribeModelPackage call.
    pages = sm.get_paginator("list_model_packages").paginate(
        ModelPackageGroupName=group,
        ModelPackageType="Versioned",
        SortBy="CreationTime",
        SortOrder="Descending",
    )
    try:
        summaries = [s for page in pages for s in page.get("ModelPackageSummaryList", [])]
    except Exception as exc:
        # A group the stateful stack has not created yet holds no package.
        code = (getattr(exc, "response", None) or {}).get("Error", {}).get("Code")
        if code in ("ValidationException", "ResourceNotFound"):
            return None
        raise
    for summary in summaries:
        described = sm.describe_model_package(ModelPackageName=summary["ModelPackageArn"])
        meta = described.get("CustomerMetadataProperties") or {}
        if meta.get("version") == version:
            digest = (
                described.get("ModelMetrics", {})
                .get("ModelQuality", {})
                .get("Constraints", {})
                .get("ContentDigest", "")
            )
            return Package(
                described["ModelPackageArn"],
                # Optional in DescribeModelPackage's output (botocore's model): none is no
                # approval.
                described.get("ModelApprovalStatus", ""),
                meta,
                described.get("ApprovalDescription") or "",
                digest.removeprefix("sha256:") or None,
                decision_of(described.get("ModelLifeCycle")),
            )
    return None


def decision_of(lifecycle: Any) -> str | None:
    """The decision a package's ``ModelLifeCycle`` records, if it records one."""
    if not isinstance(lifecycle, dict) or lifecycle.get("Stage") != SHADOW_STAGE:
        return None
    status = lifecycle.get("StageStatus")
    return status if status in SHADOW_STATUS.values() else None
