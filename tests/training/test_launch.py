"""The launcher's CreateTrainingJob request, built by the SDK v3 and checked against the API model."""

from __future__ import annotations

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
