"""``make destroy``'s refusals: what it must never tear down. The whole teardown and recreate
runs in tests/ops/test_release.py against the strict fakes."""

from __future__ import annotations

import pytest

from config import load_deployment
from ops.teardown import TeardownError, destroy_command, teardown


class _Session:
    """A session whose every client call fails the test: a refusal calls nothing."""

    def client(self, name: str):
        raise AssertionError(f"a refused teardown called {name}")


@pytest.mark.parametrize("env", ["staging", "prod"])
def test_an_environment_with_deletion_protection_is_refused_by_name(env: str) -> None:
    ran: list[list[str]] = []
    with pytest.raises(TeardownError, match=f"{env}.*deletion_protection"):
        teardown(_Session(), load_deployment(env), ran.append, log=lambda _: None)
    assert ran == []


def test_the_local_environment_has_nothing_to_tear_down() -> None:
    with pytest.raises(TeardownError, match="deploys nothing"):
        teardown(_Session(), load_deployment("local"), lambda _: None, log=lambda _: None)


def test_the_destroy_selects_the_environments_own_stacks_never_the_accounts() -> None:
    argv = destroy_command(load_deployment("dev"))
    assert argv[3:6] == ["destroy", "lora-dev-*", "--force"]
    assert "--all" not in argv and argv[-2:] == ["-c", "env=dev"]
