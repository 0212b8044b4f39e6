"""Training to publish: SFT output, archive layout, manifest hashes, loading, publish gates."""

from __future__ import annotations

import json
import shutil
import tarfile
from pathlib import Path

import pytest
import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM

from config import load_catalog
from training.package import PackageError, pack, read_manifest, write_manifest
from training.publish import PublishError, check, publish
from training.train import train

NAME = "pii-redaction"


@pytest.fixture(scope="module")
def trained(local_base: Path, tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("trained")
    return train(NAME, env="local", base_dir=local_base, out_dir=out, max_steps=20,
                 dataset_size=160, log=lambda _: None)  # fmt: skip


def test_archive_has_the_files_at_its_root_and_hashes_verify(trained) -> None:
    with tarfile.open(trained.archive) as tar:
        assert sorted(tar.getnames()) == sorted(
            ["adapter_config.json", "adapter_model.safetensors", "manifest.json"]
        )
    m = read_manifest(trained.archive)
    assert m["name"] == NAME and m["base"]["model_id"] == "local/qwen3-local"
    assert m["dataset"]["sha256"] and m["hyperparameters"]["rank"] == 8
    assert set(m["eval"]) >= {"metric", "base", "adapter", "beats_base"}
    assert "pii_leak_rate" in m["eval"]["adapter"]


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

    from runtime.engine import Engine
    from runtime.settings import Settings

    eng = Engine(Settings(model_dir=local_base, max_loras=2, work_dir=tmp_path / "w"))
    eng.load()
    loaded = eng.cache.validate(NAME, d)
    assert loaded.version == load_catalog().adapters[4].version
    assert loaded.rank == 8 and torch.is_tensor(next(iter(loaded.weights.values()))[0])


def _repack(trained, tmp_path: Path, **changes) -> Path:
    d = tmp_path / "re"
    with tarfile.open(trained.archive) as tar:
        tar.extractall(d, filter="data")
    m = json.loads((d / "manifest.json").read_text())
    for key, value in changes.items():
        m[key] = {**m[key], **value} if isinstance(value, dict) else value
    write_manifest(d, {k: v for k, v in m.items() if k != "files"})
    out = tmp_path / "re.tar.gz"
    pack(d, out)
    return out


def test_publish_refuses_an_adapter_that_does_not_beat_its_base(trained, tmp_path) -> None:
    archive = _repack(trained, tmp_path, eval={"beats_base": False})
    with pytest.raises(PublishError, match="does not beat its base"):
        check(archive, NAME, "local")


def test_publish_refuses_a_base_mismatch(trained) -> None:
    with pytest.raises(PublishError, match="base mismatch"):
        check(trained.archive, NAME, "dev")  # dev serves Qwen3-4B, not the local base


def test_publish_refuses_a_version_mismatch(trained, tmp_path) -> None:
    with pytest.raises(PublishError, match="version"):
        check(_repack(trained, tmp_path, version="9.9.9"), NAME, "local")


class FakeS3:
    def __init__(self) -> None:
        self.calls: list[dict] = []

    def put_object(self, **kw) -> dict:
        kw["Body"] = kw["Body"].read()
        self.calls.append(kw)
        return {}


def test_publish_uploads_and_records_artifact_and_sha_in_the_catalog(trained, tmp_path) -> None:
    if not trained.manifest["eval"]["beats_base"]:
        pytest.fail(f"the trained adapter should beat its base: {trained.manifest['eval']}")
    from config.loader import CATALOG_PATH

    catalog = tmp_path / "adapters.yaml"
    shutil.copy(CATALOG_PATH, catalog)
    s3 = FakeS3()
    uri = publish(trained.archive, NAME, "local", bucket="my-bucket", s3=s3, catalog=catalog)
    assert uri == f"s3://my-bucket/adapters/{NAME}/1.0.0/adapter.tar.gz"
    assert s3.calls[0]["ServerSideEncryption"] == "aws:kms"
    entry = next(a for a in load_catalog(catalog).adapters if a.name == NAME)
    assert entry.artifact == uri and entry.sha256 == trained.sha256
    text = catalog.read_text()
    assert "# The adapter catalog" in text  # comments survive the write-back
    publish(trained.archive, NAME, "local", bucket="my-bucket", s3=s3, catalog=catalog)
    assert catalog.read_text().count("artifact: s3://my-bucket") == 1  # idempotent
