"""The smoke check judges an answer by the artifact the container says it served."""

from __future__ import annotations

from infra.smoke import Result, render

SHA = "ab" * 32


def _r(artifact, status=200) -> Result:
    return Result("claims", "1.2.0", status, 10.0, artifact, "out")


def test_the_catalog_version_from_the_artifacts_own_manifest_passes() -> None:
    r = _r({"name": "claims", "version": "1.2.0", "sha256": SHA})
    assert r.ok and "claims@1.2.0 sha256:abababababab" in render([r])


def test_another_version_or_another_artifact_fails_naming_the_expected_one() -> None:
    for artifact in ({"name": "claims", "version": "1.1.0", "sha256": SHA},
                     {"name": "other", "version": "1.2.0", "sha256": SHA}):  # fmt: skip
        r = _r(artifact)
        assert not r.ok and "expected claims@1.2.0" in render([r])


def test_no_reported_identity_fails() -> None:
    assert not _r(None).ok
    assert not _r({"name": "claims", "version": "1.2.0"}, status=424).ok
