"""SageMaker training jobs for catalog entries, with the SageMaker Python SDK v3 ModelTrainer.

``python -m training.launch --adapter NAME --env ENV --role ARN [--dry-run]``

One job per catalog entry: the Hugging Face training image from ``image_uris``, the project's
``config`` and ``training`` packages as source code, the base weights as the ``base`` channel,
the adapter archive written to /opt/ml/model. ``--dry-run`` runs the SDK's real code path with
every AWS call answered locally (a botocore ``before-call`` hook) and prints the exact
CreateTrainingJob request the SDK built; botocore has validated it against the service model
before the hook sees it. Nothing leaves the machine in a dry run.
"""

from __future__ import annotations

import argparse
import datetime
import json
import shutil
import sys
import tempfile
import urllib.parse
from pathlib import Path
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from config import CATALOG_PATH, Deployment, layout, load_deployment
from config.aws import AwsEnv
from config.dataset_files import DatasetFileError
from training.datasets.common import SplitError

ROOT = Path(__file__).resolve().parents[1]
#: AWS's documentation account: a dry run's stand-in when the environment names none. It only
#: ever appears in answers the dry run makes up itself (``_dry_run_session``).
DRY_RUN_ACCOUNT = "123456789012"
#: The trust policy a training role needs: SageMaker may assume it (what the SDK checks).
SAGEMAKER_TRUST = {
    "Version": "2012-10-17",
    "Statement": [
        {
            "Effect": "Allow",
            "Principal": {"Service": "sagemaker.amazonaws.com"},
            "Action": "sts:AssumeRole",
        }
    ],
}
HF_TRANSFORMERS = "4.56.2"
HF_PYTORCH = "pytorch2.8.0"
#: What the job installs on top of the image (the image's transformers is older than ours).
REQUIREMENTS = [
    "transformers>=5,<6",
    "peft>=0.21,<0.22",
    "trl>=1.16,<2",
    "datasets>=4",
    "accelerate>=1.10",
    "bitsandbytes>=0.45",
    "pydantic>=2.10,<3",
    "pyyaml>=6",
    "jsonschema>=4.23",
    # The built-in PII dataset's values: pinned, since its output is part of the split's sha256.
    "faker==40.63.0",
]


class DryRunComplete(Exception):  # noqa: N818 - a control-flow signal, not an error
    def __init__(self, request: dict[str, Any]) -> None:
        super().__init__("dry run stopped at CreateTrainingJob")
        self.request = request


