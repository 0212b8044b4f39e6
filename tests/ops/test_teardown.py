"""``make destroy``'s refusals: what it must never tear down. The whole teardown and recreate
runs in tests/ops/test_release.py against the strict fakes."""

from __future__ import annotations

import pytest

from config import load_deployment
from ops.teardown import TeardownError, destroy_command, teardown


class _Session:
    """A session whose every client call fails the test: a refusal calls nothing."""

    def client(self, name: str, **_):
        raise AssertionError(f"a refused teardown called {name}")


def _aws(env: str):
    from config.aws import AwsEnv

    dep = load_deployment(env)
    return AwsEnv(dep.env, _Session()), dep


@pytest.mark.parametrize("env", ["staging", "prod"])
def test_an_environment_with_deletion_protection_is_refused_by_name(env: str) -> None:
    ran: list[list[str]] = []
    aws, dep = _aws(env)
    with pytest.raises(TeardownError, match=f"{env}.*deletion_protection"):
        teardown(aws, dep, ran.append, log=lambda _: None)
    assert ran == []


def test_the_local_environment_has_nothing_to_tear_down() -> None:
    aws, dep = _aws("local")
    with pytest.raises(TeardownError, match="deploys nothing"):
        teardown(aws, dep, lambda _: None, log=lambda _: None)


def test_the_destroy_selects_the_environments_own_stacks_never_the_accounts() -> None:
    argv = destroy_command(load_deployment("dev"))
    assert argv[3:6] == ["destroy", "lora-dev-*", "--force"]
    assert "--all" not in argv and argv[-2:] == ["-c", "env=dev"]


def test_an_environment_that_names_no_account_is_refused_before_any_call() -> None:
    """Its stacks are account-agnostic, so `cdk destroy` would act in the shell's region."""
    aws, dep = _aws("dev")
    with pytest.raises(TeardownError, match="names no account"):
        teardown(aws, dep, lambda _: None, log=lambda _: None)


class _Raw:
    """An HTTP body as botocore reads it (``AWSResponse.content`` joins ``stream()``)."""

    def __init__(self, body: bytes) -> None:
        self.body = body

    def stream(self, **_):
        yield self.body


def test_a_thousand_adapters_come_through_the_control_planes_throttling(
    tmp_path, monkeypatch
) -> None:
    """SageMaker's control plane throttles (``ThrottlingException``, in bursts once a rate is
    exceeded), and a teardown at a thousand adapters lists and deletes per group. Every
    client of ``config.aws`` retries in botocore's standard mode with ten attempts: here six
    throttles in a row every hundred calls go through, where the SDK's default (legacy, five
    attempts; standard, three) would have stopped the teardown half-way. (Sustained harder,
    standard mode's retry quota runs out by design, and the error names the group.)"""
    import itertools
    import json

    import boto3
    from botocore.awsrequest import AWSResponse
    from moto import mock_aws
    from moto.core.models import botocore_stubber

    from config.aws import AwsEnv
    from ops.teardown import delete_versions, environment_groups
    from tests.infra.conftest import edited_config
    from tests.ops.test_release import strict_sagemaker

    strict_sagemaker(monkeypatch)
    region, account = "eu-west-1", "111122223333"
    catalog, environments = edited_config(
        tmp_path, environment=lambda d: d.update(region=region, account=account)
    )
    dep = load_deployment("dev", catalog, environments)
    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "MOTO_ACCOUNT_ID": account,
        "AWS_DEFAULT_REGION": "us-west-2",
    }.items():
        monkeypatch.setenv(key, value)
    with mock_aws():
        aws = AwsEnv(dep.env, boto3.Session())
        sm = aws.client("sagemaker")
        groups = [f"{dep.env.prefix}-a{i:04d}" for i in range(1000)]
        for group in groups:
            sm.create_model_package_group(ModelPackageGroupName=group)
        for group in groups[::100]:
            sm.create_model_package(
                ModelPackageGroupName=group,
                InferenceSpecification={
                    "Containers": [{"Image": f"{account}.dkr.ecr.{region}.amazonaws.com/r:1"}],
                    "SupportedContentTypes": ["application/json"],
                    "SupportedResponseMIMETypes": ["application/json"],
                },
            )
        sent, throttled, slept = itertools.count(), [], []
        body = json.dumps({"__type": "ThrottlingException", "message": "Rate exceeded"})

        def throttle(request, **_):
            # botocore calls every before-send handler and takes the first answer, so moto's
            # handler, next, is switched off for a throttled attempt: SageMaker never ran it.
            botocore_stubber.enabled = True
            if next(sent) % 100 < 6:
                throttled.append(request.url)
                botocore_stubber.enabled = False
                headers = {"Content-Type": "application/x-amz-json-1.1", "x-amzn-RequestId": "t"}
                return AWSResponse(request.url, 400, headers, _Raw(body.encode()))
            return None

        sm.meta.events.register_first("before-send.sagemaker", throttle)
        monkeypatch.setattr("botocore.endpoint.time.sleep", slept.append)
        assert environment_groups(sm, dep) == groups
        assert delete_versions(sm, dep, lambda _: None) == 10
        botocore_stubber.enabled = True
    assert len(throttled) > 100 and len(slept) == len(throttled)
