"""``python -m training.publish --adapter NAME --env ENV``: gate, upload, record in the catalog.

Refuses an adapter that does not beat its base on the held-out metric, whose base (model id,
revision, tokenizer fingerprint when the catalog pins one) is not the environment's base, whose
version differs from its catalog entry, or whose files do not match the manifest's hashes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from config import load_deployment
from config.loader import CATALOG_PATH, ENVIRONMENTS_DIR
from config.writer import set_artifact
from training.package import PackageError, read_manifest, sha256_file


class PublishError(ValueError):
    pass


def check(
    archive: Path,
    adapter: str,
    env: str,
    *,
    catalog: Path = CATALOG_PATH,
    environments_dir: Path = ENVIRONMENTS_DIR,
) -> dict[str, Any]:
    """Every gate a publish passes; returns the manifest."""
    try:
        manifest = read_manifest(archive)
    except (PackageError, OSError) as exc:
        raise PublishError(str(exc)) from None
    dep = load_deployment(env, catalog, environments_dir)
    entry = dep.adapter(adapter).entry
    if manifest.get("name") != adapter:
        raise PublishError(f"archive is adapter {manifest.get('name')!r}, not {adapter!r}")
    if manifest.get("version") != entry.version:
        raise PublishError(
            f"archive version {manifest.get('version')!r} != catalog version {entry.version!r}"
        )
    base, mb = dep.base, manifest.get("base", {})
    if (mb.get("model_id"), mb.get("revision")) != (base.model_id, base.revision):
        raise PublishError(
            f"base mismatch: adapter trained on {mb.get('model_id')}@{mb.get('revision')}, "
            f"environment {env!r} serves {base.model_id}@{base.revision}"
        )
    if base.tokenizer_sha256 and mb.get("tokenizer_sha256") != base.tokenizer_sha256:
        raise PublishError("base mismatch: tokenizer fingerprint differs from the catalog's")
    ev = manifest.get("eval") or {}
    if not ev.get("beats_base"):
        a, b = ev.get("adapter", {}).get("score"), ev.get("base", {}).get("score")
        raise PublishError(
            f"adapter {adapter!r} does not beat its base on {ev.get('metric')} "
            f"(adapter {a}, base {b}); not publishable"
        )
    return manifest


def publish(
    archive: Path,
    adapter: str,
    env: str,
    *,
    bucket: str | None = None,
    s3: Any = None,
    catalog: Path = CATALOG_PATH,
    environments_dir: Path = ENVIRONMENTS_DIR,
    record_uri: bool = True,
    kms_key: str | None = None,
) -> str:
    """Gate, upload (SSE-KMS, with the archive's sha256 as metadata), record in the catalog.

    ``record_uri=False`` records only the hash: the URI stays the one each environment derives
    from its own bucket, so one catalog serves every environment (what ``make release`` does).
    """
    manifest = check(archive, adapter, env, catalog=catalog, environments_dir=environments_dir)
    dep = load_deployment(env, catalog, environments_dir)
    entry = dep.adapter(adapter).entry
    digest = sha256_file(archive)
    if entry.sha256 and entry.sha256 != digest:
        raise PublishError(
            f"archive sha256 {digest[:12]}... is not the one the catalog pins for {adapter!r} "
            f"({entry.sha256[:12]}...); bump the entry's version for a new archive"
        )
    if bucket is None:
        bucket = dep.env.artifact_bucket
    if bucket is None:
        import boto3

        account = boto3.client("sts").get_caller_identity()["Account"]
        bucket = f"{dep.env.prefix}-artifacts-{account}-{dep.env.region}"
    key = f"adapters/{adapter}/{manifest['version']}/adapter.tar.gz"
    if s3 is None:
        import boto3

        s3 = boto3.client("s3", region_name=dep.env.region)
    kms = {"SSEKMSKeyId": kms_key} if kms_key else {}
    with archive.open("rb") as body:
        s3.put_object(Bucket=bucket, Key=key, Body=body, ServerSideEncryption="aws:kms",
                      Metadata={"sha256": digest}, **kms)  # fmt: skip
    uri = f"s3://{bucket}/{key}"
    set_artifact(adapter, uri if record_uri else None, digest, catalog)
    return uri


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m training.publish", description=__doc__)
    ap.add_argument("--adapter", required=True)
    ap.add_argument("--env", required=True)
    ap.add_argument("--archive", type=Path, help="default: .artifacts/adapters/NAME.tar.gz")
    ap.add_argument("--bucket")
    ap.add_argument("--check-only", action="store_true", help="run the gates, upload nothing")
    args = ap.parse_args(argv)
    archive = args.archive or Path(".artifacts/adapters") / f"{args.adapter}.tar.gz"
    try:
        if args.check_only:
            check(archive, args.adapter, args.env)
            print(f"{args.adapter}: publishable to {args.env}")
        else:
            print(publish(archive, args.adapter, args.env, bucket=args.bucket))
    except PublishError as exc:
        print(f"refused: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
