"""The launcher's CreateTrainingJob request, built by the SDK v3 and checked against the API model."""

from __future__ import annotations

import dataclasses
import json

import botocore.session
import pytest
from botocore.validate import validate_parameters

from training.launch import launch

ROLE = "arn:aws:iam::123456789012:role/lora-training"


@pytest.fixture(scope="module")
def request_() -> dict:
    req = launch("sales-json", "dev", ROLE, dry_run=True)
    assert req is not None
    return req


def test_request_is_valid_for_the_real_api_model(request_) -> None:
    model = botocore.session.get_session().get_service_model("sagemaker")
    validate_parameters(request_, model.operation_model("CreateTrainingJob").input_shape)


def test_request_shape(request_) -> None:
    assert request_["RoleArn"] == ROLE
    assert "huggingface-pytorch-training" in request_["AlgorithmSpecification"]["TrainingImage"]
    assert request_["HyperParameters"]["adapter"] == "sales-json"
    assert request_["ResourceConfig"]["InstanceType"] == "ml.g5.2xlarge"
    channels = {c["ChannelName"]: c for c in request_["InputDataConfig"]}
    base = channels["base"]["DataSource"]["S3DataSource"]["S3Uri"]
    assert base.endswith("/base/qwen3-4b/1cfa9a7208912126459214e8b04321603b3df60c/")
    assert request_["OutputDataConfig"]["S3OutputPath"].startswith("s3://lora-dev-artifacts-")
    assert request_["TrainingJobName"].startswith("lora-dev-sales-json")


def test_a_repository_dataset_travels_with_the_job_source(tmp_path) -> None:
    from training.launch import dataset_inputs, stage_source

    files, channel = dataset_inputs("support-triage", "dev", dry_run=True)
    assert channel is None and files[0].name == "support-triage.jsonl"
    staged = stage_source(tmp_path, files)
    assert (staged / "examples" / "support-triage.jsonl").read_bytes() == files[0].read_bytes()


S3_DATASET = "s3://team-data/support/tickets.jsonl"


def _s3_dataset(monkeypatch, file) -> str:
    """support-triage names an S3 object, which the download returns as ``file``."""
    from config.schema import AdapterEntry

    real = AdapterEntry.dataset_file
    monkeypatch.setattr(
        AdapterEntry,
        "dataset_file",
        property(lambda self: S3_DATASET if self.name == "support-triage" else real.fget(self)),
    )
    monkeypatch.setattr("training.datasets.fetch", lambda u: file)
    return S3_DATASET


@pytest.fixture
def bad_s3_dataset(tmp_path, monkeypatch) -> str:
    """support-triage names an S3 file whose first record has no output."""
    bad = tmp_path / "tickets.jsonl"
    bad.write_text('{"input": "hello"}\n')
    return _s3_dataset(monkeypatch, bad)


def test_an_s3_dataset_is_checked_before_any_job_and_mounted_as_a_channel(bad_s3_dataset) -> None:
    from config.dataset_files import DatasetFileError
    from training import launch as launcher

    with pytest.raises(DatasetFileError, match="line 1: field 'output': missing"):
        launcher.launch("support-triage", "dev", ROLE, dry_run=False)
    req = launcher.launch("support-triage", "dev", ROLE, dry_run=True)
    channels = {c["ChannelName"]: c for c in req["InputDataConfig"]}
    assert channels["dataset"]["DataSource"]["S3DataSource"]["S3Uri"] == bad_s3_dataset


def test_several_adapters_have_every_dataset_checked_before_the_first_job(
    bad_s3_dataset, monkeypatch, capsys
) -> None:
    """The bad file is the second adapter's: no job starts at all, and the error names it."""
    from training import launch as launcher

    started: list[str] = []
    monkeypatch.setattr(launcher, "launch", lambda name, *a, **k: started.append(name))
    argv = ["--env", "dev", "--role", ROLE, "--adapter", "sales-json"]
    assert launcher.main([*argv, "--adapter", "support-triage"]) == 2
    assert started == []
    err = capsys.readouterr().err
    assert "adapter 'support-triage'" in err and "line 1: field 'output': missing" in err


def test_a_file_whose_split_would_fail_starts_no_job(tmp_path, monkeypatch, capsys) -> None:
    """Every record passes its checks, but they are slot fills of one sentence: one
    near-duplicate group, and no test part of ten groups. Refused before a job, not in it."""
    from training import launch as launcher

    one = tmp_path / "tickets.jsonl"
    records = [
        {"input": f"Order {i} for Alice has shipped to the main warehouse today.", "output": "ok"}
        for i in range(60)
    ]
    one.write_text("".join(json.dumps(r) + "\n" for r in records))
    _s3_dataset(monkeypatch, one)
    started: list[str] = []
    monkeypatch.setattr(launcher, "launch", lambda name, *a, **k: started.append(name))
    assert launcher.main(["--env", "dev", "--role", ROLE, "--adapter", "support-triage"]) == 2
    assert started == []
    assert "near-duplicate groups leave" in capsys.readouterr().err


def _s3_uris(value) -> list[str]:
    if isinstance(value, dict):
        return [u for v in value.values() for u in _s3_uris(v)]
    if isinstance(value, list):
        return [u for v in value for u in _s3_uris(v)]
    return [value] if isinstance(value, str) and value.startswith("s3://") else []


def test_a_real_launch_uses_the_bucket_of_the_account_sts_names() -> None:
    """A launch that is not a dry run takes the account from STS: every S3 URI of the job, and
    every bucket the SDK touches, is the environment's own bucket in that account (the old
    default named AWS's documentation account 123456789012, whose bucket anyone may own)."""
    from training.launch import _dry_run_session

    account = "111122223333"
    session = _dry_run_session("us-east-1", account, "unused")
    buckets: list[str] = []
    session.events.register(
        "before-parameter-build.s3.*", lambda params, **_: buckets.append(params.get("Bucket"))
    )
    role = f"arn:aws:iam::{account}:role/lora-training"
    request = launch("sales-json", "dev", role, dry_run=False, wait=False, session=session)
    own = f"lora-dev-artifacts-{account}-us-east-1"
    uris = _s3_uris(request)
    assert uris and all(u.startswith(f"s3://{own}/") for u in uris), uris
    assert set(filter(None, buckets)) <= {own}, buckets
    assert "123456789012" not in json.dumps(request, default=str)


def test_a_real_launch_refuses_credentials_of_another_account(tmp_path, monkeypatch) -> None:
    from config.aws import AccountMismatchError
    from config.loader import load_deployment as real_load
    from training import launch as module
    from training.launch import _dry_run_session

    dep = real_load("dev")
    named = dataclasses.replace(dep, env=dep.env.model_copy(update={"account": "444455556666"}))
    monkeypatch.setattr(module, "load_deployment", lambda _env: named)
    session = _dry_run_session("us-east-1", "111122223333", "unused")
    with pytest.raises(AccountMismatchError, match=r"444455556666.*111122223333"):
        launch("sales-json", "dev", ROLE, dry_run=False, wait=False, session=session)
