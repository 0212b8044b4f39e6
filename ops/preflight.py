"""``make preflight ENV=NAME`` (``python -m ops.preflight --env NAME``): what a first deploy needs
from the account, checked before anything is created. It changes nothing.

A fresh account fails a first deploy in ways no offline check sees:

- the credentials are another account's, or the environment names none (``account`` pins the
  account its stacks, AZs and quotas are planned for);
- the CDK bootstrap stack is missing or too old (``cdk deploy`` needs its bucket and roles);
- SageMaker's per-account endpoint quota for the instance type is 0 on most new accounts, and a
  rolling update needs ``max_instance_count`` instances (Service Quotas: ``<type> for endpoint
  usage``), summed over the environments that share the account;
- the smoke check calls every adapter as the releasing principal, which must be one of the
  environment's ``router.operators`` (a role by name: ``contracts.principals``);
- Lambda keeps 100 executions of the account unreserved, and new accounts start with a
  reduced concurrency quota, so the router's ``reserved_concurrency`` may not fit;
- a release that trains needs ``INSTANCE for training job usage`` of at least 1, 0 on most
  new accounts.

Quotas still at their default value are not always returned by ``ListServiceQuotas``
(Service Quotas API reference: "If the applied quota value is not available for a quota, the
quota is not retrieved"); those are read from ``ListAWSDefaultServiceQuotas``, said so, and
never refused for being unlisted.

Each check answers in a sentence with the value found and the value needed. ``make release``
runs the same checks first.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import Any

from config import ENVIRONMENTS_DIR, Deployment, load_deployment
from config.aws import AwsEnv
from config.layout import bootstrap_parameter
from config.quotas import endpoint_instances_needed, quota_name, training_quota_name
from contracts.principals import caller_keys, match_key

#: The bootstrap version ``cdk deploy`` of aws-cdk-lib 2.x asks for (its assets' roles and the
#: lookup role; the CLI refuses an older one, "This CDK deployment requires bootstrap stack
#: version '6'").
MIN_BOOTSTRAP_VERSION = 6
SAGEMAKER = "sagemaker"
#: Lambda: "You can reserve up to the Unreserved account concurrency value minus 100 for
#: functions that don't have reserved concurrency" (Lambda developer guide, "Configuring
#: reserved concurrency").
LAMBDA_UNRESERVED_FLOOR = 100


@dataclass(frozen=True)
class Finding:
    check: str
    ok: bool
    message: str

    def line(self) -> str:
        return f"{'ok  ' if self.ok else 'FAIL'} {self.check}: {self.message}"


def _find_code(client: Any, operation: str, name: str) -> str | None:
    for page in client.get_paginator(operation).paginate(ServiceCode=SAGEMAKER):
        for quota in page.get("Quotas", []):
            if quota.get("QuotaName") == name:
                return quota["QuotaCode"]
    return None


def quota_value(client: Any, quota_name: str) -> tuple[str, float, bool] | None:
    """SageMaker's quota named ``quota_name``: (code, value, whether it is AWS's default value
    because the account has no applied one); None when Service Quotas knows no such quota.

    ``ListServiceQuotas`` leaves out quotas whose applied value is not available, and
    ``GetServiceQuota`` answers ``NoSuchResourceException`` for them (botocore's
    service-quotas model); the default is then ``GetAWSDefaultServiceQuota``'s."""
    code = _find_code(client, "list_service_quotas", quota_name)
    if code is not None:
        try:
            got = client.get_service_quota(ServiceCode=SAGEMAKER, QuotaCode=code)
            return code, float(got["Quota"]["Value"]), False
        except client.exceptions.NoSuchResourceException:
            pass
    code = code or _find_code(client, "list_aws_default_service_quotas", quota_name)
    if code is None:
        return None
    got = client.get_aws_default_service_quota(ServiceCode=SAGEMAKER, QuotaCode=code)
    return code, float(got["Quota"]["Value"]), True


