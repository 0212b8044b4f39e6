"""``serving: merged`` in the catalog: its own base component in the routing table, room for it
on the instances, and no canary on it."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from config import CATALOG_PATH, ENVIRONMENTS_DIR, CatalogError, load_catalog, load_deployment

REAL = yaml.safe_load(CATALOG_PATH.read_text())


def _catalog(tmp_path: Path, **first: object) -> Path:
    data = copy.deepcopy(REAL)
    data["adapters"][0].update(first)
    path = tmp_path / "adapters.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _environments(tmp_path: Path, max_instance_count: int) -> Path:
    envs = tmp_path / "environments"
    envs.mkdir(exist_ok=True)
    dev = yaml.safe_load((ENVIRONMENTS_DIR / "dev.yaml").read_text())
    dev["serving"]["max_instance_count"] = max_instance_count
    (envs / "dev.yaml").write_text(yaml.safe_dump(dev))
    return envs


def test_a_merged_entry_routes_to_a_base_component_of_its_own(tmp_path) -> None:
    path = _catalog(tmp_path, serving="merged")
    dep = load_deployment("dev", path, _environments(tmp_path, 5))
    a = dep.adapters[0]
    assert a.merged and a.serving_component == f"{a.component_name}-merged"
    assert dep.routing_table().as_json()["adapters"][a.name]["component"] == a.serving_component
    assert a.component_names == (a.serving_component,)
    others = dep.adapters[1:]
    assert all(not o.merged and o.serving_component == o.component_name for o in others)


def test_a_merged_entry_needs_room_on_the_instances(tmp_path) -> None:
    """dev's 3 instances hold the base's 2 copies and a rolling batch; a merged component's 2
    more copies need 2 more instances (one GPU each on a g5.xlarge)."""
    path = _catalog(tmp_path, serving="merged")
    with pytest.raises(CatalogError) as exc:
        load_deployment("dev", path, _environments(tmp_path, 3))
    (issue,) = exc.value.issues
    assert issue.field == "serving.max_instance_count"
    assert REAL["adapters"][0]["name"] in issue.message and "raise it to 5" in issue.message


def test_a_merged_entry_cannot_carry_a_canary(tmp_path) -> None:
    path = _catalog(tmp_path, serving="merged", canary={"version": "9.9.9", "weight": 5})
    with pytest.raises(CatalogError, match="cannot carry a canary"):
        load_catalog(path)


def test_serving_takes_adapter_or_merged_only(tmp_path) -> None:
    with pytest.raises(CatalogError) as exc:
        load_catalog(_catalog(tmp_path, serving="fused"))
    assert any(i.field == "serving" for i in exc.value.issues)
