"""Committed template snapshots per environment, and the offline diff against them.

``python -m ops.snapshots check [--env NAME]`` synthesizes the app as a user would (``app.py``
with ``-c env=NAME``), compares every template with ``infra/snapshots/NAME/``, and on any
difference prints ``cdk diff --template`` for each stack that changed and exits 1.
``python -m ops.snapshots update [--env NAME]`` rewrites the snapshots (``make snapshot``).
A template change is therefore a reviewed change: it shows up in the pull request as a diff of
the snapshot files.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from config import environment_names

ROOT = Path(__file__).resolve().parents[1]
SNAPSHOTS = ROOT / "infra" / "snapshots"
CDK = [str(ROOT / "node_modules" / ".bin" / "cdk")]


class SynthError(RuntimeError):
    pass


def synth(
    env: str, outdir: Path, catalog: Path | None = None, environments_dir: Path | None = None
) -> dict[str, dict]:
    """Run ``app.py`` for one environment into ``outdir``; templates by stack name."""
    context = json.loads((ROOT / "cdk.json").read_text())["context"] | {"env": env}
    if catalog is not None:
        context["catalog"] = str(catalog)
    if environments_dir is not None:
        context["environments_dir"] = str(environments_dir)
    proc = subprocess.run(
        [sys.executable, str(ROOT / "app.py")],
        cwd=ROOT,
        env={
            **os.environ,
            "CDK_CONTEXT_JSON": json.dumps(context),
            "CDK_OUTDIR": str(outdir),
            "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
        },
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise SynthError(f"synth of {env!r} failed:\n{proc.stderr[-4000:]}")
    # A context lookup nobody performed leaves CDK's placeholders in the templates (zones
    # ``dummy1a``...): the cloud assembly lists it as ``missing``, and `cdk deploy --app DIR`
    # cannot supply it. Such an assembly is never deployed.
    missing = json.loads((outdir / "manifest.json").read_text()).get("missing", [])
    if missing:
        keys = ", ".join(m.get("key", "?") for m in missing)
        raise SynthError(
            f"synth of {env!r} needs context nothing looked up ({keys}); choose the value in "
            "the environment file (network.availability_zones for zones) instead of a lookup"
        )
    return {
        p.name.removesuffix(".template.json"): json.loads(p.read_text())
        for p in sorted(outdir.glob("*.template.json"))
    }


@dataclass
class Comparison:
    env: str
    snapshots: Path = SNAPSHOTS
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not (self.added or self.removed or self.changed)


def compare(env: str, templates: dict[str, dict], snapshots: Path = SNAPSHOTS) -> Comparison:
    directory = snapshots / env
    saved = {
        p.name.removesuffix(".template.json"): json.loads(p.read_text())
        for p in sorted(directory.glob("*.template.json"))
    }
    out = Comparison(env, snapshots)
    out.added = sorted(set(templates) - set(saved))
    out.removed = sorted(set(saved) - set(templates))
    out.changed = sorted(n for n in set(saved) & set(templates) if saved[n] != templates[n])
    return out


def write(env: str, templates: dict[str, dict]) -> None:
    directory = SNAPSHOTS / env
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    for name, template in templates.items():
        (directory / f"{name}.template.json").write_text(json.dumps(template, indent=1) + "\n")


def template_diff(outdir: Path, stack: str, snapshot: Path) -> str:
    """``cdk diff --template``: the synthesized stack against a template file, offline."""
    proc = subprocess.run(
        [
            *CDK,
            "diff",
            "--app",
            str(outdir),
            "--exclusively",
            "--no-notices",
            stack,
            "--template",
            str(snapshot),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        env={
            **os.environ,
            "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
            "CDK_DISABLE_VERSION_CHECK": "1",
        },
    )
    return (proc.stdout + proc.stderr).strip()


def report(cmp: Comparison, outdir: Path) -> str:
    lines = []
    for name in cmp.added:
        lines.append(f"+ stack {name} is new (no snapshot)")
    for name in cmp.removed:
        lines.append(f"- stack {name} is gone from the synth")
    for name in cmp.changed:
        lines.append(f"~ stack {name} differs from its snapshot:")
        lines.append(template_diff(outdir, name, cmp.snapshots / cmp.env / f"{name}.template.json"))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ops.snapshots", description=__doc__)
    parser.add_argument("action", choices=["check", "update"])
    parser.add_argument("--env", action="append", help="environment (default: every deployable)")
    args = parser.parse_args(argv)
    envs = args.env or environment_names(deployable=True)
    failed = False
    for env in envs:
        with tempfile.TemporaryDirectory(prefix=f"cdk-{env}-") as tmp:
            outdir = Path(tmp)
            templates = synth(env, outdir)
            if args.action == "update":
                write(env, templates)
                print(
                    f"{env}: wrote {len(templates)} template snapshots to "
                    f"{(SNAPSHOTS / env).relative_to(ROOT)}"
                )
                continue
            cmp = compare(env, templates)
            if cmp.clean:
                print(f"{env}: {len(templates)} templates match their snapshots")
                continue
            failed = True
            print(f"{env}: the synth differs from the committed snapshots\n{report(cmp, outdir)}")
            print(f"\nreview the change, then run `make snapshot` and commit infra/snapshots/{env}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
