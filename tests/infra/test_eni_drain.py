"""The ENI drain's handlers against a botocore Stubber (EC2's own API model checks every call
and answer), as the provider framework calls them."""

from __future__ import annotations

import boto3
import pytest
from botocore.stub import Stubber

from infra.eni_drain_runtime import handler

GROUPS = ["sg-0123456789abcdef0"]


def _event(kind: str) -> dict:
    event = {"RequestType": kind, "ResourceProperties": {"SecurityGroupIds": GROUPS}}
    if kind != "Create":
        event["PhysicalResourceId"] = "eni-drain-sg-0123456789abcdef0"
    return event


def _ec2_answering(*pages: list[dict]):
    ec2 = boto3.client(
        "ec2", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
    )
    stub = Stubber(ec2)
    for interfaces in pages:
        stub.add_response(
            "describe_network_interfaces",
            {"NetworkInterfaces": interfaces},
            {"Filters": [{"Name": "group-id", "Values": GROUPS}]},
        )
    stub.activate()
    return ec2, stub


def test_create_names_the_resource_and_update_keeps_the_name() -> None:
    assert handler.on_event(_event("Create")) == {
        "PhysicalResourceId": "eni-drain-sg-0123456789abcdef0"
    }
    assert handler.on_event(_event("Update"))["PhysicalResourceId"] == (
        "eni-drain-sg-0123456789abcdef0"
    )


@pytest.mark.parametrize("kind", ["Create", "Update"])
def test_create_and_update_finish_at_once_without_calling_ec2(kind: str) -> None:
    ec2, stub = _ec2_answering()
    assert handler.is_complete(_event(kind), ec2=ec2) == {"IsComplete": True}
    stub.assert_no_pending_responses()


def test_delete_waits_while_sagemaker_still_holds_interfaces_in_the_group() -> None:
    eni = {
        "NetworkInterfaceId": "eni-0a1b2c3d4e5f60718",
        "Status": "in-use",
        "RequesterManaged": True,
    }
    ec2, stub = _ec2_answering([eni], [{**eni, "Status": "available"}], [])
    assert handler.is_complete(_event("Delete"), ec2=ec2) == {"IsComplete": False}
    assert handler.is_complete(_event("Delete"), ec2=ec2) == {"IsComplete": False}
    assert handler.is_complete(_event("Delete"), ec2=ec2) == {"IsComplete": True}
    stub.assert_no_pending_responses()


def test_the_waiting_names_each_interface_and_its_status() -> None:
    enis = [
        {"NetworkInterfaceId": "eni-0a1b2c3d4e5f60718", "Status": "in-use"},
        {"NetworkInterfaceId": "eni-0f1e2d3c4b5a69788", "Status": "detaching"},
    ]
    ec2, _ = _ec2_answering(enis)
    assert handler.interfaces_in(ec2, GROUPS) == [
        "eni-0a1b2c3d4e5f60718 (in-use)",
        "eni-0f1e2d3c4b5a69788 (detaching)",
    ]
