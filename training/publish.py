"""``python -m training.publish --adapter NAME --env ENV``: gate, upload, record in the catalog.

Refuses an adapter whose files do not match the manifest's hashes, whose base (model id,
revision, tokenizer fingerprint when the catalog pins one) is not the environment's base, whose
version differs from its catalog entry, or that is not publishable: it does not beat its base
on the test split with a 95% paired-bootstrap lower bound above zero, or misses its task's
floors (``training.evaluate.gate``).

Publishability is never read from the archive's own manifest: anyone can rewrite a flag and
re-hash the files. It comes from one of two pieces of evidence:

- a re-evaluation, when the base is at hand (``--base-dir``; the local environments' bases are
  found under ``.artifacts/base``): the test split is generated again (its sha256 must be the
  one the manifest records) and the adapter and the base are run on it here;
- the metrics SageMaker recorded for the training job that made the archive (the manifest's
  ``training.job_name``): ``DescribeTrainingJob``'s ``FinalMetricDataList``, which SageMaker
  parses from the job's own log (``training.launch`` defines the metrics). The manifest's
  figures must be the job's.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path
from typing import Any

from config import Deployment, layout, load_deployment
from config.aws import AccountMismatchError, AwsEnv
from config.loader import CATALOG_PATH, ENVIRONMENTS_DIR
from config.schema import NoCanaryError
from config.writer import set_artifact, update_adapter
from contracts.manifests import AdapterManifest
from training.package import PackageError, read_manifest, sha256_file

ROOT = Path(__file__).resolve().parents[1]
#: The metrics a training job prints for the gate (``GATE name=value ...``) and SageMaker
#: records; ``training.launch`` defines one regular expression per name.
GATE_METRICS = ("adapter_score", "base_score", "ci_low", "publishable")


class PublishError(ValueError):
    pass


def gate_line(evaluation: dict[str, Any]) -> str:
    """The log line a training job prints so that SageMaker records the gate's figures."""
    values = {
        "adapter_score": evaluation["adapter"]["score"],
        "base_score": evaluation["base"]["score"],
        "ci_low": evaluation["bootstrap"]["ci_low"],
        "publishable": 1 if evaluation["publishable"] else 0,
    }
    return "GATE " + " ".join(f"{k}={v:.6g}" for k, v in values.items())


def local_base_dir(dep: Deployment) -> Path | None:
    """Where the local platform keeps this environment's base, when it is built there."""
    if dep.base.source != "local":
        return None
    path = ROOT / ".artifacts" / "base" / dep.base_key
    return path if (path / "base_manifest.json").exists() else None


#: The fields of a manifest's dataset that identify it (training.datasets.for_entry).
DATASET_IDENTITY = {
    "generator": ("source", "generator", "seed", "size"),
    "file": ("source", "path", "file_sha256", "seed"),
}


def entry_split(manifest: AdapterManifest, dep: Deployment, adapter: str, catalog_dir: Path):
    """The entry's split, after checking that the archive was trained on it: the same
    generator, seed and size, or the same file with the same sha256, and the same split."""
    from training import datasets

    ds = manifest.dataset
    entry = dep.adapter(adapter).entry
    try:
        split, identity = datasets.for_entry(entry, catalog_dir)
    except (ValueError, OSError) as exc:
        raise PublishError(f"the entry's dataset cannot be read again: {exc}") from None
    fields = DATASET_IDENTITY[identity["source"]]
    differs = [f for f in fields if ds.get(f) != identity[f]]
    if differs:
        raise PublishError(
            f"the archive was trained on another dataset than the entry's ({', '.join(differs)}: "
            + ", ".join(f"{ds.get(f)!r} != {identity[f]!r}" for f in differs)
            + "): train it again from this catalog"
        )
    if split.sha256() != ds.get("sha256"):
        raise PublishError(
            f"the manifest's split sha256 is not the split of {entry.dataset or entry.task} "
            "this code makes: the test split cannot be reproduced"
        )
    return split


