"""``make preflight ENV=dev`` against clients stubbed with botocore's Stubber (every response in
the shape of AWS's API model), for an environment as a user configures it: its own account and a
region other than us-east-1. It refuses with the quota's name, the value found and the value
needed when the account's endpoint quota is 0, passes when it suffices, reads a quota that has
no applied value from AWS's defaults, and checks Lambda's unreserved concurrency and the
training quota a new account fails on."""

from __future__ import annotations

import shutil
from pathlib import Path

import boto3
import pytest
from botocore.stub import Stubber

from config import ENVIRONMENTS_DIR, load_deployment
from ops import preflight

ACCOUNT = "111122223333"
REGION = "eu-west-1"
SSO_ROLE = f"arn:aws:iam::{ACCOUNT}:role/aws-reserved/sso.amazonaws.com/AWSReservedSSO_Admin_1a2b"
SSO_SESSION = f"arn:aws:sts::{ACCOUNT}:assumed-role/AWSReservedSSO_Admin_1a2b/alice@example.com"


class StubbedSession:
    """A boto3 session whose clients answer from stubs, refusing any call not queued."""

    def __init__(self, region: str = REGION) -> None:
        self.region = region
        self.clients: dict[str, tuple[object, Stubber]] = {}

    def client(self, name: str, region_name: str | None = None, config=None):
        # A client in the shell's region is a defect (config.aws builds every one in the
        # environment's): refused here, as a fake must be at least as strict as the real path.
        assert region_name == self.region, f"{name} client in {region_name!r}, not {self.region}"
        if name not in self.clients:
            client = boto3.client(
                name,
                region_name=region_name,
                aws_access_key_id="x",
                aws_secret_access_key="x",
                config=config,
            )
            stub = Stubber(client)
            stub.activate()
            self.clients[name] = (client, stub)
        return self.clients[name][0]

    def stub(self, name: str) -> Stubber:
        self.client(name, region_name=self.region)
        return self.clients[name][1]


@pytest.fixture
def environments(tmp_path: Path) -> Path:
    """dev with its account, in eu-west-1, and the releasing SSO role as an operator."""
    envs = tmp_path / "environments"
    shutil.copytree(ENVIRONMENTS_DIR, envs)
    text = (envs / "dev.yaml").read_text()
    text = text.replace("region: us-east-1\n", f'region: {REGION}\naccount: "{ACCOUNT}"\n', 1)
    text = text.replace("router:\n", f"router:\n  operators: [{SSO_ROLE}]\n", 1)
    (envs / "dev.yaml").write_text(text)
    return envs


def _ready(
    session: StubbedSession,
    quota: float,
    arn: str = SSO_SESSION,
    quota_codes: tuple[str, ...] = ("L-1928E07B",),
    unreserved: int = 950,
) -> None:
    """A ready account's answers; ``quota_codes``: the quotas read, in the order asked."""
    session.stub("sts").add_response(
        "get_caller_identity", {"Account": ACCOUNT, "Arn": arn, "UserId": "AROA:alice"}
    )
    session.stub("ssm").add_response(
        "get_parameter",
        {"Parameter": {"Name": BOOTSTRAP, "Value": "30", "Type": "String"}},
        {"Name": BOOTSTRAP},
    )
    session.stub("cloudformation").add_response(
        "describe_stacks",
        {
            "Stacks": [
                {
                    "StackName": "CDKToolkit",
                    "CreationTime": "2026-01-01T00:00:00Z",
                    "StackStatus": "UPDATE_COMPLETE",
                }
            ]
        },
        {"StackName": "CDKToolkit"},
    )
    quotas = session.stub("service-quotas")
    for code in quota_codes:  # each quota is looked up by name, then read
        quotas.add_response(
            "list_service_quotas",
            {
                "Quotas": [
                    {"QuotaName": "ml.g5.2xlarge for endpoint usage", "QuotaCode": "L-9614C779"},
                    {"QuotaName": "ml.g5.xlarge for endpoint usage", "QuotaCode": "L-1928E07B"},
                ]
            },
            {"ServiceCode": "sagemaker"},
        )
        quotas.add_response(
            "get_service_quota",
            {"Quota": {"QuotaCode": code, "Value": quota}},
            {"ServiceCode": "sagemaker", "QuotaCode": code},
        )
    _lambda(session, unreserved)
    _zones(session)


def _zones(session: StubbedSession, letters: str = "abc") -> None:
    session.stub("ec2").add_response(
        "describe_availability_zones",
        {
            "AvailabilityZones": [
                {"ZoneName": f"{session.region}{x}", "State": "available"} for x in letters
            ]
        },
        {
            "Filters": [
                {"Name": "zone-type", "Values": ["availability-zone"]},
                {"Name": "state", "Values": ["available"]},
            ]
        },
    )


BOOTSTRAP = "/cdk-bootstrap/hnb659fds/version"


