"""``make destroy ENV=NAME`` (``python -m ops.teardown --env NAME``): tear an environment without
deletion protection down by its own stacks, so that ``make release`` creates it again from
nothing.

1. The environment must not ask for deletion protection: staging and prod keep their data by
   design (``RetainExceptOnCreate``); docs/operate.md's teardown table says what stays and how a
   recreate adopts it.
2. The credentials must be the environment's account, when it names one.
3. Before anything is deleted, the catalog's adapter archives are copied from the bucket to
   the release's archives folder (``.artifacts/adapters/BASE_KEY/NAME.tar.gz``): the catalog
   pins each one's sha256, and a retrained archive never has the same, so ``make release``
   recreates the environment from these copies.
4. Every version in the environment's model package groups is deleted. SageMaker's API
   reference lists a ``ConflictException`` for ``DeleteModelPackageGroup`` without saying when;
   a group that still holds versions is the likely one, and it would leave its
   ``PREFIX-registry-NN`` stack ``DELETE_FAILED``. Deleting the versions is what makes the
   teardown whole, and it is why protected environments are refused.
5. ``npx cdk destroy 'PREFIX-*' --force``: the environment's stacks in reverse dependency order,
   never ``lora-fleet-account`` (which every environment of the account shares). The serving
   stack waits for SageMaker to remove its endpoint's network interfaces before its execution
   role goes (``infra.eni_drain``), so the network stack deletes cleanly.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from config import CATALOG_PATH, ENVIRONMENTS_DIR, Deployment, load_deployment
from config.aws import AccountMismatchError, AwsEnv
from config.layout import adapter_key, archives_dir
from ops.release import ARCHIVES
from training.registry import RegistryError, delete_group_versions


class TeardownError(RuntimeError):
    """The teardown was refused or failed; the message says why."""


def destroy_command(dep: Deployment) -> list[str]:
    return [
        "npx",
        "--no-install",
        "cdk",
        "destroy",
        f"{dep.env.prefix}-*",
        "--force",
        "-c",
        f"env={dep.env.name}",
    ]


def protected_stacks(cfn: Any, dep: Deployment) -> list[str]:
    """The environment's stacks (``PREFIX-*``) that termination protection keeps. CloudFormation
    refuses DeleteStack on them ("Protect CloudFormation stacks from being deleted", its user
    guide), and a stack keeps the protection it was last deployed with: an environment file that
    turned ``deletion_protection`` off reaches the stacks only with the next release.
    DescribeStacks without a name lists the region's stacks, each with
    ``EnableTerminationProtection`` (botocore's cloudformation model, shape ``Stack``)."""
    head = f"{dep.env.prefix}-"
    return sorted(
        stack["StackName"]
        for page in cfn.get_paginator("describe_stacks").paginate()
        for stack in page["Stacks"]
        if stack["StackName"].startswith(head) and stack.get("EnableTerminationProtection")
    )


def environment_groups(sm: Any, dep: Deployment) -> list[str]:
    """The model package groups named for this environment (``PREFIX-NAME``), the catalog's and
    any whose entry has left it since: ``make check`` refuses a prefix that begins with another
    environment's ``PREFIX-``, so the name says whose a group is."""
    head = f"{dep.env.prefix}-"
    pages = sm.get_paginator("list_model_package_groups").paginate(NameContains=head)
    return sorted(
        g["ModelPackageGroupName"]
        for page in pages
        for g in page["ModelPackageGroupSummaryList"]
        if g["ModelPackageGroupName"].startswith(head)
    )


def delete_versions(sm: Any, dep: Deployment, log: Callable[[str], None]) -> int:
    """Every model package in the environment's groups. Returns how many were deleted."""
    deleted = 0
    for group in environment_groups(sm, dep):
        try:
            n = delete_group_versions(sm, group)
        except sm.exceptions.ClientError as exc:
            raise TeardownError(
                f"could not delete the versions of {group}: "
                f"{exc.response['Error'].get('Message', exc)}; nothing else was torn down after it"
            ) from None
        except RegistryError as exc:
            raise TeardownError(f"{exc}; nothing else was torn down after it") from None
        log(f"  {group}: deleted {n} version(s)")
        deleted += n
    return deleted


def save_archives(
    s3: Any, dep: Deployment, bucket: str, archives: Path, log: Callable[[str], None]
) -> list[str]:
    """Each catalog adapter's published archive (its catalog version) as ``NAME.tar.gz`` in
    ``archives`` (written over a file of that name); one missing from the bucket is named, and
    trains again on the next release. Returns the names saved."""
    archives.mkdir(parents=True, exist_ok=True)
    saved = []
    for a in dep.adapters:
        key = adapter_key(a.name, a.entry.version)
        try:
            body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        except s3.exceptions.ClientError as exc:
            log(
                f"  {a.name}: no archive at s3://{bucket}/{key} "
                f"({exc.response['Error']['Code']}); it trains again on release"
            )
            continue
        (archives / f"{a.name}.tar.gz").write_bytes(body)
        saved.append(a.name)
    log(f"  {len(saved)} archive(s) kept")
    return saved


def teardown(
    aws: AwsEnv,
    dep: Deployment,
    run: Callable[[list[str]], None],
    *,
    archives: Path = ARCHIVES,
    log: Callable[[str], None] = print,
) -> None:
    env = dep.env
    if not env.deployable:
        raise TeardownError(f"environment {env.name!r} deploys nothing to AWS")
    if env.deletion_protection:
        raise TeardownError(
            f"environment {env.name!r} has deletion_protection: its data is kept by design; "
            "see the teardown table in docs/operate.md for destroying it by hand"
        )
    if env.account is None:
        # Without one, CDK's stacks are account-agnostic and `cdk destroy` would act in the
        # shell's region; make release refuses such an environment too (ops.preflight).
        raise TeardownError(
            f"environment {env.name!r} names no account: set account in its file, as the "
            "release requires"
        )
    try:
        bucket = aws.bucket  # the account from STS, checked against the environment's
    except AccountMismatchError as exc:
        raise TeardownError(str(exc)) from None
    # Before anything is deleted: `cdk destroy` would stop at a protected stack after the
    # versions below were gone.
    protected = protected_stacks(aws.client("cloudformation"), dep)
    if protected:
        raise TeardownError(
            f"termination protection is on for {', '.join(protected)}: the stacks keep the "
            f"protection of the release that deployed them. Run make release ENV={env.name} "
            "first (the environment file's deletion_protection: false then reaches them), or "
            "turn it off by hand (aws cloudformation update-termination-protection "
            "--no-enable-termination-protection --stack-name NAME); nothing was torn down"
        )
    kept = archives_dir(archives, dep.base_key)
    log(f"[1/3] the catalog's adapter archives, kept in {kept}")
    save_archives(aws.client("s3"), dep, bucket, kept, log)
    log(f"[2/3] model package versions of {env.prefix}'s adapters in {aws.region}")
    delete_versions(aws.client("sagemaker"), dep, log)
    log(f"[3/3] stacks {env.prefix}-* (lora-fleet-account stays)")
    run(destroy_command(dep))
    log(f"{env.name} torn down; make release ENV={env.name} creates it again")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ops.teardown", description=__doc__)
    ap.add_argument("--env", required=True)
    ap.add_argument("--archives", type=Path, default=ARCHIVES, help="where archives are kept")
    ap.add_argument("--catalog", default=CATALOG_PATH)
    ap.add_argument("--environments-dir", default=ENVIRONMENTS_DIR)
    args = ap.parse_args(argv)
    from ops.release import ReleaseError, Tools

    try:
        dep = load_deployment(args.env, args.catalog, args.environments_dir)
        # The environment's region, whatever the shell's default is (config.aws).
        teardown(AwsEnv(dep.env), dep, Tools().run, archives=args.archives)
    except (TeardownError, ReleaseError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
