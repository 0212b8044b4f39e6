"""``make preflight ENV=NAME`` (``python -m ops.preflight --env NAME``): what a first deploy needs
from the account, checked before anything is created. It changes nothing.

A fresh account fails a first deploy in ways no offline check sees (deploy review r3):

- the credentials are another account's, or the environment names none (``account`` pins the
  account its stacks, AZs and quotas are planned for);
- the CDK bootstrap stack is missing or too old (``cdk deploy`` needs its bucket and roles);
- SageMaker's per-account endpoint quota for the instance type is 0 on most new accounts, and a
  rolling update needs ``max_instance_count`` instances (Service Quotas: ``<type> for endpoint
  usage``), summed over the environments that share the account;
- the smoke check calls every adapter as the releasing principal, which must be one of the
  environment's ``router.operators`` (a role by name: ``contracts.principals``).

Each check answers in a sentence with the value found and the value needed. ``make release``
runs the same checks first.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import Any

from config import ENVIRONMENTS_DIR, Deployment, load_deployment
from config.quotas import endpoint_instances_needed, quota_name
from contracts.principals import caller_keys, match_key

#: The bootstrap version ``cdk deploy`` of aws-cdk-lib 2.x asks for (its assets' roles and the
#: lookup role; the CLI refuses an older one, "This CDK deployment requires bootstrap stack
#: version '6'").
MIN_BOOTSTRAP_VERSION = 6
BOOTSTRAP_PARAMETER = "/cdk-bootstrap/hnb659fds/version"
SAGEMAKER = "sagemaker"


@dataclass(frozen=True)
class Finding:
    check: str
    ok: bool
    message: str

    def line(self) -> str:
        return f"{'ok  ' if self.ok else 'FAIL'} {self.check}: {self.message}"


def quota_value(client: Any, quota_name: str) -> tuple[str, float] | None:
    """The account's applied value of SageMaker's quota named ``quota_name``, through
    ``GetServiceQuota`` (its code found with ``ListServiceQuotas``); None when no such quota."""
    paginator = client.get_paginator("list_service_quotas")
    for page in paginator.paginate(ServiceCode=SAGEMAKER):
        for quota in page.get("Quotas", []):
            if quota.get("QuotaName") == quota_name:
                got = client.get_service_quota(ServiceCode=SAGEMAKER, QuotaCode=quota["QuotaCode"])
                return quota["QuotaCode"], float(got["Quota"]["Value"])
    return None


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
    try:
        version = int(ssm.get_parameter(Name=BOOTSTRAP_PARAMETER)["Parameter"]["Value"])
    except ClientError:
        return Finding(
            "bootstrap", False, f"the account is not bootstrapped: npx cdk bootstrap {where}"
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
        name = quota_name(instance_type)
        found = quota_value(quotas, name)
        if found is None:
            out.append(Finding("quota", False, f"Service Quotas has no SageMaker quota {name!r}"))
            continue
        code, value = found
        ok = value >= needed
        out.append(
            Finding(
                "quota",
                ok,
                f"{name!r} ({code}) is {value:g}, {needed} needed (max_instance_count of the "
                "environments in this account and region)"
                + ("" if ok else "; request an increase in the Service Quotas console"),
            )
        )
    return out


def run(
    session: Any,
    dep: Deployment,
    environments_dir: Any = ENVIRONMENTS_DIR,
    *,
    operator: bool = True,
) -> list[Finding]:
    """Every check; ``operator=False`` where the caller runs no smoke check (the pipeline's
    release step: its smoke step runs as a role of its own)."""
    region = dep.env.region
    identity = session.client("sts", region_name=region).get_caller_identity()
    findings = check_identity(dep, identity)
    if operator:
        findings.append(check_operator(dep, identity))
    findings.append(
        check_bootstrap(
            dep,
            session.client("ssm", region_name=region),
            session.client("cloudformation", region_name=region),
        )
    )
    findings += check_quotas(
        dep, session.client("service-quotas", region_name=region), environments_dir
    )
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
        findings = run(boto3.Session(), dep)
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
