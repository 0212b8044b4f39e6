"""What a catalog change does to an environment, in words a reviewer reads in a pull request.

``python -m ops.changes --env dev [--base REF] [--markdown]`` compares the catalog at a git
ref (default ``HEAD``) with the working tree, through the same loader synth uses, and lists the
adapters added, removed or changed with the inference component each change adds, updates or
deletes, and its adapter stack.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from config import CATALOG_PATH, CatalogError, Deployment, ResolvedAdapter, load_deployment
from infra.adapters import artifact_url, shard_of

ROOT = Path(__file__).resolve().parents[1]
#: Entry fields that change what the adapter component serves (its ArtifactUrl).
SERVED = ("version", "artifact", "sha256")
#: Entry fields only the router's table carries.
ROUTED = ("allow", "description", "task")


@dataclass(frozen=True)
class Change:
    adapter: str
    kind: str  # added | removed | changed
    component: str
    stack: str
    fields: tuple[str, ...] = ()

    @property
    def effect(self) -> str:
        if self.kind == "added":
            return f"adds inference component {self.component} and its route"
        if self.kind == "removed":
            return f"deletes inference component {self.component} and its route"
        served = [f for f in self.fields if f in SERVED]
        routed = [f for f in self.fields if f in ROUTED]
        parts = []
        if served:
            parts.append(
                f"updates {self.component}'s ArtifactUrl in place (SageMaker re-registers "
                "the adapter)"
            )
        if routed:
            parts.append("updates its route in the router's table")
        if not parts:
            parts.append(
                "changes training settings only; nothing deployed changes until a "
                "new artifact is published"
            )
        return "; ".join(parts)


def _fields(before: ResolvedAdapter, after: ResolvedAdapter, b: Deployment, a: Deployment):
    old, new = before.entry.model_dump(), after.entry.model_dump()
    changed = [k for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]
    if "artifact" not in changed and artifact_url(b, before) != artifact_url(a, after):
        changed.append("artifact")
    return tuple(changed)


def summarize(before: Deployment, after: Deployment) -> list[Change]:
    prefix = after.env.prefix
    old = {x.name: x for x in before.adapters}
    new = {x.name: x for x in after.adapters}

    def change(a: ResolvedAdapter, kind: str, fields: tuple[str, ...] = ()) -> Change:
        stack = f"{prefix}-adapters-{shard_of(a.name):02d}"
        return Change(a.name, kind, a.component_name, stack, fields)

    out = [change(new[n], "added") for n in sorted(set(new) - set(old))]
    out += [change(old[n], "removed") for n in sorted(set(old) - set(new))]
    for n in sorted(set(old) & set(new)):
        fields = _fields(old[n], new[n], before, after)
        if fields:
            out.append(change(new[n], "changed", fields))
    return out


def base_changes(before: Deployment, after: Deployment) -> list[str]:
    """Changes to the shared base, which touch every component."""
    notes = []
    if (before.base_key, before.base.revision) != (after.base_key, after.base.revision):
        notes.append(
            f"base model {before.base_key}@{before.base.revision[:12]} -> "
            f"{after.base_key}@{after.base.revision[:12]}: the model and base component are "
            "replaced and every adapter must be retrained for the new base"
        )
    return notes


def catalog_at(ref: str, dest: Path) -> Path:
    """The catalog file as committed at ``ref``."""
    rel = CATALOG_PATH.relative_to(ROOT)
    proc = subprocess.run(
        ["git", "show", f"{ref}:{rel.as_posix()}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"cannot read {rel} at {ref!r}: {proc.stderr.strip()}")
    path = dest / "adapters.yaml"
    path.write_text(proc.stdout)
    return path


def render(env: str, changes: list[Change], notes: list[str], markdown: bool) -> str:
    if not changes and not notes:
        return f"{env}: no catalog changes"
    if markdown:
        lines = [
            f"### Catalog changes ({env})",
            "",
            "| adapter | change | component | stack | effect |",
            "|---|---|---|---|---|",
        ]
        lines += [
            f"| {c.adapter} | {c.kind}{' (' + ', '.join(c.fields) + ')' if c.fields else ''}"
            f" | {c.component} | {c.stack} | {c.effect} |"
            for c in changes
        ]
        lines += [f"\n**{n}**" for n in notes]
        return "\n".join(lines)
    lines = [f"{env}: catalog changes"]
    for c in changes:
        what = f"{c.kind} ({', '.join(c.fields)})" if c.fields else c.kind
        lines.append(f"  {c.adapter}: {what} -> {c.effect} [{c.stack}]")
    lines += [f"  ! {n}" for n in notes]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ops.changes", description=__doc__)
    parser.add_argument("--env", default="dev")
    parser.add_argument("--base", default="HEAD", help="git ref to compare with (default HEAD)")
    parser.add_argument("--catalog", type=Path, default=CATALOG_PATH, help="the new catalog")
    parser.add_argument("--markdown", action="store_true", help="a table for a job summary")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        try:
            before = load_deployment(args.env, catalog_at(args.base, Path(tmp)))
            after = load_deployment(args.env, args.catalog)
        except CatalogError as exc:
            print(f"catalog error:\n{exc}", file=sys.stderr)
            return 1
    print(render(args.env, summarize(before, after), base_changes(before, after), args.markdown))
    return 0


if __name__ == "__main__":
    sys.exit(main())
