"""Training to publish: SFT output, archive layout, manifest hashes, loading, publish gates."""

from __future__ import annotations

import json
import shutil
import tarfile
from pathlib import Path

import pytest
from peft import PeftModel
from transformers import AutoModelForCausalLM

from config import load_catalog
from contracts.manifests import AdapterManifest
from tests.ops.test_release import job_record
from training.package import PackageError, pack, read_manifest, sha256_file, write_manifest
from training.publish import PublishError, check, publish
from training.train import train

NAME = "pii-redaction"
ENV = "local-quick"  # the small Qwen3 base (local_base): training here takes seconds


@pytest.fixture(scope="module")
def trained(local_base: Path, tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("trained")
    return train(NAME, env=ENV, base_dir=local_base, out_dir=out, max_steps=20, log=lambda _: None)


def test_archive_has_the_files_at_its_root_and_hashes_verify(trained) -> None:
    with tarfile.open(trained.archive) as tar:
        assert sorted(tar.getnames()) == sorted(
            ["adapter_config.json", "adapter_model.safetensors", "manifest.json"]
        )
    m = read_manifest(trained.archive).as_json()
    assert m["name"] == NAME and m["base"]["model_id"] == "local/qwen3-local"
    assert m["dataset"]["sha256"] and m["hyperparameters"]["rank"] == 8
    assert m["dataset"]["test"] >= 64 and m["dataset"]["validation"] >= 32
    assert set(m["eval"]) >= {
        "metric",
        "base",
        "adapter",
        "beats_base",
        "publishable",
        "bootstrap",
        "failures",
    }
    assert m["eval"]["split"] == "test" and m["eval"]["examples"] == 64
    assert "pii_leak_rate" in m["eval"]["adapter"]
    assert m["prompt"] == {
        "format": "chat",
        "system": m["hyperparameters"]["instruction"],
        "input_role": "user",
    }


def test_tampered_archive_fails_verification(trained, tmp_path) -> None:
    d = tmp_path / "x"
    with tarfile.open(trained.archive) as tar:
        tar.extractall(d, filter="data")
    (d / "adapter_config.json").write_text("{}")  # changed after the manifest was written
    pack(d, tmp_path / "tampered.tar.gz")
    with pytest.raises(PackageError, match=r"adapter_config\.json does not match"):
        read_manifest(tmp_path / "tampered.tar.gz")


def test_artifact_loads_with_peft_and_in_the_runtime(trained, local_base, tmp_path) -> None:
    d = tmp_path / "extracted"
    with tarfile.open(trained.archive) as tar:
        tar.extractall(d, filter="data")
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(local_base), d)
    assert any("lora_A" in n for n, _ in model.named_parameters())

    from contracts.settings import RuntimeSettings
    from runtime.adapters import load_adapter
    from runtime.engine import Engine

    # The runtime's own check, against the base as the server reads it (no engine started).
    base, _ = Engine(
        RuntimeSettings(model_dir=local_base, max_loras=2, work_dir=tmp_path / "w")
    ).identity()
    loaded = load_adapter(NAME, d, base)
    assert loaded.version == load_catalog().adapters[4].version
    assert loaded.rank == 8 and loaded.nbytes > 0 and loaded.prompt is not None


def _repack(trained, tmp_path: Path, **changes) -> Path:
    d = tmp_path / "re"
    with tarfile.open(trained.archive) as tar:
        tar.extractall(d, filter="data")
    m = json.loads((d / "manifest.json").read_text())
    for key, value in changes.items():
        m[key] = {**m[key], **value} if isinstance(value, dict) else value
    write_manifest(d, AdapterManifest.parse(m, "manifest.json"))
    out = tmp_path / "re.tar.gz"
    pack(d, out)
    return out


def test_a_rewritten_verdict_is_evaluated_again_and_refused(trained, local_base, tmp_path) -> None:
    # What used to pass: set the manifest's own flag and re-hash the files.
    forged = {**trained.manifest.eval, "beats_base": True, "publishable": True, "failures": []}
    archive = _repack(trained, tmp_path, eval=forged)
    assert read_manifest(archive).eval["publishable"] is True
    with pytest.raises(PublishError, match="not publishable"):
        check(archive, NAME, ENV, base_dir=local_base, log=lambda _: None)


