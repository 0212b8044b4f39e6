"""``python -m config check [--env NAME]``: validate the catalog and print it as a table."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from config.dataset_files import token_problems
from config.loader import (
    CATALOG_PATH,
    ENVIRONMENTS_DIR,
    REPO_ROOT,
    CatalogError,
    Deployment,
    dataset_rows,
    environment_names,
    load_deployment,
)
from config.quotas import quota_table
from contracts.principals import how_matched


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    line = "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(out)


def _print_deployment(dep: Deployment) -> None:
    base = dep.base
    print(
        f"environment {dep.env.name}: base {dep.base_key} ({base.model_id}@{base.revision}, "
        f"{base.dtype}/{base.quantization}, max_lora_rank {base.max_lora_rank}), "
        f"engine {dep.env.engine}, {dep.env.serving.instance_type}"
    )
    if base.source == "hub" and base.tokenizer_sha256 is None:
        print(
            f"  note: base {dep.base_key!r} tokenizer_sha256 is unpinned; the runtime logs the "
            "value at container start, record it in the catalog"
        )
    rows = []
    for a in dep.adapters:
        p = a.profile
        allowed = ",".join(a.entry.allow.tenants + a.entry.allow.principals) or "(nobody)"
        rows.append(
            [
                a.name,
                a.entry.version,
                a.entry.task,
                str(p.rank),
                str(p.alpha),
                str(p.targets),
                a.component_name,
                "yes" if a.entry.pin else "",
                "published" if a.entry.artifact else "unpublished",
                allowed,
            ]
        )
    header = [
        "adapter",
        "version",
        "task",
        "r",
        "alpha",
        "targets",
        "component",
        "pin",
        "artifact",
        "allowed",
    ]
    print(_table(rows, header))
    for line in _principal_notes(dep):
        print(line)
    print()


def _principal_notes(dep: Deployment) -> list[str]:
    """How the router will match each IAM principal ARN the environment lists (a role by its
    account and name: an SSO role's path never reaches the router)."""
    listed = [("operator", arn) for arn in dep.env.router.operators]
    listed += [
        (f"adapter {a.name!r}", arn) for a in dep.adapters for arn in a.entry.allow.principals
    ]
    return [f"  {who}: {arn} is matched as {how_matched(arn)}" for who, arn in listed]


def _tokenizer(dep: Deployment):
    """The base's tokenizer where this machine has it: a local base built under
    .artifacts/base, or a hub base in the Hugging Face cache (never downloaded here)."""
    try:
        from transformers import AutoTokenizer
    except ImportError:  # the catalog tools without the training extra
        return None
    built = REPO_ROOT / ".artifacts" / "base" / dep.base_key
    try:
        if (built / "tokenizer_config.json").exists():
            return AutoTokenizer.from_pretrained(built)
        return AutoTokenizer.from_pretrained(
            dep.base.model_id, revision=dep.base.revision, local_files_only=True
        )
    except (OSError, ValueError):
        return None


def _token_issues(dep: Deployment, catalog: Path) -> tuple[list[str], list[str]]:
    """(records too long for training, notes): every record of a local dataset file counted
    in the base's chat template against the entry's max_length. Without the tokenizer here
    the count is left to the trainer, which makes it before it starts (training.train)."""
    entries = [
        a for a in dep.adapters if a.entry.dataset_file and "://" not in a.entry.dataset_file
    ]
    if not entries:
        return [], []
    tokenizer = _tokenizer(dep)
    if tokenizer is None:
        names = ", ".join(a.name for a in entries)
        return [], [
            f"  note: no tokenizer for base {dep.base_key!r} on this machine, so the "
            f"token lengths of {names}'s records are checked when training starts; to count "
            "them here, put the tokenizer in the Hugging Face cache (huggingface-cli download "
            f"{dep.base.model_id} --revision {dep.base.revision} --include 'tokenizer*')"
        ]
    errors = []
    for a in entries:
        _, rows = dataset_rows(a.entry, catalog.parent)
        profile = a.profile

        def count(text: str, output: str, system: str = profile.instruction) -> int:
            turns = [
                {"role": "system", "content": system},
                {"role": "user", "content": text},
                {"role": "assistant", "content": output},
            ]
            rendered = tokenizer.apply_chat_template(turns, tokenize=False)
            return len(tokenizer(rendered, add_special_tokens=False)["input_ids"])

        errors += [
            f"{catalog.name}: adapter {a.name!r}: field 'dataset': {a.entry.dataset}: "
            f"{p} in environment {dep.env.name!r}"
            for p in token_problems(rows, count, profile.max_length)
        ]
    return errors, []


def _prefix_clashes(catalog: Path, environments: Path) -> list[str]:
    """Environments whose prefix extends another's (``lora-dev`` and ``lora-dev-eu``): names of
    one (``lora-dev-*``) would cover the other's, and a large catalog's router may invoke its
    components by that pattern (``infra.router.invoke_policies``)."""
    prefixes = {}
    for name in environment_names(environments):
        try:
            prefixes[name] = load_deployment(name, catalog, environments).env.prefix
        except CatalogError:
            continue  # reported with the environment
    return [
        f"environment {b!r}: field 'prefix': {pb!r} extends environment {a!r}'s {pa!r}, so "
        f"{pa}-* names cover {b!r}'s resources; choose a prefix that does not begin with {pa}-"
        for a, pa in prefixes.items()
        for b, pb in prefixes.items()
        if a != b and pb.startswith(f"{pa}-")
    ]


def _capacity(dep: Deployment) -> tuple[list[str], list[str]]:
    """The planner's refusals and warnings for an environment (``make plan`` prints the whole
    plan): a rank that pads every other adapter's slot, more adapters than host slots."""
    from config.plan import CapacityError, plan

    try:
        p = plan(dep)
    except CapacityError as exc:
        return [str(exc)], []
    return [], [f"  warning: environment {dep.env.name!r}: {w}" for w in p.warnings]


def _account_warnings(dep: Deployment) -> list[str]:
    """An environment with no ``account`` synthesizes
    account-agnostic stacks (AZs picked by name, quotas unknown). Warned here, where the shipped
    environment files are checked before anyone has an account; ``make preflight``, the first
    step of ``make release``, refuses it."""
    if not dep.env.deployable:
        return []
    quiet = (
        []
        if dep.env.observability.alarm_emails
        else [
            f"  warning: environment {dep.env.name!r}: its alarms notify no one: list on-call in "
            "observability.alarm_emails, or subscribe to its topic by hand"
        ]
    )
    if dep.env.account is not None:
        return quiet
    return [
        *quiet,
        f"  warning: environment {dep.env.name!r} names no account: set `account:` in its file "
        "before releasing (make preflight refuses it; AZs and quotas are planned per account)",
    ]


def usage_metrics_line(dep: Deployment) -> str | None:
    """How many custom metrics the router's usage records make in CloudWatch: one per metric
    name and tenant dimension value (the catalog's named tenants, and ``other``); none per
    adapter, so the count does not grow with the catalog."""
    from contracts.usage import USAGE_METRIC_NAMES

    if not dep.env.deployable:
        return None
    tenants = {
        t for a in dep.adapters for t in a.entry.allow.tenants if "*" not in t and str(t).isascii()
    }
    count = len(USAGE_METRIC_NAMES) * (len(tenants) + 1)
    return (
        f"  usage metrics: {count} custom metrics ({len(USAGE_METRIC_NAMES)} names x "
        f"{len(tenants)} named tenants + other), whatever the number of adapters; at "
        f"$0.30 a metric-month (estimate: CloudWatch's first-tier price as published "
        f"summaries give it; check AWS's pricing page) about ${0.30 * count:,.2f} a month"
    )


def zones_line(dep: Deployment) -> str | None:
    """Where the environment's VPC puts its subnets: chosen in its file, never looked up at
    synth (an account-specific synth outside the CDK CLI would get placeholder zones)."""
    if not dep.env.deployable:
        return None
    net = dep.env.network
    where = f"{dep.env.account or 'ACCOUNT'}/{dep.env.region}"
    if net.availability_zones:
        return f"  zones: {', '.join(net.availability_zones)} (network.availability_zones)"
    return (
        f"  zones: the first {net.max_azs} that Fn::GetAZs lists in {where} at deploy time "
        "(name them in network.availability_zones to choose)"
    )


def _plan(env: str) -> int:
    from config.plan import CapacityError, plan

    try:
        p = plan(load_deployment(env))
    except (CatalogError, CapacityError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(_table([list(r) for r in p.rows()], ["quantity", f"environment {env}"]))
    for warning in p.warnings:
        print(f"warning: {warning}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m config", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="validate the catalog (all environments by default)")
    check.add_argument("--env", help="one environment (default: every environment file)")
    check.add_argument("--catalog", type=Path, default=CATALOG_PATH)
    check.add_argument("--environments", type=Path, default=ENVIRONMENTS_DIR)
    plan_cmd = sub.add_parser("plan", help="device-memory plan: how many adapters fit")
    plan_cmd.add_argument("--env", required=True)
    args = parser.parse_args(argv)
    if args.command == "plan":
        return _plan(args.env)

    envs = [args.env] if args.env else environment_names(args.environments)
    failed = False
    for line in _prefix_clashes(args.catalog, args.environments):
        failed = True
        print(f"error: {line}", file=sys.stderr)
    for name in envs:
        try:
            dep = load_deployment(name, args.catalog, args.environments)
        except CatalogError as exc:
            failed = True
            for issue in exc.issues:
                print(f"error: {issue}", file=sys.stderr)
            continue
        _print_deployment(dep)
        errors, notes = _token_issues(dep, args.catalog)
        capacity_errors, warnings = _capacity(dep)
        errors += capacity_errors
        notes += warnings + _account_warnings(dep)
        for line in (usage_metrics_line(dep), zones_line(dep)):
            if line is not None:
                notes.insert(0, line)
        for line in notes:
            print(line)
        for line in errors:
            failed = True
            print(f"error: {line}", file=sys.stderr)
    if not args.env and (rows := quota_table(args.environments)):
        print("SageMaker quotas the environments need (make preflight reads the account's):")
        print(_table(rows, ["account", "region", "quota", "instances"]))
        print()
    if failed:
        print("catalog check failed", file=sys.stderr)
        return 1
    print(f"catalog ok: {len(envs)} environment(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