def stage_source(dest: Path, files: tuple[Path, ...] = ()) -> Path:
    """The job's source directory: the two packages it runs, its requirements, and ``files``
    (a repository dataset file) at their paths in the repository, where the catalog finds
    them."""
    for pkg in ("config", "training"):
        shutil.copytree(ROOT / pkg, dest / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    for file in files:
        target = dest / file.resolve().relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(file, target)
    (dest / "requirements.txt").write_text("\n".join(REQUIREMENTS) + "\n")
    return dest


def dataset_inputs(
    adapter: str, env: str, *, dry_run: bool, dep: Deployment | None = None
) -> tuple[tuple[Path, ...], str | None]:
    """(repository files the job needs, the s3:// dataset for its ``dataset`` channel). The
    file is read, checked and split here (an S3 one with the caller's credentials) before any
    job exists: a bad file never reaches a training job (a dry run makes no AWS call and
    skips an S3 file)."""
    from config.dataset_files import read_rows
    from config.loader import dataset_rows
    from training.datasets.user import split_rows

    dep = dep or load_deployment(env)
    entry = dep.adapter(adapter).entry
    source = entry.dataset_file
    if source is None:
        return (), None
    if not source.startswith("s3://"):
        path, rows = dataset_rows(entry, CATALOG_PATH.parent)
        split_rows(entry.task, rows, entry.dataset_seed)
        return (path,), None
    if not dry_run:
        from training.datasets import fetch

        rows = read_rows(fetch(source), instruction=entry.profile().instruction)
        # The split the job will make: a file whose near-duplicate groups leave too few test
        # groups is refused here, not an hour into the job.
        split_rows(entry.task, rows, entry.dataset_seed)
    return (), source


def _dry_run_session(region: str, account: str, bucket: str):
    """A boto3 session whose calls are all answered here; CreateTrainingJob ends the run."""
    import boto3
    from botocore.awsrequest import AWSResponse

    ok = AWSResponse("https://dry-run.invalid", 200, {}, None)
    api_params: dict[str, dict[str, Any]] = {}
    now = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)

    def remember(params: dict[str, Any], model: Any, **_: Any) -> None:
        api_params[model.name] = dict(params)

    def answer(model: Any, **_: Any) -> tuple[Any, dict[str, Any]]:
        params = api_params.get(model.name, {})
        if model.name == "CreateTrainingJob":
            raise DryRunComplete(params)
        if model.name == "GetCallerIdentity":
            return ok, {
                "Account": account,
                "Arn": f"arn:aws:iam::{account}:user/dry-run",
                "UserId": "dry-run",
            }
        if model.name == "ListBuckets":
            return ok, {"Buckets": [{"Name": bucket, "CreationDate": now}]}
        if model.name == "GetRole":
            trust = SAGEMAKER_TRUST
            name = params.get("RoleName", "role")
            return ok, {
                "Role": {
                    "RoleName": name,
                    "Arn": f"arn:aws:iam::{account}:role/{name}",
                    "Path": "/",
                    "RoleId": "AROADRYRUNDRYRUNDRYRU",
                    "CreateDate": now,
                    "AssumeRolePolicyDocument": urllib.parse.quote(json.dumps(trust)),
                }
            }
        return ok, {}

    session = boto3.Session(
        region_name=region,
        aws_access_key_id="dry-run",
        aws_secret_access_key="dry-run",  # noqa: S106 - no call is ever sent
    )
    session.events.register("before-parameter-build.*.*", remember)
    session.events.register("before-call.*.*", answer)
    return session


def build_trainer(
    adapter: str,
    env: str,
    role: str,
    *,
    session: Any,
    bucket: str,
    source: Path,
    dataset: str | None = None,
    dep: Deployment | None = None,
):
    from sagemaker.core import image_uris
    from sagemaker.core.helper.session_helper import Session
    from sagemaker.core.training.configs import MetricDefinition
    from sagemaker.train import ModelTrainer
    from sagemaker.train.configs import Compute, InputData, SourceCode, StoppingCondition

    from training.publish import GATE_METRICS

    dep = dep or load_deployment(env)
    entry = dep.adapter(adapter).entry
    instance = dep.env.training.instance_type
    image = image_uris.retrieve(
        framework="huggingface",
        region=dep.env.region,
        version=HF_TRANSFORMERS,
        base_framework_version=HF_PYTORCH,
        instance_type=instance,
        image_scope="training",
    )
    base_data = dep.base.model_data or f"s3://{bucket}/base/{dep.base_key}/{dep.base.revision}/"
    # SageMaker parses these from the job's log into FinalMetricDataList: the record publish
    # checks the archive's manifest against (training.publish.from_job).
    metrics = [
        MetricDefinition(name=f"gate:{k}", regex=rf"GATE .*\b{k}=([-+0-9.eE]+)")
        for k in GATE_METRICS
    ]
    return ModelTrainer(
        sagemaker_session=Session(boto_session=session, default_bucket=bucket),
        role=role,
        training_image=image,
        base_job_name=f"{dep.env.prefix}-{adapter}"[:50],
        source_code=SourceCode(
            source_dir=str(source),
            requirements="requirements.txt",
            command=f"python -m training.train --adapter {adapter} --env {env}",
        ),
        compute=Compute(instance_type=instance, instance_count=1, volume_size_in_gb=100),
        stopping_condition=StoppingCondition(max_runtime_in_seconds=4 * 3600),
        hyperparameters={"adapter": adapter, "env": env, "version": entry.version},
        input_data_config=[InputData(channel_name="base", data_source=base_data)]
        + ([InputData(channel_name="dataset", data_source=dataset)] if dataset else []),
        environment={"HF_HUB_OFFLINE": "1"},
    ).with_metric_definitions(metrics)