def test_a_manifest_with_its_own_system_turn_is_refused(trained, local_base, tmp_path) -> None:
    """The base is prompted with the entry's instruction: a manifest that brought a prompt of
    its own could handicap the base it is compared with."""
    prompt = {**trained.manifest.prompt.as_json(), "system": "Answer with one word."}
    archive = _repack(trained, tmp_path, prompt=prompt)
    with pytest.raises(PublishError, match="not the entry's instruction"):
        check(archive, NAME, ENV, base_dir=local_base, log=lambda _: None)


def test_a_manifest_whose_test_split_cannot_be_reproduced_is_refused(
    trained, local_base, tmp_path
) -> None:
    dataset = {**trained.manifest.dataset, "sha256": "0" * 64}
    archive = _repack(trained, tmp_path, dataset=dataset)
    with pytest.raises(PublishError, match="cannot be reproduced"):
        check(archive, NAME, ENV, base_dir=local_base, log=lambda _: None)


@pytest.mark.parametrize(
    ("field", "value"), [("seed", 7), ("size", 60), ("generator", "sales_json")]
)
def test_a_manifest_trained_on_another_dataset_than_the_entrys_is_refused(
    trained, local_base, tmp_path, field, value
) -> None:
    """A smaller or reseeded split (an easier test part) is not the entry's dataset."""
    dataset = {**trained.manifest.dataset, field: value}
    archive = _repack(trained, tmp_path, dataset=dataset)
    with pytest.raises(PublishError, match=f"another dataset than the entry's \\({field}"):
        check(archive, NAME, ENV, base_dir=local_base, log=lambda _: None)


def test_every_file_of_an_archive_must_be_listed_and_hashed(trained, tmp_path) -> None:
    d = tmp_path / "x"
    with tarfile.open(trained.archive) as tar:
        tar.extractall(d, filter="data")
    manifest = json.loads((d / "manifest.json").read_text())
    (d / "manifest.json").write_text(
        json.dumps({k: v for k, v in manifest.items() if k != "files"})
    )
    pack(d, tmp_path / "unlisted.tar.gz")
    with pytest.raises(PackageError, match="lists no files"):
        read_manifest(tmp_path / "unlisted.tar.gz")
    (d / "manifest.json").write_text(json.dumps(manifest))
    with tarfile.open(tmp_path / "extra.tar.gz", "w:gz") as tar:
        for name in ("adapter_config.json", "adapter_model.safetensors", "manifest.json"):
            tar.add(d / name, arcname=name)
        (d / "tokenizer.json").write_text("{}")
        tar.add(d / "tokenizer.json", arcname="tokenizer.json")
    with pytest.raises(PackageError, match=r"does not list \['tokenizer.json'\]"):
        read_manifest(tmp_path / "extra.tar.gz")


def test_without_a_base_or_a_training_job_there_is_no_evidence(trained, monkeypatch) -> None:
    monkeypatch.setattr("training.publish.local_base_dir", lambda dep: None)
    with pytest.raises(PublishError, match="manifest's own verdict is not evidence"):
        check(trained.archive, NAME, ENV)


def _job(trained, **metrics) -> dict:
    ev = trained.manifest.eval
    values = {
        "adapter_score": ev["adapter"]["score"],
        "base_score": ev["base"]["score"],
        "ci_low": ev["bootstrap"]["ci_low"],
        "publishable": 1.0,
        **metrics,
    }
    return job_record(
        "lora-dev-pii-1",
        "eu-west-1",
        "lora-dev-artifacts-111122223333-eu-west-1",
        HyperParameters={"adapter": NAME, "version": trained.manifest.version},
        FinalMetricDataList=[{"MetricName": f"gate:{k}", "Value": v} for k, v in values.items()],
    )