def check_identity(dep: Deployment, identity: dict[str, str]) -> list[Finding]:
    found = identity["Account"]
    env = dep.env
    if env.account is None:
        return [
            Finding(
                "account",
                False,
                f"environment {env.name!r} names no account; set `account: {found}` in "
                f"config/environments/{env.name}.yaml if that is where it deploys (stacks, AZs "
                "and quotas are planned per account)",
            )
        ]
    if env.account != found:
        return [
            Finding(
                "account",
                False,
                f"the credentials are account {found}, environment {env.name!r} is {env.account}",
            )
        ]
    return [Finding("account", True, f"{found} ({identity['Arn']}), region {env.region}")]


def check_operator(dep: Deployment, identity: dict[str, str]) -> Finding:
    """The smoke check calls every adapter as this principal: it must be an operator."""
    keys = caller_keys(identity["Arn"])
    if any(match_key(arn) in keys for arn in dep.env.router.operators):
        return Finding("operator", True, f"{identity['Arn']} is one of router.operators")
    role = next((k for k in keys if ":role/" in k), identity["Arn"])
    return Finding(
        "operator",
        False,
        f"the smoke check calls every adapter as {identity['Arn']}, which is not one of "
        f"environment {dep.env.name!r}'s router.operators: add {role} (a role matches by "
        "account and name, its path aside)",
    )


def check_bootstrap(dep: Deployment, ssm: Any, cfn: Any) -> Finding:
    from botocore.exceptions import ClientError

    where = f"aws://{dep.env.account or 'ACCOUNT'}/{dep.env.region}"
    parameter = bootstrap_parameter()
    try:
        version = int(ssm.get_parameter(Name=parameter)["Parameter"]["Value"])
    except ClientError as exc:
        if exc.response["Error"]["Code"] != "ParameterNotFound":
            return Finding(
                "bootstrap",
                False,
                f"could not read {parameter} ({exc.response['Error']['Code']}): the "
                "credentials need ssm:GetParameter on it",
            )
        return Finding(
            "bootstrap",
            False,
            f"the account is not bootstrapped ({parameter} is missing): npx cdk bootstrap {where}",
        )
    if version < MIN_BOOTSTRAP_VERSION:
        return Finding(
            "bootstrap",
            False,
            f"bootstrap version {version}, at least {MIN_BOOTSTRAP_VERSION} needed: npx cdk "
            f"bootstrap {where}",
        )
    try:
        (stack,) = cfn.describe_stacks(StackName="CDKToolkit")["Stacks"]
    except ClientError:
        return Finding("bootstrap", False, f"no CDKToolkit stack: npx cdk bootstrap {where}")
    status = stack["StackStatus"]
    if not status.endswith("_COMPLETE") or "ROLLBACK" in status:
        return Finding("bootstrap", False, f"CDKToolkit is {status}; fix it before a release")
    return Finding("bootstrap", True, f"version {version}, CDKToolkit {status}")


def check_quotas(
    dep: Deployment, quotas: Any, environments_dir: Any = ENVIRONMENTS_DIR
) -> list[Finding]:
    out = []
    here = (dep.env.account, dep.env.region)
    for (account, region, instance_type), needed in endpoint_instances_needed(
        environments_dir
    ).items():
        if (account, region) != here:
            continue
        out.append(
            _quota_finding(
                quotas,
                quota_name(instance_type),
                needed,
                "max_instance_count of the environments in this account and region",
            )
        )
    return out


def _quota_finding(quotas: Any, name: str, needed: int, why: str) -> Finding:
    found = quota_value(quotas, name)
    if found is None:
        return Finding("quota", False, f"Service Quotas has no SageMaker quota {name!r}")
    code, value, default = found
    ok = value >= needed
    return Finding(
        "quota",
        ok,
        f"{name!r} ({code}) is {value:g}{' (AWS default; none applied)' if default else ''}, "
        f"{needed} needed ({why})"
        + ("" if ok else "; request an increase in the Service Quotas console"),
    )


def check_training_quota(dep: Deployment, quotas: Any) -> Finding:
    """A release that trains runs one job at a time on the environment's training instance."""
    return _quota_finding(
        quotas,
        training_quota_name(dep.env.training.instance_type),
        1,
        "training.instance_type, one job at a time",
    )


