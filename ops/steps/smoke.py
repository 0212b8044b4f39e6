"""The ``smoke`` step: every adapter invoked once through the router (``ops.smoke``); a passing
check is recorded against the fingerprint of what is deployed, so it runs again only after a
change."""

from __future__ import annotations

from ops.steps.base import Release, ReleaseError

NAME = "smoke"
SUMMARY = "invoke every adapter once through the router (ops.smoke)"


def missing(r: Release) -> list[str]:
    marker = r._get_json(r.smoke_key())
    if marker and marker.get("fingerprint") == r.fingerprint():
        return []
    return ["no passing smoke check of what is deployed now"]


def run(r: Release) -> None:
    if r.tools.smoke(r.env) != 0:
        raise ReleaseError(
            "the smoke check failed: an adapter did not answer from its own "
            "component with its catalog version"
        )
    r._put_json(r.smoke_key(), {"fingerprint": r.fingerprint()})
