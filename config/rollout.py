"""Promote a canary, or roll an adapter back: each one edit of its catalog entry.

``python -m config.rollout promote NAME``: the canary's version (and what publish recorded of
it) becomes the entry's, the replaced version is kept as ``previous``, and the canary goes.
The next release updates the stable component's artifact and removes the canary's.

``python -m config.rollout rollback NAME``: with a canary, the canary goes (the stable version
never stopped serving); without one, ``previous`` becomes the entry's version again. Its
archive is still in S3: publish never overwrites a version's key (``training.publish``).

Both print what they changed and leave the commit (and the release) to the caller.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from config.loader import CATALOG_PATH, CatalogError, load_catalog
from config.schema import AdapterEntry
from config.writer import update_adapter

#: The top-level fields a version brings with it (``_Published`` plus the version itself).
_VERSION_FIELDS = ("version", "artifact", "sha256", "weights_sha256", "gated_base_revision")


class RolloutError(ValueError):
    """The entry cannot be promoted or rolled back as asked; the message says why."""


def _entry(name: str, path: Path) -> AdapterEntry:
    for a in load_catalog(path).adapters:
        if a.name == name:
            return a
    raise RolloutError(f"adapter {name!r} is not in {path}")


def _version_fields(version: str, published: dict[str, str]) -> dict[str, str | None]:
    """The entry's version fields set to one version's (a field that version lacks is removed,
    so an old ``artifact`` never outlives its version)."""
    return {k: ({"version": version} | published).get(k) for k in _VERSION_FIELDS}


def promote(name: str, path: Path = CATALOG_PATH) -> str:
    a = _entry(name, path)
    if a.canary is None:
        raise RolloutError(f"adapter {name!r} has no canary to promote")
    previous = {"version": a.version, **a.published()}
    update_adapter(
        name,
        {
            **_version_fields(a.canary.version, a.canary.published()),
            "canary": None,
            "previous": previous,
        },
        path,
    )
    return (
        f"{name}: version {a.canary.version} promoted (was {a.version}, kept as previous "
        "for make rollback); release to update the stable component"
    )


def rollback(name: str, path: Path = CATALOG_PATH) -> str:
    a = _entry(name, path)
    if a.canary is not None:
        update_adapter(name, {"canary": None}, path)
        return (
            f"{name}: canary {a.canary.version} removed; version {a.version} serves every "
            "request after the release"
        )
    if a.previous is None:
        raise RolloutError(
            f"adapter {name!r} has neither a canary nor a previous version to roll back to "
            "(a promotion with make promote records the version it replaced)"
        )
    update_adapter(
        name,
        {**_version_fields(a.previous.version, a.previous.published()), "previous": None},
        path,
    )
    return f"{name}: rolled back from version {a.version} to {a.previous.version}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m config.rollout",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("action", choices=("promote", "rollback"))
    ap.add_argument("adapter")
    ap.add_argument("--catalog", type=Path, default=CATALOG_PATH)
    args = ap.parse_args(argv)
    try:
        print((promote if args.action == "promote" else rollback)(args.adapter, args.catalog))
    except (RolloutError, CatalogError, KeyError) as exc:
        print(f"{args.action} failed: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