def _lambda(session: StubbedSession, unreserved: int, total: int = 1000) -> None:
    """GetAccountSettings, and no router function yet (a first release)."""
    lam = session.stub("lambda")
    lam.add_response(
        "get_account_settings",
        {
            "AccountLimit": {
                "ConcurrentExecutions": total,
                "UnreservedConcurrentExecutions": unreserved,
            }
        },
        {},
    )
    lam.add_client_error(
        "get_function_concurrency",
        "ResourceNotFoundException",
        expected_params={"FunctionName": "lora-dev-router"},
    )


def test_a_quota_of_zero_is_refused_by_name_with_found_and_needed(environments) -> None:
    session = StubbedSession()
    _ready(session, 0.0)
    dep = load_deployment("dev", environments_dir=environments)
    findings = preflight.run(session, dep, environments)
    (quota,) = [f for f in findings if f.check == "quota"]
    assert not quota.ok
    assert "'ml.g5.xlarge for endpoint usage' (L-1928E07B) is 0, 3 needed" in quota.message
    assert all(f.ok for f in findings if f.check != "quota"), [f.line() for f in findings]


def test_a_sufficient_quota_passes(environments) -> None:
    session = StubbedSession()
    _ready(session, 3.0)
    dep = load_deployment("dev", environments_dir=environments)
    findings = preflight.run(session, dep, environments)
    assert all(f.ok for f in findings), [f.line() for f in findings]
    for _, stub in session.clients.values():
        stub.assert_no_pending_responses()


def test_another_account_an_unset_account_and_a_non_operator_are_refused(environments) -> None:
    dep = load_deployment("dev", environments_dir=environments)
    other = {"Account": "999999999999", "Arn": SSO_SESSION.replace(ACCOUNT, "999999999999")}
    (found,) = preflight.check_identity(dep, other)
    assert not found.ok and "999999999999" in found.message
    (unset,) = preflight.check_identity(load_deployment("dev"), {"Account": ACCOUNT, "Arn": "x"})
    assert not unset.ok and f"account: {ACCOUNT}" in unset.message
    ci = f"arn:aws:sts::{ACCOUNT}:assumed-role/github-deploy/run-7"
    refused = preflight.check_operator(dep, {"Account": ACCOUNT, "Arn": ci})
    assert not refused.ok and f"add arn:aws:iam::{ACCOUNT}:role/github-deploy" in refused.message
    # The SSO session matches its pathed role by name (the router does the same).
    assert preflight.check_operator(dep, {"Account": ACCOUNT, "Arn": SSO_SESSION}).ok


def test_an_account_that_is_not_bootstrapped_is_refused(environments) -> None:
    session = StubbedSession()
    session.stub("ssm").add_client_error("get_parameter", "ParameterNotFound")
    dep = load_deployment("dev", environments_dir=environments)
    finding = preflight.check_bootstrap(
        dep, session.client("ssm", REGION), session.client("cloudformation", REGION)
    )
    assert not finding.ok and f"npx cdk bootstrap aws://{ACCOUNT}/{REGION}" in finding.message


def test_a_bootstrap_parameter_the_credentials_may_not_read_is_not_called_missing(
    environments,
) -> None:
    session = StubbedSession()
    session.stub("ssm").add_client_error("get_parameter", "AccessDeniedException")
    dep = load_deployment("dev", environments_dir=environments)
    finding = preflight.check_bootstrap(
        dep, session.client("ssm", REGION), session.client("cloudformation", REGION)
    )
    assert not finding.ok
    assert "AccessDeniedException" in finding.message and "ssm:GetParameter" in finding.message
    assert "not bootstrapped" not in finding.message


def test_a_quota_with_no_applied_value_is_read_from_aws_defaults(environments) -> None:
    """ListServiceQuotas leaves out quotas whose applied value is not available (Service
    Quotas API reference); the preflight reads the default instead of refusing the release."""
    session = StubbedSession()
    quotas = session.stub("service-quotas")
    quotas.add_response("list_service_quotas", {"Quotas": []}, {"ServiceCode": "sagemaker"})
    quotas.add_response(
        "list_aws_default_service_quotas",
        {"Quotas": [{"QuotaName": "ml.g5.xlarge for endpoint usage", "QuotaCode": "L-1928E07B"}]},
        {"ServiceCode": "sagemaker"},
    )
    quotas.add_response(
        "get_aws_default_service_quota",
        {"Quota": {"QuotaCode": "L-1928E07B", "Value": 4.0}},
        {"ServiceCode": "sagemaker", "QuotaCode": "L-1928E07B"},
    )
    dep = load_deployment("dev", environments_dir=environments)
    (finding,) = preflight.check_quotas(dep, session.client("service-quotas", REGION), environments)
    assert finding.ok, finding.line()
    assert "is 4 (AWS default; none applied), 3 needed" in finding.message
    quotas.assert_no_pending_responses()


