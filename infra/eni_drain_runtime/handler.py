"""The ENI drain's two handlers for aws-cdk-lib's custom-resource provider framework.

SageMaker removes an endpoint's VPC network interfaces *after* ``DeleteEndpoint`` returns, and
needs the endpoint's execution role to do it (botocore's SageMaker model, DeleteEndpoint: "Do not
delete or revoke the permissions for your ExecutionRoleArn, otherwise SageMaker cannot delete
these resources"). CloudFormation's ``AWS::SageMaker::Endpoint`` does not wait for them
(aws-cloudformation/cloudformation-coverage-roadmap#1327). The serving stack places this resource
between the endpoint and the role: on delete it reports done only when no interface is left in
the endpoint's security groups, so the role outlives the clean-up and the network stack's
security groups and subnets delete without a dependency violation.

Create and update change nothing. Runs outside the VPC (it calls the EC2 API); boto3 is the
Lambda runtime's own.
"""

from __future__ import annotations

import logging
from typing import Any

import boto3

LOG = logging.getLogger()
LOG.setLevel(logging.INFO)


def on_event(event: dict[str, Any], _context: object = None) -> dict[str, Any]:
    """Names the resource on create; a delete is finished by ``is_complete``."""
    if event["RequestType"] == "Create":
        groups = "-".join(event["ResourceProperties"]["SecurityGroupIds"])
        return {"PhysicalResourceId": f"eni-drain-{groups}"}
    return {"PhysicalResourceId": event["PhysicalResourceId"]}


def is_complete(event: dict[str, Any], _context: object = None, *, ec2=None) -> dict[str, bool]:
    """Done at once for create and update; for delete, done when the groups hold no interface.

    The framework calls again after its query interval while this answers False, and fails the
    delete with its own timeout message when the total timeout passes (the stack is then
    ``DELETE_FAILED`` with the role still in place, so a retried delete finishes the job)."""
    if event["RequestType"] != "Delete":
        return {"IsComplete": True}
    groups = list(event["ResourceProperties"]["SecurityGroupIds"])
    left = interfaces_in(ec2 or boto3.client("ec2"), groups)
    if left:
        LOG.info("waiting for SageMaker to remove %d network interface(s): %s", len(left), left)
        return {"IsComplete": False}
    LOG.info("no network interface left in %s", groups)
    return {"IsComplete": True}


def interfaces_in(ec2: Any, groups: list[str]) -> list[str]:
    """Every interface (any status) that any of ``groups`` is attached to, as ``ID (status)``.

    DescribeNetworkInterfaces' ``group-id`` filter (EC2 API reference); a group that no longer
    exists matches nothing."""
    pages = ec2.get_paginator("describe_network_interfaces").paginate(
        Filters=[{"Name": "group-id", "Values": groups}]
    )
    return [
        f"{eni['NetworkInterfaceId']} ({eni.get('Status', 'unknown')})"
        for page in pages
        for eni in page["NetworkInterfaces"]
    ]