def launch(
    adapter: str,
    env: str,
    role: str,
    *,
    dry_run: bool,
    bucket: str | None = None,
    wait: bool = True,
    inputs: tuple[tuple[Path, ...], str | None] | None = None,
    session: Any = None,
    dep: Deployment | None = None,
) -> dict[str, Any] | str | None:
    """Start the adapter's training job. A dry run returns the CreateTrainingJob request; a
    waited-for job returns the S3 URI of its output (``model.tar.gz`` holding ``NAME.tar.gz``).
    ``inputs``: what ``dataset_inputs`` returned for it, when the caller already checked it;
    ``session``: the boto3 session of a real launch (default: one in the environment's
    region); ``bucket``: default the environment's, in the account STS names; ``dep``: the
    environment as the caller loaded it (default: the repository's catalog and files)."""
    dep = dep or load_deployment(env)
    # The dataset first: a bad file is refused before any AWS call.
    files, dataset = inputs or dataset_inputs(adapter, env, dry_run=dry_run, dep=dep)
    if dry_run:
        # Nothing is sent: the environment's own account when it names one, else AWS's
        # documentation account, which only this dry run's answers ever carry.
        account = dep.env.account or DRY_RUN_ACCOUNT
        bucket = bucket or layout.artifact_bucket(
            dep.env.prefix, account, dep.env.region, dep.env.artifact_bucket
        )
        session = _dry_run_session(dep.env.region, account, bucket)
    else:
        # The account from STS, checked against the environment's (config.aws), and the
        # environment's region: every S3 URI of the job names the environment's own bucket.
        aws = AwsEnv(dep.env, session)
        bucket = bucket or aws.bucket
        session = aws.session
    with tempfile.TemporaryDirectory(prefix="job-src-") as tmp:
        source = stage_source(Path(tmp), files)
        trainer = build_trainer(
            adapter,
            env,
            role,
            session=session,
            bucket=bucket,
            source=source,
            dataset=dataset,
            dep=dep,
        )
        try:
            trainer.train(wait=wait and not dry_run, logs=wait and not dry_run)
        except DryRunComplete as done:
            return done.request
    if not wait:
        return None
    # The job the trainer just ran is the newest of its base name; its own record says where
    # the output went.
    sm = session.client("sagemaker")
    (job,) = sm.list_training_jobs(
        NameContains=trainer.base_job_name,
        SortBy="CreationTime",
        SortOrder="Descending",
        MaxResults=1,
    )["TrainingJobSummaries"]
    described = sm.describe_training_job(TrainingJobName=job["TrainingJobName"])
    if described["TrainingJobStatus"] != "Completed":
        raise RuntimeError(
            f"training job {job['TrainingJobName']} ended "
            f"{described['TrainingJobStatus']}: {described.get('FailureReason')}"
        )
    return described["ModelArtifacts"]["S3ModelArtifacts"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m training.launch", description=__doc__)
    ap.add_argument("--adapter", action="append", required=True, help="repeat for several")
    ap.add_argument("--env", required=True)
    ap.add_argument("--role", required=True, help="SageMaker execution role ARN")
    ap.add_argument("--bucket")
    ap.add_argument("--dry-run", action="store_true")
    args = ap.parse_args(argv)
    # Every adapter's dataset is read and checked before the first job starts: a bad file of
    # the third adapter must not surface after the first two have trained for an hour.
    inputs = {}
    for name in args.adapter:
        try:
            inputs[name] = dataset_inputs(name, args.env, dry_run=args.dry_run)
        except (DatasetFileError, SplitError, BotoCoreError, ClientError) as exc:
            print(f"error: adapter {name!r}: {exc}", file=sys.stderr)
            return 2
    for name in args.adapter:
        request = launch(
            name,
            args.env,
            args.role,
            dry_run=args.dry_run,
            bucket=args.bucket,
            inputs=inputs[name],
        )
        if isinstance(request, dict):
            print(json.dumps(request, indent=2, default=str))
        elif request is not None:
            print(f"{name}: {request}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
