"""Every boto3 session and client that acts on an environment, built from that environment.

A client built without ``region_name`` takes the shell's default region, and an account taken
from nowhere is a stand-in: both once sent a teardown to the wrong region and training jobs to
a bucket named for AWS's documentation account. So the release, the preflight, the teardown,
``make usage``, the smoke check, publish and the training launch all go through ``AwsEnv``:

- its clients are in the environment's region, whatever the shell says;
- ``account`` asks STS who the credentials are, once, and refuses them when the environment
  names another account, before anything is written;
- ``bucket`` is the environment's artifact bucket for that account (``config.layout``).

Retries use botocore's ``standard`` mode (boto3 guide, "Retries"), which backs off on the
control plane's throttling errors; a release at a thousand adapters lists and describes
thousands of packages.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from config import layout
from config.schema import Environment

#: botocore's standard retry mode, ten attempts (the AWS SDKs' guide, "Retry behavior").
RETRIES = {"mode": "standard", "max_attempts": 10}


class AccountMismatchError(RuntimeError):
    """The credentials belong to another account than the environment names."""


@dataclass
class AwsEnv:
    """One environment's view of AWS. ``session``: a boto3 session (a new one in the
    environment's region when not given; tests pass moto's or a stubbed one)."""

    env: Environment
    session: Any = None
    _account: str | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        import boto3

        if self.session is None:
            self.session = boto3.Session(region_name=self.env.region)
        elif isinstance(self.session, boto3.Session) and self.session.region_name != self.region:
            # The session is pinned to the environment's region: libraries handed it build
            # their own clients from its region (the SageMaker SDK's TrainingJob.create does,
            # "No region provided. Using default region."), and would act in the shell's. Its
            # credentials and event hooks stay as they are.
            self.session._session.set_config_variable("region", self.region)

    @property
    def region(self) -> str:
        return self.env.region

    def client(self, service: str) -> Any:
        """A client in the environment's region, never the shell's."""
        from botocore.config import Config

        return self.session.client(
            service, region_name=self.env.region, config=Config(retries=RETRIES)
        )

    @property
    def account(self) -> str:
        """The credentials' account (STS GetCallerIdentity), checked against the environment's
        ``account`` when it names one."""
        if self._account is None:
            found = self.client("sts").get_caller_identity()["Account"]
            if self.env.account is not None and self.env.account != found:
                raise AccountMismatchError(
                    f"environment {self.env.name!r} is account {self.env.account}, but the "
                    f"credentials are account {found}; use credentials of {self.env.account}"
                )
            self._account = found
        return self._account

    @property
    def bucket(self) -> str:
        """The environment's artifact bucket in the credentials' (checked) account."""
        return layout.artifact_bucket(
            self.env.prefix, self.account, self.env.region, self.env.artifact_bucket
        )
