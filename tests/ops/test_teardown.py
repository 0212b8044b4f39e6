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