def _as_job_output(trained, tmp_path: Path, ci_low: float = 0.25) -> Path:
    """The archive as a SageMaker job would have written it, with a passing verdict."""
    ev = {
        **trained.manifest.eval,
        "publishable": True,
        "failures": [],
        "bootstrap": {**trained.manifest.eval["bootstrap"], "ci_low": ci_low},
    }
    return _repack(trained, tmp_path, eval=ev, training={"job_name": "lora-dev-pii-1"})


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"publishable": 0.0}, "not publishable"),
        ({"adapter_score": 0.999}, "not what training job"),
        ({"TrainingJobStatus": "Failed"}, "is Failed"),
        ({"drop": "ci_low"}, "no gate metrics"),
    ],
)
def test_a_training_jobs_recorded_metrics_decide(
    trained, tmp_path, monkeypatch, change, message
) -> None:
    monkeypatch.setattr("training.publish.local_base_dir", lambda dep: None)
    archive = _as_job_output(trained, tmp_path)
    described = _job(trained, ci_low=0.25)
    if "TrainingJobStatus" in change:
        described.update(change)
    elif "drop" in change:
        described["FinalMetricDataList"] = [
            m
            for m in described["FinalMetricDataList"]
            if m["MetricName"] != f"gate:{change['drop']}"
        ]
    else:
        described = _job(trained, ci_low=0.25, **change)
    wrote = _wrote(archive)
    with pytest.raises(PublishError, match=message):
        check(archive, NAME, ENV, describe_job=lambda job, region: described, job_archive=wrote)
    # The job's own record, agreeing with the archive, is evidence.
    good = _job(trained, ci_low=0.25)
    verified = check(archive, NAME, ENV, describe_job=lambda job, region: good, job_archive=wrote)
    assert verified.eval is not None and verified.eval["publishable"]


def test_publishing_a_shadow_canary_keeps_its_block_as_written(
    trained, tmp_path, monkeypatch
) -> None:
    """The canary block gets the archive's hashes and keeps only what the entry says: its
    shadow share and margins, no defaults written in (found by CI: an empty ``margins`` made
    the catalog edit fail)."""
    from config.loader import CATALOG_PATH
    from config.writer import update_adapter

    monkeypatch.setattr("training.publish.local_base_dir", lambda dep: None)
    catalog = tmp_path / "adapters.yaml"
    shutil.copy(CATALOG_PATH, catalog)
    block = {"version": "1.1.0", "shadow": 0.2, "margins": {"pii_leaked": 0.01}}
    update_adapter(NAME, {"canary": block}, catalog)
    archive = _as_job_output(trained, tmp_path)
    work = tmp_path / "canary"
    with tarfile.open(archive) as tar:
        tar.extractall(work, filter="data")
    write_manifest(work, read_manifest(archive).model_copy(update={"version": "1.1.0"}))
    pack(work, archive)
    job = _job(trained, ci_low=0.25)
    job["HyperParameters"]["version"] = "1.1.0"
    publish(
        archive,
        NAME,
        ENV,
        bucket="my-bucket",
        s3=FakeS3(),
        catalog=catalog,
        describe_job=lambda name, region: job,
        job_archive=_wrote(archive),
        canary=True,
    )
    entry = next(a for a in load_catalog(catalog).adapters if a.name == NAME)
    assert entry.canary is not None and entry.canary.sha256 == sha256_file(archive)
    assert (entry.canary.shadow, entry.canary.margins) == (0.2, {"pii_leaked": 0.01})
    assert entry.canary.model_fields_set >= {"version", "shadow", "margins", "sha256"}
    assert not entry.canary.model_fields_set & {"weight", "min_pairs", "promote", "confidence"}


def test_an_empty_mapping_is_written_as_one(tmp_path) -> None:
    from config.loader import CATALOG_PATH
    from config.writer import update_adapter

    catalog = tmp_path / "adapters.yaml"
    shutil.copy(CATALOG_PATH, catalog)
    update_adapter(NAME, {"canary": {"version": "1.1.0", "weight": 5, "margins": {}}}, catalog)
    entry = next(a for a in load_catalog(catalog).adapters if a.name == NAME)
    assert entry.canary is not None and entry.canary.margins == {}


def _wrote(archive: Path):
    """A job output whose adapter archive is ``archive`` (job_archive_sha256's answer)."""
    digest = sha256_file(archive)
    return lambda uri, adapter, region: digest