def reevaluate(
    archive: Path,
    manifest: AdapterManifest,
    dep: Deployment,
    adapter: str,
    base_dir: Path,
    log=print,
    catalog_dir: Path = CATALOG_PATH.parent,
) -> dict[str, Any]:
    """Run the gate again here: the same test split, this base, this archive."""
    import tarfile
    import tempfile

    from contracts.compat import tokenizer_sha256
    from training.evaluate import compare

    recorded = manifest.base.tokenizer_sha256
    if recorded and tokenizer_sha256(base_dir) != recorded:
        raise PublishError(f"{base_dir} is not the base the adapter was trained on (tokenizer)")
    split = entry_split(manifest, dep, adapter, catalog_dir)
    profile = dep.adapter(adapter).profile
    # The base is prompted with the entry's instruction, never the manifest's: a manifest that
    # carried a prompt of its own could handicap the base it is compared with.
    system = manifest.prompt.system if manifest.prompt is not None else None
    if system != profile.instruction:
        raise PublishError(
            f"the adapter was trained with the system turn {system!r}, not the entry's "
            f"instruction {profile.instruction!r}: train it again from this catalog"
        )
    with tempfile.TemporaryDirectory(prefix="publish-") as tmp:
        with tarfile.open(archive, "r:gz") as tar:
            tar.extractall(tmp, filter="data")
        log(f"{adapter}: re-evaluating against {base_dir} on {len(split.test)} test examples")
        entry = dep.adapter(adapter).entry
        return compare(
            base_dir,
            Path(tmp),
            profile,
            list(split.test),
            train=split.train,
            schema=entry.json_schema_document,
            log=log,
        )


def job_metrics(job_name: str, region: str) -> dict[str, Any]:
    import boto3

    return boto3.client("sagemaker", region_name=region).describe_training_job(
        TrainingJobName=job_name
    )


def job_archive_sha256(uri: str, adapter: str, region: str) -> str:
    """The sha256 of ``ADAPTER.tar.gz`` inside a training job's output (``model.tar.gz`` at
    the job's ``ModelArtifacts.S3ModelArtifacts``), computed here from the object itself."""
    import tarfile
    import tempfile

    import boto3

    bucket, key = uri.removeprefix("s3://").split("/", 1)
    with tempfile.TemporaryDirectory(prefix="job-output-") as tmp:
        local = Path(tmp) / "model.tar.gz"
        boto3.client("s3", region_name=region).download_file(bucket, key, str(local))
        with tarfile.open(local, "r:gz") as tar:
            try:
                member = tar.extractfile(f"{adapter}.tar.gz")
            except KeyError:
                member = None
            if member is None:
                raise PublishError(f"{uri} holds no {adapter}.tar.gz") from None
            return hashlib.file_digest(member, "sha256").hexdigest()


def from_job(manifest: AdapterManifest, adapter: str, described: dict[str, Any]) -> dict[str, Any]:
    """The gate's verdict as SageMaker recorded it for the job, checked against the manifest."""
    job = described.get("TrainingJobName")
    if described.get("TrainingJobStatus") != "Completed":
        raise PublishError(f"training job {job} is {described.get('TrainingJobStatus')}")
    hp = described.get("HyperParameters") or {}
    if hp.get("adapter", "").strip('"') != adapter or (
        hp.get("version", "").strip('"') != manifest.version
    ):
        raise PublishError(
            f"training job {job} trained {hp.get('adapter')} {hp.get('version')}, "
            f"not {adapter} {manifest.version}"
        )
    final = {m["MetricName"]: m["Value"] for m in described.get("FinalMetricDataList") or []}
    metrics = {k: final.get(f"gate:{k}") for k in GATE_METRICS}
    missing = [k for k, v in metrics.items() if v is None]
    if missing:
        raise PublishError(f"training job {job} recorded no gate metrics {missing}")
    ev = manifest.eval or {}
    claimed = {
        "adapter_score": (ev.get("adapter") or {}).get("score"),
        "base_score": (ev.get("base") or {}).get("score"),
        "ci_low": (ev.get("bootstrap") or {}).get("ci_low"),
    }
    for k, v in claimed.items():
        if v is None or abs(float(v) - float(metrics[k])) > 1e-3 * max(1.0, abs(float(v))):
            raise PublishError(
                f"the manifest's {k} ({v}) is not what training job {job} recorded "
                f"({metrics[k]}): the archive is not that job's output"
            )
    failures = (
        []
        if metrics["publishable"] == 1 and metrics["ci_low"] > 0
        else (ev.get("failures") or [f"training job {job} recorded the adapter as not publishable"])
    )
    return {**ev, "publishable": not failures, "failures": failures, "source": f"job {job}"}


