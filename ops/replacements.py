"""Which resources a template change makes CloudFormation replace, and which of those would fail.

CloudFormation replaces a resource when a create-only property changes (its resource schema's
``createOnlyProperties``; cfn-lint ships the schemas, so this works offline) or when the resource
type changes. A replacement creates the new resource before deleting the old one, so:

* a replaced resource whose physical name is fixed and unchanged fails the update ("CloudFormation
  cannot update a stack when a custom-named resource requires replacing", CloudFormation user
  guide, ``Name type``);
* a replaced stateful resource (bucket, key, repository, cache, secret, log group) loses its data,
  which is allowed only where the environment file says so (``allow_replacement``).

* a replaced resource whose ``Ref`` or attribute another stack imports (``Fn::ImportValue`` of
  an ``Export``; ``@aws-cdk/core:defaultCrossStackReferences`` is ``strong`` in cdk.json) fails
  the producer's update: CloudFormation refuses to change an export that is in use ("you can't
  modify or remove an output value that is referenced by another stack", CloudFormation user
  guide, exporting stack output values). The remedy is CDK's
  two-deploy weakening (aws-cdk-lib's README, "Resolving the deadly embrace").

A property that refers (``Ref`` / ``Fn::GetAtt``) to a replaced resource gets a new value, so the
replacement cascades through create-only properties that hold such references.

``python -m ops.replacements --env dev [--base REF]`` synthesizes the environment and compares
it with the committed snapshots (at ``REF`` when given), printing every replacement and exiting 1
on a forbidden one. ``make diff`` runs it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

#: Types whose replacement loses data or identity others hold on to.
STATEFUL_TYPES = frozenset(
    {
        "AWS::S3::Bucket",
        "AWS::KMS::Key",
        "AWS::ECR::Repository",
        "AWS::ElastiCache::ReplicationGroup",
        "AWS::ElastiCache::CacheCluster",
        "AWS::ElastiCache::ServerlessCache",
        "AWS::SecretsManager::Secret",
        "AWS::Logs::LogGroup",
    }
)
_REGION = "us-east-1"


@cache
def _schema(resource_type: str) -> dict[str, Any] | None:
    from cfnlint.schema import PROVIDER_SCHEMA_MANAGER

    try:
        return PROVIDER_SCHEMA_MANAGER.get_resource_schema(_REGION, resource_type).schema
    except Exception:
        return None


def create_only(resource_type: str) -> list[tuple[str, ...]]:
    """The create-only property paths of a type, as tuples of property names."""
    schema = _schema(resource_type)
    if schema is None:
        return []
    return [
        tuple(p.removeprefix("/properties/").split("/"))
        for p in schema.get("createOnlyProperties", [])
    ]


def name_properties(resource_type: str) -> list[str]:
    """Create-only top-level properties that name the resource (``ModelName``, ``BucketName``)."""
    return [
        path[0]
        for path in create_only(resource_type)
        if len(path) == 1 and path[0].endswith("Name") and not path[0].endswith("TypeName")
    ]


def _get(props: dict[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = props
    for part in path:
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def _refers_to(value: Any, ids: set[str]) -> bool:
    if isinstance(value, dict):
        if "Ref" in value and value["Ref"] in ids:
            return True
        att = value.get("Fn::GetAtt")
        if att is not None:
            target = att[0] if isinstance(att, list) else str(att).split(".")[0]
            if target in ids:
                return True
        return any(_refers_to(v, ids) for v in value.values())
    if isinstance(value, list):
        return any(_refers_to(v, ids) for v in value)
    return False


@dataclass(frozen=True)
class Replacement:
    stack: str
    logical_id: str
    type: str
    because: tuple[str, ...]
    fixed_name: str | None = None
    #: Exports of this resource's values that other stacks import: (export name, importers).
    imported: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @property
    def stateful(self) -> bool:
        return self.type in STATEFUL_TYPES

    def problem(self, allowed: frozenset[str] = frozenset()) -> str | None:
        """Why this replacement would fail or lose data; None when it is routine."""
        if self.fixed_name is not None:
            return (
                f"has the fixed name {self.fixed_name!r}: CloudFormation cannot create the "
                "replacement beside it; let CloudFormation name it, or change the name too"
            )
        if self.imported:
            uses = "; ".join(f"{name} by {', '.join(by)}" for name, by in self.imported)
            return (
                f"is exported and imported ({uses}): CloudFormation cannot change an export in "
                "use, so the update fails; first weaken the reference "
                "(CrossStackReferences.of(resource).produce(ReferenceStrength.BOTH) in CDK) and "
                "deploy the importing stacks, then replace it"
            )
        if self.stateful and not ({self.logical_id, f"{self.stack}/{self.logical_id}"} & allowed):
            return (
                "is stateful and would be recreated empty; list it under allow_replacement in "
                "the environment file if that is intended"
            )
        return None

    def __str__(self) -> str:
        return (
            f"{self.stack}/{self.logical_id} ({self.type}) is replaced: "
            f"{', '.join(self.because)} changed"
        )


def replacements(stack: str, old: dict[str, Any], new: dict[str, Any]) -> list[Replacement]:
    """The resources of ``stack`` that going from template ``old`` to ``new`` replaces."""
    before, after = old.get("Resources", {}), new.get("Resources", {})
    common = sorted(set(before) & set(after))
    why: dict[str, list[str]] = {}
    for lid in common:
        a, b = before[lid], after[lid]
        if a.get("Type") != b.get("Type"):
            why[lid] = ["Type"]
            continue
        pa, pb = a.get("Properties", {}), b.get("Properties", {})
        changed = [
            "/".join(path) for path in create_only(b["Type"]) if _get(pa, path) != _get(pb, path)
        ]
        if changed:
            why[lid] = changed
    # A create-only property that refers to a replaced resource changes too (a new ARN or name).
    grew = True
    while grew:
        grew = False
        for lid in common:
            if lid in why:
                continue
            props = after[lid].get("Properties", {})
            for path in create_only(after[lid]["Type"]):
                if _refers_to(_get(props, path), set(why)):
                    why[lid] = [f"{'/'.join(path)} (refers to a replaced resource)"]
                    grew = True
                    break
    out = []
    for lid, because in why.items():
        rtype = after[lid]["Type"]
        props_a, props_b = before[lid].get("Properties", {}), after[lid].get("Properties", {})
        fixed = None
        for name in name_properties(rtype):
            value = props_b.get(name)
            # A name that refers to another resource of the stack (a replication group's
            # CacheSubnetGroupName) names that resource, not this one.
            if (
                value is not None
                and value == props_a.get(name)
                and not _refers_to(value, set(after) - {lid})
            ):
                fixed = value if isinstance(value, str) else json.dumps(value)
                break
        out.append(Replacement(stack, lid, rtype, tuple(because), fixed))
    return out


def check(
    old: dict[str, dict[str, Any]], new: dict[str, dict[str, Any]], allowed: frozenset[str]
) -> tuple[list[Replacement], list[tuple[Replacement, str]]]:
    """Every replacement between two sets of templates (by stack), and the forbidden ones."""
    found = [
        with_imports(r, old)
        for stack in sorted(set(old) & set(new))
        for r in replacements(stack, old[stack], new[stack])
    ]
    bad = [(r, p) for r in found if (p := r.problem(allowed)) is not None]
    return found, bad


def with_imports(r: Replacement, deployed: dict[str, dict[str, Any]]) -> Replacement:
    """``r`` with the exports of its values that the deployed stacks import (the importers are
    the deployed ones: the producer's stack updates before them)."""
    outputs = deployed.get(r.stack, {}).get("Outputs", {})
    exported = [
        o["Export"]["Name"]
        for o in outputs.values()
        if isinstance(o.get("Export", {}).get("Name"), str)
        and _refers_to(o.get("Value"), {r.logical_id})
    ]
    imported = []
    for name in exported:
        needle = json.dumps({"Fn::ImportValue": name})
        by = tuple(
            sorted(s for s, t in deployed.items() if s != r.stack and needle in json.dumps(t))
        )
        if by:
            imported.append((name, by))
    return replace(r, imported=tuple(imported)) if imported else r


def render(env: str, found: list[Replacement], bad: list[tuple[Replacement, str]]) -> str:
    if not found:
        return f"{env}: no resource is replaced"
    lines = [f"{env}: {len(found)} resource(s) replaced"]
    problems = {id(r): p for r, p in bad}
    for r in found:
        lines.append(f"  {'FAIL' if id(r) in problems else 'ok  '} {r}")
        if id(r) in problems:
            lines.append(f"       it {problems[id(r)]}")
    return "\n".join(lines)


def snapshots_at(env: str, ref: str | None, root: Path) -> dict[str, dict[str, Any]]:
    """The committed snapshot templates of an environment, from the work tree or a git ref."""
    rel = f"infra/snapshots/{env}"
    if ref is None:
        return {
            p.name.removesuffix(".template.json"): json.loads(p.read_text())
            for p in sorted((root / rel).glob("*.template.json"))
        }
    names = subprocess.run(
        ["git", "ls-tree", "--name-only", f"{ref}:{rel}"],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
    )
    if names.returncode != 0:
        raise SystemExit(f"no snapshots of {env!r} at {ref!r}: {names.stderr.strip()}")
    out = {}
    for name in names.stdout.split():
        if name.endswith(".template.json"):
            body = subprocess.run(
                ["git", "show", f"{ref}:{rel}/{name}"],
                cwd=root,
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            out[name.removesuffix(".template.json")] = json.loads(body)
    return out


def main(argv: list[str] | None = None) -> int:
    from config import CATALOG_PATH, ENVIRONMENTS_DIR, environment_names, load_deployment
    from ops.snapshots import ROOT, synth

    ap = argparse.ArgumentParser(prog="python -m ops.replacements", description=__doc__)
    ap.add_argument("--env", action="append", help="environment (default: every deployable)")
    ap.add_argument(
        "--base",
        help="git ref whose snapshots stand for what is deployed "
        "(default: the snapshots in the work tree)",
    )
    ap.add_argument("--catalog", type=Path, default=CATALOG_PATH)
    ap.add_argument("--environments-dir", type=Path, default=ENVIRONMENTS_DIR)
    args = ap.parse_args(argv)
    failed = False
    for env in args.env or environment_names(args.environments_dir, deployable=True):
        dep = load_deployment(env, args.catalog, args.environments_dir)
        allowed = frozenset(dep.env.allow_replacement)
        with tempfile.TemporaryDirectory(prefix=f"cdk-{env}-") as tmp:
            new = synth(env, Path(tmp), args.catalog, args.environments_dir)
        found, bad = check(snapshots_at(env, args.base, ROOT), new, allowed)
        print(render(env, found, bad))
        failed |= bool(bad)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
