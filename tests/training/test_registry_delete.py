"""Deleting a group's versions waits until SageMaker lists none, since a group deleted while a
version is still ``Deleting`` meets DeleteModelPackageGroup's ConflictException."""

from __future__ import annotations

import boto3
import pytest
from botocore.stub import Stubber

from training import registry

ARN = "arn:aws:sagemaker:eu-west-1:111122223333:model-package/lora-dev-x/1"
LIST = {"ModelPackageGroupName": "lora-dev-x", "ModelPackageType": "Versioned"}


def _summary() -> dict:
    return {
        "ModelPackageArn": ARN,
        "ModelPackageName": "lora-dev-x",
        "CreationTime": "2026-01-01T00:00:00Z",
        "ModelPackageStatus": "Deleting",
    }


def _client():
    sm = boto3.client(
        "sagemaker", region_name="eu-west-1", aws_access_key_id="x", aws_secret_access_key="x"
    )
    return sm, Stubber(sm)


def test_the_versions_are_waited_for_until_the_group_lists_none(monkeypatch) -> None:
    monkeypatch.setattr(registry.time, "sleep", lambda s: None)
    sm, stub = _client()
    stub.add_response("list_model_packages", {"ModelPackageSummaryList": [_summary()]}, LIST)
    stub.add_response("delete_model_package", {}, {"ModelPackageName": ARN})
    stub.add_response("list_model_packages", {"ModelPackageSummaryList": [_summary()]}, LIST)
    stub.add_response("list_model_packages", {"ModelPackageSummaryList": []}, LIST)
    with stub:
        assert registry.delete_group_versions(sm, "lora-dev-x") == 1
        stub.assert_no_pending_responses()


def test_versions_still_listed_past_the_bound_are_named(monkeypatch) -> None:
    monkeypatch.setattr(registry.time, "sleep", lambda s: None)
    monkeypatch.setattr(registry, "GROUP_EMPTY_POLLS", 2)
    sm, stub = _client()
    stub.add_response("list_model_packages", {"ModelPackageSummaryList": []}, LIST)
    for _ in range(2):
        stub.add_response("list_model_packages", {"ModelPackageSummaryList": [_summary()]}, LIST)
    with stub, pytest.raises(registry.RegistryError, match="still listed"):
        registry.delete_group_versions(sm, "lora-dev-x")
