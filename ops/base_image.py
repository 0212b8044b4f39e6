"""The runtime image's base, pinned by digest: ``python -m ops.base_image pin|check``.

``runtime/Dockerfile`` names vLLM's image in ``ARG VLLM_IMAGE=REPO:TAG@sha256:DIGEST``. A tag
alone can be moved under a passing build; a digest cannot. The digest is the registry's and
can only be known where the registry is reachable (this repository's own machines cannot
reach Docker Hub), so it is computed there:

- ``pin`` asks the registry (``docker buildx imagetools inspect``) what the tag names now and
  writes that digest into the Dockerfile; commit the change;
- ``check`` fails when the Dockerfile has no digest, or when the tag no longer resolves to it
  (a re-tag upstream: review it, then ``pin`` again). The workflow's image job runs it before
  building; ``make release`` pins an unpinned file itself and says so.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "runtime" / "Dockerfile"
_ARG = re.compile(
    r"^ARG VLLM_IMAGE=(?P<ref>[a-z0-9./_-]+:[A-Za-z0-9._-]+)(?:@(?P<digest>sha256:[0-9a-f]{64}))?$",
    re.MULTILINE,
)


class BaseImageError(RuntimeError):
    pass


def pinned(dockerfile: Path = DOCKERFILE) -> tuple[str, str | None]:
    """(REPO:TAG, its pinned digest or None) from the Dockerfile's ``ARG VLLM_IMAGE``."""
    found = _ARG.search(dockerfile.read_text())
    if found is None:
        raise BaseImageError(f"{dockerfile} has no `ARG VLLM_IMAGE=REPO:TAG[@sha256:...]` line")
    return found["ref"], found["digest"]


def registry_digest(ref: str) -> str:
    """What the registry says ``ref`` names now (the manifest list's digest)."""
    proc = subprocess.run(
        ["docker", "buildx", "imagetools", "inspect", ref, "--format", "{{json .Manifest}}"],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise BaseImageError(f"the registry did not resolve {ref}: {proc.stderr.strip()[-500:]}")
    digest = json.loads(proc.stdout)["digest"]
    if not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
        raise BaseImageError(f"the registry answered {digest!r} for {ref}, not a sha256 digest")
    return digest


def pin(dockerfile: Path = DOCKERFILE, resolve: Callable[[str], str] = registry_digest) -> str:
    """Write the digest the tag names now into the Dockerfile; the pinned reference."""
    ref, _ = pinned(dockerfile)
    digest = resolve(ref)
    text = _ARG.sub(f"ARG VLLM_IMAGE={ref}@{digest}", dockerfile.read_text(), count=1)
    dockerfile.write_text(text)
    return f"{ref}@{digest}"


def check(dockerfile: Path = DOCKERFILE, resolve: Callable[[str], str] = registry_digest) -> str:
    """The pinned reference, after proving the tag still names it."""
    ref, digest = pinned(dockerfile)
    if digest is None:
        raise BaseImageError(
            f"{dockerfile.relative_to(ROOT) if dockerfile.is_relative_to(ROOT) else dockerfile} "
            f"names {ref} without a digest: run `python -m ops.base_image pin` where the "
            "registry is reachable, review and commit"
        )
    now = resolve(ref)
    if now != digest:
        raise BaseImageError(
            f"{ref} now names {now}, not the pinned {digest}: the tag was moved upstream; "
            "review the new image, then `python -m ops.base_image pin`"
        )
    return f"{ref}@{digest}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ops.base_image", description=__doc__)
    ap.add_argument("action", choices=["pin", "check"])
    args = ap.parse_args(argv)
    try:
        ref = (pin if args.action == "pin" else check)()
    except BaseImageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"{args.action}: {ref}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
