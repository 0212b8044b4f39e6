"""Where an environment's things live in AWS: the artifact bucket's name and its object keys.

The bucket's name is derived, not exported, so that every stack, the release, training jobs,
publish and the teardown can form the same URI without reading a stack output. Deriving it in
one place is what keeps them agreeing: five hand-written copies once let training jobs use a
bucket named for AWS's documentation account instead of the caller's.

Nothing here calls AWS; the account comes from the caller (``config.aws``, which asks STS).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

#: Key prefixes in the artifact bucket; the SageMaker execution role reads only these.
BASE_PREFIX = "base/"
ADAPTER_PREFIX = "adapters/"
#: Merged weights of the ``serving: merged`` entries: ``merged/NAME/VERSION/``.
MERGED_PREFIX = "merged/"
#: What the release stages and the endpoint reads.
STAGED_PREFIXES = (BASE_PREFIX, ADAPTER_PREFIX, MERGED_PREFIX)
#: The release's own records (the smoke check's result per environment).
RELEASE_PREFIX = "release/"

#: S3's naming rules for general purpose buckets (S3 user guide, "General purpose bucket naming
#: rules"): 3-63 characters; lower-case letters, digits, dots and hyphens; beginning and ending
#: with a letter or digit.
BUCKET_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]$")
#: The longest account (12 digits) and region name (``ap-southeast-5`` is 14) a derived name
#: must leave room for.
_ACCOUNT_LEN = 12


def artifact_bucket(prefix: str, account: str, region: str, configured: str | None = None) -> str:
    """The environment's artifact bucket: ``artifact_bucket`` from its file, or
    ``PREFIX-artifacts-ACCOUNT-REGION``. ``account`` and ``region`` may be CDK tokens (the
    stateful stack's own account), or the values STS and the environment file give."""
    return configured or f"{prefix}-artifacts-{account}-{region}"


def bucket_problem(prefix: str, region: str, configured: str | None = None) -> str | None:
    """Why the bucket name derived for this environment would be refused by S3, or None.

    Checked by ``make check`` with the longest account number, so a prefix with a capital
    letter or one too long is found before ``CreateBucket`` answers ``InvalidBucketName``.
    """
    name = artifact_bucket(prefix, "0" * _ACCOUNT_LEN, region, configured)
    if not BUCKET_NAME_RE.match(name) or ".." in name:
        what = "artifact_bucket" if configured else f"the derived name {name!r}"
        return (
            f"{what} is not a valid S3 bucket name (3-63 characters: lower-case letters, "
            "digits, dots and hyphens); "
            + (
                "fix it"
                if configured
                else "use a shorter, lower-case prefix or set artifact_bucket"
            )
        )
    return None


def bootstrap_parameter() -> str:
    """The CDK bootstrap's version parameter for the qualifier ``cdk.json`` sets (CDK's default
    ``hnb659fds`` when it sets none: the CDK guide, "Customize bootstrapping")."""
    import json

    root = Path(__file__).resolve().parents[1]
    context = json.loads((root / "cdk.json").read_text()).get("context", {})
    qualifier = context.get("@aws-cdk/core:bootstrapQualifier", "hnb659fds")
    return f"/cdk-bootstrap/{qualifier}/version"


def router_service(prefix: str) -> str:
    """The router's metric identity (the ``service`` dimension of its EMF metrics and the
    alarms on them): one per environment, so two environments in one account and region never
    alarm on each other's metrics."""
    return f"{prefix}-router"


def data_key_alias(prefix: str) -> str:
    """The environment's KMS key (stateful stack): every upload into its bucket uses it."""
    return f"alias/{prefix}-data"


def adapter_key(name: str, version: str) -> str:
    """The archive of one adapter version."""
    return f"{ADAPTER_PREFIX}{name}/{version}/adapter.tar.gz"


def base_prefix(base_key: str, revision: str) -> str:
    """The staged base weights of one revision (a prefix: SageMaker reads it as ``S3Prefix``)."""
    return f"{BASE_PREFIX}{base_key}/{revision}/"


def merged_prefix(name: str, version: str) -> str:
    return f"{MERGED_PREFIX}{name}/{version}/"


def evaluation_key(name: str, version: str) -> str:
    """An adapter version's evaluation report, beside its archive (the Model Registry's
    ``ModelMetrics`` point at it)."""
    return f"{ADAPTER_PREFIX}{name}/{version}/evaluation.json"


def encrypted(kms_key: str | None) -> dict[str, str]:
    """The arguments of every write into an environment's bucket: SSE-KMS, with the
    environment's key where it is known (its bucket policy refuses other writes)."""
    return {"ServerSideEncryption": "aws:kms", **({"SSEKMSKeyId": kms_key} if kms_key else {})}


def put_encrypted(
    s3: Any, bucket: str, key: str, body: Any, kms_key: str | None, **extra: Any
) -> None:
    """PutObject, encrypted with the environment's key."""
    s3.put_object(Bucket=bucket, Key=key, Body=body, **encrypted(kms_key), **extra)


def upload_encrypted(s3: Any, path: Path, bucket: str, key: str, kms_key: str | None) -> None:
    """A file (multipart when large: boto3's transfer manager), encrypted with the key."""
    s3.upload_file(str(path), bucket, key, ExtraArgs=encrypted(kms_key))


def archives_dir(root: Path, base_key: str) -> Path:
    """Where adapter archives trained on one base are kept on this machine: ``make up``'s,
    a release's and a teardown's, ``ROOT/BASE_KEY/NAME.tar.gz``. One folder per base, so an
    archive of the local platform's small base is never taken for the deployed base's."""
    return root / base_key


def s3_uri(bucket: str, key: str) -> str:
    return f"s3://{bucket}/{key}"