def test_a_listed_quota_get_service_quota_has_no_value_for_falls_back_to_the_default(
    environments,
) -> None:
    session = StubbedSession()
    quotas = session.stub("service-quotas")
    quotas.add_response(
        "list_service_quotas",
        {"Quotas": [{"QuotaName": "ml.g5.xlarge for endpoint usage", "QuotaCode": "L-1928E07B"}]},
        {"ServiceCode": "sagemaker"},
    )
    quotas.add_client_error("get_service_quota", "NoSuchResourceException")
    quotas.add_response(
        "get_aws_default_service_quota",
        {"Quota": {"QuotaCode": "L-1928E07B", "Value": 0.0}},
        {"ServiceCode": "sagemaker", "QuotaCode": "L-1928E07B"},
    )
    dep = load_deployment("dev", environments_dir=environments)
    (finding,) = preflight.check_quotas(dep, session.client("service-quotas", REGION), environments)
    assert not finding.ok and "is 0 (AWS default; none applied), 3 needed" in finding.message


def test_a_new_accounts_lambda_concurrency_is_refused_naming_the_setting(environments) -> None:
    session = StubbedSession()
    _lambda(session, unreserved=10, total=10)
    dep = load_deployment("dev", environments_dir=environments)
    finding = preflight.check_lambda_concurrency(dep, session.client("lambda", REGION))
    assert not finding.ok
    assert "router.reserved_concurrency 50 leaves -40 of the account's 10" in finding.message


def test_the_routers_own_reservation_is_counted_back_on_a_later_release(environments) -> None:
    session = StubbedSession()
    lam = session.stub("lambda")
    lam.add_response(
        "get_account_settings",
        {"AccountLimit": {"ConcurrentExecutions": 200, "UnreservedConcurrentExecutions": 150}},
        {},
    )
    lam.add_response(
        "get_function_concurrency",
        {"ReservedConcurrentExecutions": 50},
        {"FunctionName": "lora-dev-router"},
    )
    dep = load_deployment("dev", environments_dir=environments)
    assert preflight.check_lambda_concurrency(dep, session.client("lambda", REGION)).ok


def test_a_release_that_trains_checks_the_training_quota(environments) -> None:
    session = StubbedSession()
    _ready(session, 3.0)
    quotas = session.stub("service-quotas")
    quotas.add_response(
        "list_service_quotas",
        {"Quotas": [{"QuotaName": "ml.g5.2xlarge for training job usage", "QuotaCode": "L-T"}]},
        {"ServiceCode": "sagemaker"},
    )
    quotas.add_response(
        "get_service_quota",
        {"Quota": {"QuotaCode": "L-T", "Value": 0.0}},
        {"ServiceCode": "sagemaker", "QuotaCode": "L-T"},
    )
    dep = load_deployment("dev", environments_dir=environments)
    findings = preflight.run(session, dep, environments, training=True)
    refused = [f for f in findings if not f.ok]
    assert [f.message.split(" (")[0] for f in refused] == [
        "'ml.g5.2xlarge for training job usage'"
    ], [f.line() for f in findings]


def test_make_check_prints_the_quotas_the_environments_need() -> None:
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "config", "check"], capture_output=True, text=True, check=True
    ).stdout
    # staging (3) and prod (6) name no account, so they are counted as sharing one.
    assert "ml.g5.2xlarge for endpoint usage  9" in out, out[-1500:]
    assert "ml.g5.xlarge for endpoint usage   3" in out
    # An environment with no account is named, and told what
    # refuses it; the local environment deploys nothing and is not warned about.
    for env in ("dev", "staging", "prod"):
        assert f"environment {env!r} names no account" in out, out
    assert "environment 'local' names no account" not in out


def test_zones_the_account_does_not_have_are_refused(environments) -> None:
    """A named zone the account lacks, or more zones than Fn::GetAZs can list, fails the network
    stack at deploy; the preflight says so first."""
    import dataclasses

    dep = load_deployment("dev", environments_dir=environments)
    session = StubbedSession()
    _zones(session, "ab")
    net = dep.env.network.model_copy(update={"max_azs": 3})
    three = dataclasses.replace(dep, env=dep.env.model_copy(update={"network": net}))
    finding = preflight.check_zones(three, session.client("ec2", REGION))
    assert not finding.ok and "max_azs is 3, but eu-west-1 has 2 zones" in finding.message
    session = StubbedSession()
    _zones(session, "ab")
    net = dep.env.network.model_copy(update={"availability_zones": ["eu-west-1a", "eu-west-1c"]})
    named = dataclasses.replace(dep, env=dep.env.model_copy(update={"network": net}))
    finding = preflight.check_zones(named, session.client("ec2", REGION))
    assert not finding.ok and "names eu-west-1c" in finding.message