def test_an_archive_that_is_not_the_jobs_own_output_is_refused(
    trained, tmp_path, monkeypatch
) -> None:
    """A passing manifest copied onto other weights agrees with the job's figures; the
    archive at the job's ModelArtifacts is what it is compared with."""
    monkeypatch.setattr("training.publish.local_base_dir", lambda dep: None)
    archive = _as_job_output(trained, tmp_path)
    seen = []

    def at(uri, adapter, region):
        seen.append(uri)
        return "0" * 64  # other weights than the archive given

    with pytest.raises(PublishError, match=r"is not the pii-redaction\.tar\.gz that training job"):
        check(
            archive,
            NAME,
            ENV,
            describe_job=lambda job, region: _job(trained, ci_low=0.25),
            job_archive=at,
        )
    assert seen == [
        "s3://lora-dev-artifacts-111122223333-eu-west-1/jobs/lora-dev-pii-1/output/model.tar.gz"
    ]


def test_publish_refuses_a_base_mismatch(trained) -> None:
    with pytest.raises(PublishError, match="base mismatch"):
        check(trained.archive, NAME, "dev")  # dev serves Qwen3-4B, not the local base


def test_publish_refuses_a_version_mismatch(trained, tmp_path) -> None:
    with pytest.raises(PublishError, match="version"):
        check(_repack(trained, tmp_path, version="9.9.9"), NAME, ENV)


class FakeS3:
    """put_object and head_object over a dict, with S3's 404 for a missing key."""

    def __init__(self) -> None:
        self.calls: list[dict] = []
        self.objects: dict[tuple[str, str], dict] = {}

    def put_object(self, **kw) -> dict:
        kw["Body"] = kw["Body"].read()
        self.calls.append(kw)
        self.objects[kw["Bucket"], kw["Key"]] = kw
        return {}

    def head_object(self, Bucket: str, Key: str) -> dict:  # noqa: N803 - boto3's names
        from botocore.exceptions import ClientError

        if (Bucket, Key) not in self.objects:
            raise ClientError({"Error": {"Code": "404", "Message": "Not Found"}}, "HeadObject")
        return {"Metadata": self.objects[Bucket, Key].get("Metadata", {})}


def test_publish_uploads_and_records_artifact_and_sha_in_the_catalog(
    trained, tmp_path, monkeypatch
) -> None:
    from config.loader import CATALOG_PATH

    monkeypatch.setattr("training.publish.local_base_dir", lambda dep: None)
    archive = _as_job_output(trained, tmp_path)
    digest = sha256_file(archive)
    job = _job(trained, ci_low=0.25)
    catalog = tmp_path / "adapters.yaml"
    shutil.copy(CATALOG_PATH, catalog)
    s3 = FakeS3()
    kw = {
        "bucket": "my-bucket",
        "s3": s3,
        "catalog": catalog,
        "describe_job": lambda name, region: job,
        "job_archive": _wrote(archive),
    }
    uri = publish(archive, NAME, ENV, **kw)
    assert uri == f"s3://my-bucket/adapters/{NAME}/1.0.0/adapter.tar.gz"
    assert s3.calls[0]["ServerSideEncryption"] == "aws:kms"
    entry = next(a for a in load_catalog(catalog).adapters if a.name == NAME)
    assert entry.artifact == uri and entry.sha256 == digest
    # The weights' digest too: the router compares it with the artifact each answer reports.
    weights = read_manifest(archive).files["adapter_model.safetensors"]
    assert entry.weights_sha256 == weights
    # Gated on a base served in place of the entry's own (qwen3-local for qwen3-4b): that
    # proves nothing about qwen3-4b's revision, so none is recorded.
    assert entry.gated_base_revision is None
    text = catalog.read_text()
    assert "# The adapter catalog" in text  # comments survive the write-back
    publish(archive, NAME, ENV, **kw)
    assert catalog.read_text().count("artifact: s3://my-bucket") == 1  # idempotent
    assert len(s3.calls) == 1  # the same archive is not uploaded again
    # Other weights under a published version never replace it: live copies point at the key.
    s3.objects["my-bucket", s3.calls[0]["Key"]]["Metadata"] = {"sha256": "f" * 64}
    with pytest.raises(PublishError, match="never overwritten"):
        publish(archive, NAME, ENV, **kw)
