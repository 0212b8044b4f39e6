"""SageMaker's security group reaches S3 through the gateway endpoint, by the S3 prefix list."""

from __future__ import annotations

import json

import pytest

from tests.infra.conftest import resolve, resources

pytestmark = pytest.mark.synth


def test_sagemaker_egress_reaches_s3_by_its_prefix_list_on_443(dev_templates) -> None:
    net = dev_templates["lora-dev-network"]
    groups = resources(net, "AWS::EC2::SecurityGroup")
    (sm_id,) = [
        k for k, g in groups.items() if g["Properties"]["GroupDescription"] == "SageMaker endpoint"
    ]
    egress = [
        r["Properties"]
        for r in resources(net, "AWS::EC2::SecurityGroupEgress").values()
        if r["Properties"]["GroupId"] == {"Fn::GetAtt": [sm_id, "GroupId"]}
    ]
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


def test_interface_endpoints_admit_only_the_router_and_sagemaker_groups(dev_templates) -> None:
    """``add_interface_endpoint`` opens 443 to the whole VPC CIDR unless ``open=False``."""
    net = dev_templates["lora-dev-network"]
    groups = resources(net, "AWS::EC2::SecurityGroup")
    (endpoints_id,) = [
        k
        for k, g in groups.items()
        if g["Properties"]["GroupDescription"] == "VPC interface endpoints"
    ]
    inline = groups[endpoints_id]["Properties"].get("SecurityGroupIngress") or []
    assert not [r for r in inline if "CidrIp" in r], inline
    ingress = [
        r["Properties"]
        for r in resources(net, "AWS::EC2::SecurityGroupIngress").values()
        if r["Properties"]["GroupId"] == {"Fn::GetAtt": [endpoints_id, "GroupId"]}
    ]
    assert ingress and all("SourceSecurityGroupId" in r and "CidrIp" not in r for r in ingress)
    sources = {r["SourceSecurityGroupId"]["Fn::GetAtt"][0] for r in ingress}
    described = {groups[s]["Properties"]["GroupDescription"] for s in sources}
    assert described == {"router Lambda", "SageMaker endpoint"}


def test_the_s3_gateway_endpoint_reaches_only_the_model_buckets_and_ecr_layers(
    dev_templates,
) -> None:
    net = dev_templates["lora-dev-network"]
    (gateway,) = [
        e["Properties"]
        for e in resources(net, "AWS::EC2::VPCEndpoint").values()
        if e["Properties"].get("VpcEndpointType", "Gateway") == "Gateway"
    ]
    document = gateway["PolicyDocument"]
    allowed = {
        resolve(r)
        for s in document["Statement"]
        for r in (s["Resource"] if isinstance(s["Resource"], list) else [s["Resource"]])
    }
    assert allowed == {
        "arn:aws:s3:::lora-dev-artifacts-123456789012-us-east-1",
        "arn:aws:s3:::lora-dev-artifacts-123456789012-us-east-1/*",
        # ECR's user guide: the layers' bucket, arn:aws:s3:::prod-region-starport-layer-bucket/*
        "arn:aws:s3:::prod-us-east-1-starport-layer-bucket/*",
    }
    actions = {
        a
        for s in document["Statement"]
        for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])
    }
    assert actions == {"s3:GetObject", "s3:ListBucket"}