def check_zones(dep: Deployment, ec2: Any) -> Finding:
    """The VPC's zones exist for this account: the named ones, or at least ``max_azs`` that
    ``Fn::GetAZs`` can list (past them, ``Fn::Select`` fails the network stack at deploy)."""
    answer = ec2.describe_availability_zones(
        Filters=[
            {"Name": "zone-type", "Values": ["availability-zone"]},
            {"Name": "state", "Values": ["available"]},
        ]
    )
    found = sorted(z["ZoneName"] for z in answer["AvailabilityZones"])
    net = dep.env.network
    if net.availability_zones:
        missing = sorted(set(net.availability_zones) - set(found))
        if missing:
            return Finding(
                "zones",
                False,
                f"network.availability_zones names {', '.join(missing)}, which this account does "
                f"not have available in {dep.env.region} (it has {', '.join(found)})",
            )
        return Finding("zones", True, f"{', '.join(net.availability_zones)} are available")
    if len(found) < net.max_azs:
        return Finding(
            "zones",
            False,
            f"network.max_azs is {net.max_azs}, but {dep.env.region} has {len(found)} zones "
            f"available to this account ({', '.join(found)}); lower it or name the zones",
        )
    return Finding(
        "zones", True, f"{net.max_azs} of {len(found)} available zones ({', '.join(found)})"
    )


def check_lambda_concurrency(dep: Deployment, lam: Any) -> Finding:
    """The router's reserved concurrency must leave Lambda's 100 unreserved executions.

    ``UnreservedConcurrentExecutions`` already excludes what the router reserves when it
    exists, so that share is added back before comparing."""
    needed = dep.env.router.reserved_concurrency
    limit = lam.get_account_settings()["AccountLimit"]
    unreserved = int(limit["UnreservedConcurrentExecutions"])
    try:
        current = lam.get_function_concurrency(FunctionName=f"{dep.env.prefix}-router")
        unreserved += int(current.get("ReservedConcurrentExecutions") or 0)
    except lam.exceptions.ResourceNotFoundException:
        pass
    left = unreserved - needed
    ok = left >= LAMBDA_UNRESERVED_FLOOR
    return Finding(
        "lambda",
        ok,
        f"router.reserved_concurrency {needed} leaves {left} of the account's "
        f"{limit['ConcurrentExecutions']} executions unreserved, at least "
        f"{LAMBDA_UNRESERVED_FLOOR} needed"
        + (
            ""
            if ok
            else "; lower router.reserved_concurrency or request a higher 'Concurrent "
            "executions' quota for Lambda"
        ),
    )


def run(
    session: Any,
    dep: Deployment,
    environments_dir: Any = ENVIRONMENTS_DIR,
    *,
    operator: bool = True,
    training: bool = False,
) -> list[Finding]:
    """Every check; ``operator=False`` where the caller runs no smoke check (the pipeline's
    release step: its smoke step runs as a role of its own); ``training``: the release may
    start training jobs."""
    aws = AwsEnv(dep.env, session)
    identity = aws.client("sts").get_caller_identity()
    findings = check_identity(dep, identity)
    if operator:
        findings.append(check_operator(dep, identity))
    findings.append(check_bootstrap(dep, aws.client("ssm"), aws.client("cloudformation")))
    quotas = aws.client("service-quotas")
    findings += check_quotas(dep, quotas, environments_dir)
    findings.append(check_lambda_concurrency(dep, aws.client("lambda")))
    findings.append(check_zones(dep, aws.client("ec2")))
    if training:
        findings.append(check_training_quota(dep, quotas))
    return findings


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m ops.preflight",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--env", required=True)
    args = ap.parse_args(argv)
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    dep = load_deployment(args.env)
    try:
        findings = run(boto3.Session(region_name=dep.env.region), dep, training=True)
    except (BotoCoreError, ClientError) as exc:
        print(f"preflight failed: AWS said: {exc}", file=sys.stderr)
        return 1
    for f in findings:
        print(f.line())
    failed = [f for f in findings if not f.ok]
    print(f"preflight {args.env}: " + ("ready" if not failed else f"{len(failed)} to fix"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
