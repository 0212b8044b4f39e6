"""The smoke check judges an answer by the artifact the container says it served."""

from __future__ import annotations

from ops.smoke import Result, render

SHA = "ab" * 32


def _r(artifact, status=200) -> Result:
    return Result("claims", "1.2.0", status, 10.0, artifact, "out")


def test_the_catalog_version_from_the_artifacts_own_manifest_passes() -> None:
    r = _r({"name": "claims", "version": "1.2.0", "sha256": SHA})
    assert r.ok and "claims@1.2.0 sha256:abababababab" in render([r])


def test_another_version_or_another_artifact_fails_naming_the_expected_one() -> None:
    for artifact in (
        {"name": "claims", "version": "1.1.0", "sha256": SHA},
        {"name": "other", "version": "1.2.0", "sha256": SHA},
    ):
        r = _r(artifact)
        assert not r.ok and "expected claims@1.2.0" in render([r])


def test_no_reported_identity_fails() -> None:
    assert not _r(None).ok
    assert not _r({"name": "claims", "version": "1.2.0"}, status=424).ok


def _canary_deployment(tmp_path, **canary):
    import copy

    import yaml

    from config import CATALOG_PATH, ENVIRONMENTS_DIR, load_deployment

    data = copy.deepcopy(yaml.safe_load(CATALOG_PATH.read_text()))
    data["adapters"] = data["adapters"][:1]
    data["adapters"][0].update(version="1.0.0", canary=canary or {"version": "1.1.0", "weight": 25})
    path = tmp_path / "adapters.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return load_deployment("dev", path, ENVIRONMENTS_DIR)


def _router(name: str, versions: list[str]):
    """A router that answers its n-th request from ``versions[n]`` (the last one after)."""
    import json

    def respond(calls: int, body: bytes) -> tuple[int, dict[str, str], bytes]:
        v = versions[min(calls, len(versions)) - 1]
        return (
            200,
            {},
            json.dumps(
                {"output": "ok", "version": v, "artifact": {"name": name, "version": v}}
            ).encode(),
        )

    return respond


def test_a_canary_is_smoked_too_and_a_canary_never_reached_fails(tmp_path) -> None:
    from ops.smoke import invoke_all
    from tests.fakes import HttpEndpoint

    dep = _canary_deployment(tmp_path)
    name = dep.adapters[0].name
    router = HttpEndpoint(_router(name, ["1.0.0", "1.0.0", "1.1.0"]))
    try:
        results = invoke_all(dep, router.url)
        assert [(r.version, r.ok) for r in results] == [("1.0.0", True), ("1.1.0", True)]
        assert router.calls == 3
    finally:
        router.close()
    rolled_back = HttpEndpoint(_router(name, ["1.0.0"]))
    try:
        results = invoke_all(dep, rolled_back.url)
        assert [(r.version, r.ok) for r in results] == [("1.0.0", True), ("1.1.0", False)]
        assert "roll the canary back" in render(results)
        assert rolled_back.calls == 3 + 4  # 3 + 100 / weight new session keys
    finally:
        rolled_back.close()


def test_a_shadow_canary_requires_only_the_stable_version(tmp_path) -> None:
    """A shadow canary serves no caller until the router's paired test promotes it: a release
    with one must not end in a failed smoke check. Once promoted, its answers
    are accepted beside the stable version's."""
    from ops.smoke import invoke_all
    from tests.fakes import HttpEndpoint

    dep = _canary_deployment(tmp_path, version="1.1.0", shadow=0.5)
    name = dep.adapters[0].name
    shadow = HttpEndpoint(_router(name, ["1.0.0"]))
    try:
        assert [(r.version, r.ok) for r in invoke_all(dep, shadow.url)] == [("1.0.0", True)]
        assert shadow.calls == 1
    finally:
        shadow.close()
    promoted = HttpEndpoint(_router(name, ["1.1.0", "1.0.0"]))
    try:
        results = invoke_all(dep, promoted.url)
        assert [(r.version, r.ok) for r in results] == [("1.0.0", True), ("1.1.0", True)]
    finally:
        promoted.close()
