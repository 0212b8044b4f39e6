"""SageMaker's security group reaches S3 through the gateway endpoint, by the S3 prefix list."""

from __future__ import annotations

import json

import pytest

from tests.infra.conftest import resolve, resources

pytestmark = pytest.mark.synth


def test_sagemaker_egress_reaches_s3_by_its_prefix_list_on_443(dev_templates) -> None:
    net = dev_templates["lora-dev-network"]
    groups = resources(net, "AWS::EC2::SecurityGroup")
    (sm_id,) = [k for k, g in groups.items() if g["Properties"]["GroupDescription"] ==
                "SageMaker endpoint"]  # fmt: skip
    egress = [r["Properties"] for r in resources(net, "AWS::EC2::SecurityGroupEgress").values()
              if r["Properties"]["GroupId"] == {"Fn::GetAtt": [sm_id, "GroupId"]}]  # fmt: skip
    to_s3 = [e for e in egress if "DestinationPrefixListId" in e]
    assert len(to_s3) == 1
    rule = to_s3[0]
    assert (rule["IpProtocol"], rule["FromPort"], rule["ToPort"]) == ("tcp", 443, 443)
    # The id comes from the lookup of the region's AWS-managed S3 list.
    target = rule["DestinationPrefixListId"]["Fn::GetAtt"][0]
    lookup = net["Resources"][target]
    assert lookup["Type"] == "Custom::AWS"
    create = json.loads(resolve(lookup["Properties"]["Create"]))
    assert create["action"] == "describeManagedPrefixLists"
    assert create["parameters"]["Filters"] == [
        {"Name": "prefix-list-name", "Values": ["com.amazonaws.us-east-1.s3"]}
    ]
    # ... and S3 has its gateway endpoint in this VPC.
    endpoints = resources(net, "AWS::EC2::VPCEndpoint").values()
    assert any(e["Properties"].get("VpcEndpointType", "Gateway") == "Gateway" for e in endpoints)
