"""Release evidence in SageMaker Model Registry: one model package per published version.

AWS's LoRA guidance: "version adapters independently, but approve them with their base
compatibility. Model Registry can hold the release evidence." Each adapter has a model package
group that the environment's stateful stack creates (``infra.storage``, named like its
component); ``training.publish`` registers every version it publishes there, pending approval:

- the gate's evaluation as the package's model-quality metrics (a JSON report in the bucket,
  beside the archive, with its sha256 as the report's ``ContentDigest``);
- the compatibility tuple and the archive's identity as customer metadata: base model id,
  revision and tokenizer sha256, the runtime image, the dataset and its sha256, the archive's
  URI and sha256, the weights' sha256.

``python -m training.approve`` records who approved a version and why; ``make release``
deploys only versions whose package is approved and holds the archive the catalog pins
(``approval_problems``). Written on boto3's SageMaker client: the SageMaker Python SDK's
registry helpers need a ``Model`` with an inference image per package, which an adapter (a
LoRA archive on a shared base component) does not have.
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

from config import Deployment, ResolvedAdapter, layout
from contracts.manifests import AdapterManifest
from contracts.registry import (
    APPROVED,
    PENDING,
    SHADOW_PENDING,
    SHADOW_STAGE,
    SHADOW_TAG,
    Package,
    find,
)

#: CreateModelPackage's CustomerMetadataProperties: values of at most 256 characters of this
#: class (botocore's sagemaker model, shape CustomerMetadataValue).
_METADATA_VALUE_MAX = 256


class RegistryError(ValueError):
    """A version cannot be registered or approved as asked; the message says why."""


def group_name(a: ResolvedAdapter) -> str:
    """The adapter's model package group: its stable component's name (already checked
    against SageMaker's 63-character name rule, which groups share)."""
    return a.component_name


def _value(v: object) -> str:
    text = v if isinstance(v, str) else json.dumps(v)
    if len(text) > _METADATA_VALUE_MAX:
        raise RegistryError(f"metadata value over {_METADATA_VALUE_MAX} characters: {text[:40]}...")
    return text


def evidence(
    dep: Deployment, manifest: AdapterManifest, uri: str, digest: str, weights: str | None
) -> dict[str, str]:
    """The compatibility tuple and the archive's identity, as the package's metadata."""
    base, mb, ds = dep.base, manifest.base, manifest.dataset
    image = base.image
    ev = manifest.eval or {}
    fields = {
        "adapter": manifest.name,
        "version": manifest.version,
        "base_model_id": base.model_id,
        "base_revision": base.revision,
        "tokenizer_sha256": mb.tokenizer_sha256 or base.tokenizer_sha256,
        "image": f"{image.repository}{image.reference}",
        "dataset": ds.get("task")
        and f"{ds.get('task')} seed {ds.get('seed')} size {ds.get('size')}",
        "dataset_sha256": ds.get("sha256"),
        "archive_uri": uri,
        "archive_sha256": digest,
        "weights_sha256": weights,
        "metric": ev.get("metric"),
        "adapter_score": (ev.get("adapter") or {}).get("score"),
        "base_score": (ev.get("base") or {}).get("score"),
        "ci_low": (ev.get("bootstrap") or {}).get("ci_low"),
        "gate_source": ev.get("source"),
    }
    return {k: _value(v) for k, v in fields.items() if v is not None}


def register(
    sm: Any,
    s3: Any,
    dep: Deployment,
    adapter: str,
    manifest: AdapterManifest,
    *,
    bucket: str,
    uri: str,
    digest: str,
    weights: str | None,
    kms_key: str | None = None,
    canary: bool = False,
) -> Package:
    """The version's package, registered pending approval (or the one already registered for
    it, when it holds the same archive). The archive's sha256 goes into ``ModelMetrics``, which
    only CreateModelPackage sets, and is what the approval check trusts. ``canary``: a canary
    version (shadow or weighted), registered in the lifecycle stage the router may record its
    decisions in (a quality decision, or a 5xx rollback), and read them back from."""
    a = dep.adapter(adapter)
    group, version = group_name(a), str(manifest.version)
    meta = evidence(dep, manifest, uri, digest, weights)
    existing = find(sm, group, version)
    if existing is not None:
        if existing.archive_digest != digest:
            raise RegistryError(
                f"{group} already has a package for version {version} with archive sha256 "
                f"{(existing.archive_digest or '?')[:12]}..., not {digest[:12]}...; "
                "bump the entry's version for new weights"
            )
        return existing
    report = json.dumps(manifest.eval or {}, indent=1, sort_keys=True).encode()
    key = layout.evaluation_key(adapter, version)
    layout.put_encrypted(s3, bucket, key, report, kms_key, ContentType="application/json")
    statistics = {
        "ContentType": "application/json",
        "S3Uri": f"s3://{bucket}/{key}",
        "ContentDigest": "sha256:" + hashlib.sha256(report).hexdigest(),
    }
    # The archive itself, by its digest: ModelMetrics is set at creation only (botocore's
    # UpdateModelPackage input has no field for it), so neither the router's registry
    # permission nor anyone holding UpdateModelPackage can change what was approved.
    archive = {"ContentType": "application/gzip", "S3Uri": uri, "ContentDigest": f"sha256:{digest}"}
    lifecycle = (
        {
            "ModelLifeCycle": {
                "Stage": SHADOW_STAGE,
                "StageStatus": SHADOW_PENDING,
                "StageDescription": "a canary: judged by the router against stable",
            },
            "Tags": [{"Key": SHADOW_TAG, "Value": SHADOW_STAGE}],
        }
        if canary
        else {}
    )
    arn = sm.create_model_package(
        ModelPackageGroupName=group,
        ModelPackageDescription=f"{adapter} {version} on {dep.base.model_id}@{dep.base.revision}",
        ModelApprovalStatus=PENDING,
        ModelMetrics={"ModelQuality": {"Statistics": statistics, "Constraints": archive}},
        CustomerMetadataProperties=meta,
        Domain="NATURAL_LANGUAGE_PROCESSING",
        Task="OTHER",
        **lifecycle,
    )["ModelPackageArn"]
    return Package(arn, PENDING, meta, archive_digest=digest)


def approve(
    sm: Any, dep: Deployment, adapter: str, version: str, *, by: str, note: str = ""
) -> Package:
    """Approve ``version``'s package, recording who (a person or a named check) and why."""
    if not by.strip():
        raise RegistryError("say who approves (--by NAME: a person or a named check)")
    if not all(ch.isalnum() or ch.isspace() or ch in "_.:/=+-@" for ch in by):
        # CustomerMetadataProperties' value pattern (botocore's sagemaker model).
        raise RegistryError(
            f"--by {by!r}: SageMaker records only letters, digits, spaces and "
            "_ . : / = + - @ (a name like jane.doe@example.com)"
        )
    a = dep.adapter(adapter)
    pkg = find(sm, group_name(a), version)
    if pkg is None:
        raise RegistryError(
            f"{adapter} {version} is not registered in {group_name(a)}: "
            "publish it first (python -m training.publish)"
        )
    description = f"approved by {by}" + (f": {note}" if note else "")
    meta = {**pkg.metadata, "approved_by": _value(by)}
    sm.update_model_package(
        ModelPackageArn=pkg.arn,
        ModelApprovalStatus=APPROVED,
        ApprovalDescription=description[:1024],
        CustomerMetadataProperties=meta,
    )
    return Package(pkg.arn, APPROVED, meta, description)


def versions(a: ResolvedAdapter) -> list[tuple[str, str | None]]:
    """(version, the archive sha256 the catalog pins) of every version an entry deploys."""
    out = [(a.entry.version, a.entry.sha256)]
    if a.entry.canary is not None:
        out.append((a.entry.canary.version, a.entry.canary.sha256))
    return out


def approval_problems(sm: Any, dep: Deployment, env: str) -> list[str]:
    """Why the release may not deploy, per version it would deploy: not registered, not
    approved, or approved for another archive than the catalog pins."""
    problems = []
    for a in dep.adapters:
        for version, pinned in versions(a):
            pkg = find(sm, group_name(a), version)
            approve_cmd = (
                f"python -m training.approve --env {env} --adapter {a.name} "
                f"--version {version} --by NAME"
            )
            if pkg is None:
                problems.append(
                    f"{a.name} {version}: not registered in {group_name(a)} "
                    "(publishing its archive again registers it)"
                )
            elif pinned and pkg.archive_digest is None:
                problems.append(
                    f"{a.name} {version}: its package records no archive digest in its model "
                    "metrics (registered by an older publish); publish the archive as a new version"
                )
            elif pinned and pkg.archive_digest != pinned:
                problems.append(
                    f"{a.name} {version}: the registered archive is not the one the catalog pins"
                )
            elif not pkg.approved:
                problems.append(f"{a.name} {version}: {pkg.status} ({approve_cmd})")
    return problems


#: How long delete_group_versions waits for SageMaker to finish deleting: 60 x 5 s.
GROUP_EMPTY_POLLS, GROUP_EMPTY_POLL_S = 60, 5.0


def delete_group_versions(sm: Any, group: str) -> int:
    """Delete every version in ``group``; how many. A group that still holds versions cannot
    be deleted (SageMaker's API reference lists ConflictException for DeleteModelPackageGroup
    without saying when; this project assumes that is the case, in one place), so whatever
    deletes a group (a teardown, a registry stack dropping a removed entry) calls this first.
    ``ModelPackageType="Versioned"``: ListModelPackages' documented default is UNVERSIONED."""
    pages = sm.get_paginator("list_model_packages").paginate(
        ModelPackageGroupName=group, ModelPackageType="Versioned"
    )
    arns = [p["ModelPackageArn"] for page in pages for p in page["ModelPackageSummaryList"]]
    for arn in arns:
        sm.delete_model_package(ModelPackageName=arn)
    # DeleteModelPackage returns while the version may still be Deleting (a ModelPackageStatus
    # in botocore's model), and a group deleted before its versions are gone meets the
    # ConflictException: wait, bounded, until the group lists none.
    for _ in range(GROUP_EMPTY_POLLS):
        left = sm.list_model_packages(ModelPackageGroupName=group, ModelPackageType="Versioned")
        if not left["ModelPackageSummaryList"]:
            return len(arns)
        time.sleep(GROUP_EMPTY_POLL_S)
    raise RegistryError(
        f"{group}: its versions were still listed {GROUP_EMPTY_POLLS * GROUP_EMPTY_POLL_S:g} s "
        "after they were deleted; run again once SageMaker has removed them"
    )
