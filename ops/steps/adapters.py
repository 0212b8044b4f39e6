"""The ``adapters`` step: every adapter archive present in the environment's bucket: an archive at
hand for this base uploaded through ``training.publish``'s gates, or one trained as a SageMaker
job (``training.launch``) and published, which registers it in the Model Registry pending
approval (a canary's archive is published by hand, ``training.publish --canary``); and each
``serving: merged`` entry merged into the base and staged."""

from __future__ import annotations

import tarfile
import tempfile
from pathlib import Path

from botocore.exceptions import ClientError

from config import layout
from ops.steps.base import Release, ReleaseError
from training.merge import MERGED_MANIFEST
from training.package import PackageError, read_manifest
from training.publish import PublishError, publish

NAME = "adapters"
SUMMARY = "upload or train and publish every adapter archive; stage merged weights"


def missing(r: Release) -> list[str]:
    return (
        [
            f"{a.name}: {s}"
            for a in r.dep.adapters
            if not (s := r.adapter_state(a.name)).startswith("done")
        ]
        + r.canaries_missing()
        + r.merged_missing()
    )


def run(r: Release) -> None:
    if canaries := r.canaries_missing():
        raise ReleaseError(
            "publish each canary first (python -m training.publish --env "
            f"{r.env} --adapter NAME --canary --archive PATH): " + "; ".join(canaries)
        )
    missing = [a for a in r.dep.adapters if not r.adapter_state(a.name).startswith("done")]
    at_hand = {a.name: archive_at_hand(r, a.name) for a in missing}
    untrained = [name for name, archive in at_hand.items() if archive is None]
    if untrained and not r.training_role:
        raise ReleaseError(
            f"no archive for {', '.join(untrained)} in {r.own_archives}: pass "
            "--training-role ARN to train them as SageMaker jobs, or put NAME.tar.gz there"
        )
    for a in missing:
        archive = at_hand[a.name]
        if archive is None:
            r.log(f"  {a.name}: training (SageMaker job)")
            archive = trained_archive(r, a.name)
        r.log(f"  {a.name}: publishing {archive.name} through the publish gates")
        try:
            publish(
                archive,
                a.name,
                r.env,
                bucket=r.bucket,
                s3=r.s3,
                catalog=r.catalog,
                environments_dir=r.environments_dir,
                record_uri=False,
                kms_key=r._kms_key(),
                base_dir=r.base_dir,
                describe_job=r.tools.training_job,
                job_archive=r.tools.job_archive,
                registry=r.sm,
            )
        except PublishError as exc:
            raise ReleaseError(f"{a.name}: {exc}") from None
    if missing:
        r._catalog_changed()
    if r.merged_missing():
        stage_merged(r)


def archive_at_hand(r: Release, name: str) -> Path | None:
    """The adapter's archive for this base, or None. An archive of the same name trained on
    another base (``make up``'s, of the local platform's small base, or one left flat in
    ``ARCHIVES`` by an older version) is never taken: the release says it skipped it and
    why, and trains instead."""
    own = r.own_archives / f"{name}.tar.gz"
    candidates = [own, r.archives / f"{name}.tar.gz"]
    candidates += sorted(p for p in r.archives.glob(f"*/{name}.tar.gz") if p != own)
    want = (r.dep.base.model_id, r.dep.base.revision)
    for path in candidates:
        if not path.is_file():
            continue
        try:
            base = read_manifest(path).base
            found = (base.model_id, base.revision)
        except (PackageError, OSError, tarfile.TarError) as exc:
            r.log(f"  {name}: skipped {path}: its manifest cannot be read ({exc})")
            continue
        if found != want:
            r.log(
                f"  {name}: skipped {path}: trained on {found[0]}@{found[1][:12]}, not this "
                f"environment's base {want[0]}@{want[1][:12]}"
            )
            continue
        if path != own:
            r.log(f"  {name}: {path} is for this base; keep such archives in {own.parent}")
        return path
    return None


def stage_merged(r: Release) -> None:
    """Merge each ``serving: merged`` entry's published archive into the base and upload
    the result under ``merged/NAME/VERSION/`` (SSE-KMS), the merged manifest last: its
    presence is what marks the prefix complete."""
    base = r.dep.base
    missing = set(r.merged_missing())
    todo = [
        a for a in r.dep.adapters if a.merged and any(m.startswith(f"{a.name}:") for m in missing)
    ]
    with tempfile.TemporaryDirectory(prefix="merge-") as tmp:
        work = Path(tmp)
        base_dir = r.base_dir
        if base_dir is None:
            r.log(f"  downloading {base.model_id}@{base.revision} to merge into")
            (work / "base").mkdir()
            base_dir = r.tools.download_base(base.model_id, base.revision, work / "base")
        for a in todo:
            archive = work / f"{a.name}.tar.gz"
            bucket, key = r.bucket, r.adapter_key(a.name, a.entry.version)
            if a.entry.artifact:  # an archive the catalog names outside the bucket
                bucket, key = a.entry.artifact.removeprefix("s3://").split("/", 1)
            try:
                r.s3.download_file(bucket, key, str(archive))
            except ClientError as exc:
                raise ReleaseError(
                    f"{a.name}: cannot read s3://{bucket}/{key} to merge ({exc})"
                ) from None
            out = work / f"{a.name}-merged"
            r.log(f"  {a.name}: merging {a.entry.version} into {base.model_id}")
            manifest = r.tools.merge(Path(base_dir), archive, out)
            if a.entry.sha256 and manifest.adapter.sha256 != a.entry.sha256:
                raise ReleaseError(
                    f"{a.name}: the published archive is not the one the catalog pins"
                )
            prefix = layout.merged_prefix(a.name, a.entry.version)
            for path in sorted(p for p in out.iterdir() if p.name != MERGED_MANIFEST):
                layout.upload_encrypted(r.s3, path, r.bucket, prefix + path.name, r._kms_key())
            r._put_json(prefix + MERGED_MANIFEST, manifest.as_json())


def trained_archive(r: Release, name: str) -> Path:
    uri = r.tools.train(name, r.aws, r.dep, r.training_role or "")
    bucket, key = uri.removeprefix("s3://").split("/", 1)
    out = Path(tempfile.mkdtemp(prefix=f"trained-{name}-"))
    r.s3.download_file(bucket, key, str(out / "model.tar.gz"))
    with tarfile.open(out / "model.tar.gz") as tar:
        member = tar.getmember(f"{name}.tar.gz")
        if not member.isfile():
            raise ReleaseError(f"{uri} holds no {name}.tar.gz")
        tar.extract(member, out, filter="data")
    return out / f"{name}.tar.gz"
