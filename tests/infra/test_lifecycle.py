"""Retries and teardown as CloudFormation plays them: a resource with a fixed name is never plain
``Retain`` (a failed first create would keep it, and the retry fail on "already exists"), and
what only means something beside a kept key or bucket (its alias, its TLS-only policy) is kept
with it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

SNAPSHOTS = Path(__file__).resolve().parents[2] / "infra" / "snapshots"
#: Properties that give a resource a fixed name (CloudFormation cannot create a second one).
NAME_PROPERTIES = (
    "LogGroupName",
    "BucketName",
    "RepositoryName",
    "ModelPackageGroupName",
    "AliasName",
    "FunctionName",
    "Name",
)


def _templates(env: str) -> dict[str, dict]:
    return {p.name: json.loads(p.read_text()) for p in sorted((SNAPSHOTS / env).glob("*.json"))}


@pytest.mark.parametrize("env", ["dev", "staging", "prod"])
def test_no_resource_with_a_fixed_name_is_plain_retain(env: str) -> None:
    offenders = [
        f"{stack}:{rid} ({r['Type']})"
        for stack, t in _templates(env).items()
        for rid, r in t.get("Resources", {}).items()
        if r.get("DeletionPolicy") == "Retain"
        and any(k in r.get("Properties", {}) for k in NAME_PROPERTIES)
    ]
    assert not offenders, offenders


@pytest.mark.parametrize("env", ["staging", "prod"])
def test_a_kept_key_or_bucket_keeps_its_alias_and_policy(env: str) -> None:
    checked = 0
    for t in _templates(env).values():
        resources = t.get("Resources", {})
        for r in resources.values():
            target = None
            if r["Type"] == "AWS::KMS::Alias":
                target = r["Properties"]["TargetKeyId"]
            elif r["Type"] == "AWS::S3::BucketPolicy":
                target = r["Properties"]["Bucket"]
            if not isinstance(target, dict):
                continue
            ref = target.get("Ref") or (target.get("Fn::GetAtt") or [None])[0]
            if ref not in resources:
                continue
            owner = resources[ref]
            assert r.get("DeletionPolicy") == owner.get("DeletionPolicy"), (r, owner["Type"])
            checked += 1
    assert checked >= 3
