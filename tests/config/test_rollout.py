"""A canary in the catalog, and promotion and rollback as catalog edits."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from config import CATALOG_PATH, ENVIRONMENTS_DIR, CatalogError, load_catalog, load_deployment
from config.rollout import RolloutError, promote, rollback

ROOT = Path(__file__).resolve().parents[2]
REAL = yaml.safe_load(CATALOG_PATH.read_text())
SHA_A, SHA_B, SHA_C = "a" * 64, "b" * 64, "c" * 64


def _catalog(tmp_path: Path, **medical: object) -> Path:
    """The shipped catalog (its comments and layout, which the edits must keep) with the first
    adapter's entry given ``medical``'s fields."""
    data = copy.deepcopy(REAL)
    data["adapters"][0].update(medical)
    path = tmp_path / "adapters.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _entry(path: Path):
    return load_catalog(path).adapters[0]


def test_a_canary_loads_and_the_routing_table_routes_its_share(tmp_path) -> None:
    path = _catalog(
        tmp_path,
        version="1.0.0",
        canary={"version": "1.1.0", "weight": 10, "sha256": SHA_A, "weights_sha256": SHA_B},
    )
    dep = load_deployment("dev", path, ENVIRONMENTS_DIR)
    a = dep.adapters[0]
    assert a.component_names == (a.component_name, f"{a.component_name}-canary")
    route = dep.routing_table().as_json()["adapters"][a.name]
    assert route["version"] == "1.0.0"
    assert route["canary"] == {
        "component": f"{a.component_name}-canary",
        "version": "1.1.0",
        "weight": 10,
        "max_error_rate": 0.05,
        "window_s": 300,
        "min_requests": 20,
        # Two failing callers by default, capped at the callers the entry admits.
        "min_callers": min(2, len(a.entry.allow.tenants) + len(a.entry.allow.principals)),
        "sha256": SHA_A,
        "weights_sha256": SHA_B,
        # Not a shadow: the quality test's settings ride along at their defaults, and the
        # signals are the ones a rewrite task (chrF) is compared on.
        "margins": {"facts_kept": 0.05, "answered": 0.02, "repetition": 0.05},
        "min_pairs": 30,
        "promote_after": 200,
        "promote": "split",
        "confidence": 0.95,
        # Its decisions (the 5xx rule's too) are recorded in its version's package, and read
        # back from it when the cache lost them.
        "registry_group": a.component_name,
    }


@pytest.mark.parametrize(
    ("canary", "field"),
    [
        ({"version": "1.0.0", "weight": 10}, "-"),  # the stable version itself
        ({"version": "1.1.0", "weight": 0}, "canary.weight"),
        ({"version": "1.1.0", "weight": 51}, "canary.weight"),
        ({"version": "1.1.0"}, "canary.weight"),
        ({"version": "1.1.0", "weight": 5, "max_error_rate": 0}, "canary.max_error_rate"),
        ({"version": "1.1.0", "weight": 5, "sha256": "nope"}, "canary.sha256"),
    ],
)
def test_a_bad_canary_fails_check_naming_the_entry_and_field(tmp_path, canary, field) -> None:
    path = _catalog(tmp_path, version="1.0.0", canary=canary)
    with pytest.raises(CatalogError) as exc:
        load_catalog(path)
    name = REAL["adapters"][0]["name"]
    issue = next(i for i in exc.value.issues if i.field == field)
    assert issue.entry == f"adapter {name!r}"


def test_an_adapter_named_like_anothers_canary_component_is_refused(tmp_path) -> None:
    first = REAL["adapters"][0]
    data = copy.deepcopy(REAL)
    data["adapters"][0]["canary"] = {"version": "9", "weight": 5}
    data["adapters"].append({**first, "name": f"{first['name']}-canary"})
    path = tmp_path / "adapters.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(CatalogError, match="is also adapter"):
        load_deployment("dev", path, ENVIRONMENTS_DIR)


def test_a_canary_gated_on_an_older_base_fails_check(tmp_path) -> None:
    path = _catalog(tmp_path, canary={"version": "7", "weight": 5, "gated_base_revision": "0" * 40})
    with pytest.raises(CatalogError) as exc:
        load_catalog(path)
    assert any(i.field == "canary.gated_base_revision" for i in exc.value.issues)


def test_promote_then_rollback_is_one_edit_each_and_restores_the_entry(tmp_path) -> None:
    path = _catalog(
        tmp_path,
        version="1.0.0",
        sha256=SHA_A,
        weights_sha256=SHA_B,
        canary={"version": "1.1.0", "weight": 10, "sha256": SHA_C},
    )
    path.write_text("# a comment the edits keep\n" + path.read_text())
    before = _entry(path)

    print(promote(before.name, path))
    promoted = _entry(path)
    assert (promoted.version, promoted.sha256, promoted.canary) == ("1.1.0", SHA_C, None)
    # The old version's weights pin goes with it: the new version has none recorded yet.
    assert promoted.weights_sha256 is None
    assert promoted.previous is not None
    assert promoted.previous.model_dump(exclude_none=True) == {
        "version": "1.0.0",
        "sha256": SHA_A,
        "weights_sha256": SHA_B,
    }
    assert path.read_text().startswith("# a comment the edits keep\n")

    print(rollback(before.name, path))
    back = _entry(path)
    assert (back.version, back.sha256, back.weights_sha256) == ("1.0.0", SHA_A, SHA_B)
    assert back.previous is None and back.canary is None
    assert back.model_dump(exclude={"canary"}) == before.model_dump(exclude={"canary"})


def test_rollback_during_a_canary_removes_only_the_canary(tmp_path) -> None:
    path = _catalog(
        tmp_path, version="1.0.0", sha256=SHA_A, canary={"version": "1.1.0", "weight": 10}
    )
    name = _entry(path).name
    rollback(name, path)
    entry = _entry(path)
    assert (entry.version, entry.sha256, entry.canary) == ("1.0.0", SHA_A, None)


def test_rollback_with_nothing_to_go_back_to_says_so(tmp_path) -> None:
    path = _catalog(tmp_path)
    with pytest.raises(RolloutError, match="neither a canary nor a previous version"):
        rollback(_entry(path).name, path)
    with pytest.raises(RolloutError, match="no canary to promote"):
        promote(_entry(path).name, path)


def test_make_rollback_runs_the_command(tmp_path) -> None:
    path = _catalog(tmp_path, canary={"version": "4.0.0", "weight": 10})
    name = _entry(path).name
    out = subprocess.run(
        [sys.executable, "-m", "config.rollout", "rollback", name, "--catalog", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    assert "canary 4.0.0 removed" in out.stdout
    missing = subprocess.run(
        [sys.executable, "-m", "config.rollout", "rollback", "no-such", "--catalog", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert missing.returncode == 1 and "no-such" in missing.stderr


def test_an_entry_with_blank_lines_and_comments_inside_is_edited_whole(tmp_path) -> None:
    """A blank line or a comment inside an entry does not end it: the canary after it is
    still the entry's (the edit once stopped at the blank line and left the canary in)."""
    path = _catalog(tmp_path, version="1.0.0")
    name = _entry(path).name
    text = path.read_text()
    head = f"- name: {name}\n"
    i = text.index(head) + len(head)
    indent = "  " + text[: text.index(head)].rsplit("\n", 1)[-1]
    path.write_text(
        text[:i] + f"\n{indent}# the canary under evaluation\n{indent}canary: "
        "{version: '1.1.0', weight: 10}\n\n" + text[i:]
    )
    assert _entry(path).canary is not None
    print(rollback(name, path))
    entry = _entry(path)
    assert entry.canary is None and entry.version == "1.0.0"
    assert "# the canary under evaluation" in path.read_text()
    assert [a.name for a in load_catalog(path).adapters] == [a["name"] for a in REAL["adapters"]]