def check(
    archive: Path,
    adapter: str,
    env: str,
    *,
    catalog: Path = CATALOG_PATH,
    environments_dir: Path = ENVIRONMENTS_DIR,
    base_dir: Path | None = None,
    describe_job: Any = job_metrics,
    job_archive: Any = job_archive_sha256,
    log: Any = print,
    canary: bool = False,
) -> AdapterManifest:
    """Every gate a publish passes; returns the manifest with the verified evaluation.
    ``canary``: the archive is the entry's canary version."""
    try:
        manifest = read_manifest(archive)
    except (PackageError, OSError) as exc:
        raise PublishError(str(exc)) from None
    dep = load_deployment(env, catalog, environments_dir)
    entry = dep.adapter(adapter).entry
    if manifest.name != adapter:
        raise PublishError(f"archive is adapter {manifest.name!r}, not {adapter!r}")
    try:
        version = entry.version_made(canary)
    except NoCanaryError as exc:
        raise PublishError(str(exc)) from None
    if manifest.version != version:
        which = "canary version" if canary else "catalog version"
        raise PublishError(f"archive version {manifest.version!r} != {which} {version!r}")
    base, mb = dep.base, manifest.base
    if (mb.model_id, mb.revision) != (base.model_id, base.revision):
        raise PublishError(
            f"base mismatch: adapter trained on {mb.model_id}@{mb.revision}, "
            f"environment {env!r} serves {base.model_id}@{base.revision}"
        )
    if base.tokenizer_sha256 and mb.tokenizer_sha256 != base.tokenizer_sha256:
        raise PublishError("base mismatch: tokenizer fingerprint differs from the catalog's")
    base_dir = base_dir or local_base_dir(dep)
    job = manifest.training.job_name if manifest.training is not None else None
    if base_dir is not None:
        verdict = reevaluate(
            archive,
            manifest,
            dep,
            adapter,
            Path(base_dir),
            log=log,
            catalog_dir=Path(catalog).parent,
        )
    elif job:
        entry_split(manifest, dep, adapter, Path(catalog).parent)
        described = describe_job(job, dep.env.region)
        verdict = from_job(manifest, adapter, described)
        # The figures tie the manifest to the job; this ties the archive to it: a passing
        # manifest copied onto other weights is not the object the job wrote.
        output = (described.get("ModelArtifacts") or {}).get("S3ModelArtifacts")
        if not output:
            raise PublishError(f"training job {job} records no ModelArtifacts.S3ModelArtifacts")
        if job_archive(output, adapter, dep.env.region) != sha256_file(archive):
            raise PublishError(
                f"{archive.name} is not the {adapter}.tar.gz that training job {job} wrote to "
                f"{output} (sha256 differs): publish the job's own archive"
            )
    else:
        raise PublishError(
            f"cannot verify that {adapter!r} beats its base: give --base-dir (the base weights, "
            "to evaluate it again here), or publish the archive of a SageMaker training job "
            "(its recorded metrics are checked); the manifest's own verdict is not evidence"
        )
    if not verdict["publishable"]:
        raise PublishError(
            f"adapter {adapter!r} is not publishable: " + "; ".join(verdict["failures"])
        )
    return manifest.model_copy(update={"eval": verdict})


def _default_bucket(dep: Any) -> str:
    """The environment's artifact bucket as its stateful stack names it, for the account STS
    says the credentials are (checked against the environment's)."""
    return AwsEnv(dep.env).bucket


def _upload_once(
    s3: Any, archive: Path, bucket: str, key: str, digest: str, kms_key: str | None, what: str
) -> None:
    """Upload the archive (SSE-KMS, its sha256 as metadata) unless that key already holds it;
    another archive under the key is refused."""
    published = _published_sha256(s3, bucket, key)
    if published is not None and published != digest:
        # Live components point at this key: scale-out copies would load the new weights
        # while older copies keep the old ones, under one name and version.
        raise PublishError(
            f"s3://{bucket}/{key} already holds {what} with sha256 "
            f"{published[:12]}..., not this archive's {digest[:12]}...; a published version is "
            "never overwritten: bump the entry's version for new weights"
        )
    if published is None:
        with archive.open("rb") as body:
            layout.put_encrypted(s3, bucket, key, body, kms_key, Metadata={"sha256": digest})


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
    base_dir: Path | None = None,
    describe_job: Any = job_metrics,
    job_archive: Any = job_archive_sha256,
    canary: bool = False,
    registry: Any = None,
) -> str:
    """Gate, upload (SSE-KMS, with the archive's sha256 as metadata), register the version in
    the Model Registry pending approval (``registry``: a SageMaker client; a deployable
    environment's), record in the catalog.

    ``record_uri=False`` records only the hash: the URI stays the one each environment derives
    from its own bucket, so one catalog serves every environment (what ``make release`` does).
    """
    manifest = check(
        archive,
        adapter,
        env,
        catalog=catalog,
        environments_dir=environments_dir,
        base_dir=base_dir,
        describe_job=describe_job,
        job_archive=job_archive,
        canary=canary,
    )
    dep = load_deployment(env, catalog, environments_dir)
    entry = dep.adapter(adapter).entry
    pinned = entry.canary if canary and entry.canary else entry
    digest = sha256_file(archive)
    if pinned.sha256 and pinned.sha256 != digest:
        raise PublishError(
            f"archive sha256 {digest[:12]}... is not the one the catalog pins for {adapter!r} "
            f"({pinned.sha256[:12]}...); bump the entry's version for a new archive"
        )
    if s3 is None:
        import boto3

        s3 = boto3.client("s3", region_name=dep.env.region)
    bucket = bucket or dep.env.artifact_bucket or _default_bucket(dep)
    key = layout.adapter_key(adapter, manifest.version)
    _upload_once(s3, archive, bucket, key, digest, kms_key, f"{adapter} {manifest.version}")
    uri = f"s3://{bucket}/{key}"
    files = manifest.files
    weights = next(
        (files[f] for f in ("adapter_model.safetensors", "adapter_model.bin") if f in files), None
    )
    if registry is not None:
        from botocore.exceptions import ClientError

        from training.registry import RegistryError, register

        try:
            register(
                registry,
                s3,
                dep,
                adapter,
                manifest,
                bucket=bucket,
                uri=uri,
                digest=digest,
                weights=weights,
                kms_key=kms_key,
                canary=canary and entry.canary is not None,
            )
        except RegistryError as exc:
            raise PublishError(str(exc)) from None
        except ClientError as exc:  # the archive is uploaded; publishing again registers it
            raise PublishError(
                f"{adapter} {manifest.version}: uploaded, but registering it "
                f"in the Model Registry failed ({exc}); publish again"
            ) from None
    # The revision the gate above ran against, when it is the entry's own base (an environment
    # that serves another base in its place, the local platform, proves nothing about it).
    gated = dep.base.revision if dep.base_key == entry.base else None
    if canary and entry.canary:
        recorded = {
            "artifact": uri if record_uri else None,
            "sha256": digest,
            "weights_sha256": weights,
            "gated_base_revision": gated,
        }
        # Only what the entry says: a default written back would pin it (a later default
        # change would never reach this entry), and the user's block stays as they wrote it.
        block = entry.canary.model_dump(exclude_unset=True, exclude_none=True) | {
            k: v for k, v in recorded.items() if v is not None
        }
        update_adapter(adapter, {"canary": block}, catalog)
    else:
        set_artifact(
            adapter,
            uri if record_uri else None,
            digest,
            catalog,
            weights_sha256=weights,
            gated_base_revision=gated,
        )
    return uri


def _published_sha256(s3: Any, bucket: str, key: str) -> str | None:
    """The sha256 recorded on the archive already at ``key`` (``""`` when it has none), or
    None when nothing is there."""
    from botocore.exceptions import ClientError

    try:
        head = s3.head_object(Bucket=bucket, Key=key)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
            return None
        raise
    return str(head.get("Metadata", {}).get("sha256", ""))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m training.publish", description=__doc__)
    ap.add_argument("--adapter", required=True)
    ap.add_argument("--env", required=True)
    ap.add_argument(
        "--archive", type=Path, help="default: .artifacts/adapters/BASE_KEY/NAME.tar.gz"
    )
    ap.add_argument("--bucket")
    ap.add_argument(
        "--base-dir",
        type=Path,
        help="the base weights, to evaluate the adapter again here (default for a "
        "local base: .artifacts/base/KEY)",
    )
    ap.add_argument("--check-only", action="store_true", help="run the gates, upload nothing")
    ap.add_argument(
        "--canary",
        action="store_true",
        help="the archive is the entry's canary version; recorded under canary:",
    )
    args = ap.parse_args(argv)
    base_key = load_deployment(args.env).base_key
    archive = args.archive or layout.archives_dir(ROOT / ".artifacts" / "adapters", base_key) / (
        f"{args.adapter}.tar.gz"
    )
    try:
        if args.check_only:
            check(archive, args.adapter, args.env, base_dir=args.base_dir, canary=args.canary)
            print(f"{args.adapter}: publishable to {args.env}")
        else:
            env = load_deployment(args.env).env
            extra: dict[str, Any] = {}
            if env.deployable:
                # As the release publishes: in the environment's region and account, with its
                # own KMS key, and no URI recorded, since the catalog is shared by every
                # environment and each derives the URI from its own bucket.
                aws = AwsEnv(env)
                extra = {
                    "registry": aws.client("sagemaker"),
                    "s3": aws.client("s3"),
                    "bucket": args.bucket or aws.bucket,
                    "kms_key": layout.data_key_alias(env.prefix),
                    "record_uri": False,
                }
            print(
                publish(
                    archive,
                    args.adapter,
                    args.env,
                    base_dir=args.base_dir,
                    canary=args.canary,
                    **({"bucket": args.bucket} | extra),
                )
            )
    except AccountMismatchError as exc:
        print(f"refused: {exc}", file=sys.stderr)
        return 1
    except PublishError as exc:
        print(f"refused: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
