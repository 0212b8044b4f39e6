"""The capacity planner: the seed formula, refusals that name the setting, stable slot counts."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from config import CATALOG_PATH, ENVIRONMENTS_DIR, load_deployment
from config.plan import GIB, CapacityError, base_bytes, plan, slot_rank

REAL = yaml.safe_load(CATALOG_PATH.read_text())


def _env(tmp_path: Path, **serving: object) -> Path:
    env = yaml.safe_load((ENVIRONMENTS_DIR / "dev.yaml").read_text())
    env["serving"].update(serving)
    directory = tmp_path / "envs"
    directory.mkdir(exist_ok=True)
    (directory / "dev.yaml").write_text(yaml.safe_dump(env))
    return directory


def test_the_seed_formula_on_a_g5_xlarge() -> None:
    dep = load_deployment("dev")
    p = plan(dep)
    usable = 24.0 * dep.env.serving.vram_headroom
    expected = int(
        (usable - base_bytes(dep.base) / GIB - dep.env.serving.kv_cache_gb)
        * GIB
        // (p.adapter_mib * 2**20)
    )
    assert p.fits == expected > 0
    s = dep.env.serving
    assert p.max_loras == min(expected, s.max_cpu_loras, s.max_batch_size)


def test_a_slot_is_what_vllm_preallocates_max_rank_every_projection_base_dtype() -> None:
    """vLLM sizes each of max_loras slots at max_lora_rank for all seven projections, in the
    model's dtype: Qwen3-4B at rank 64 in bfloat16 is 57,344 * 64 * 36 layers * 2 bytes."""
    dep = load_deployment("dev")
    p = plan(dep)
    assert (dep.base.max_lora_rank, dep.base.dtype) == (64, "bfloat16")
    assert p.adapter_mib * 2**20 == 57_344 * 64 * 36 * 2
    assert slot_rank(dep.base) == 64


def test_a_configuration_that_cannot_fit_is_refused_naming_the_setting(tmp_path: Path) -> None:
    envs = _env(tmp_path, kv_cache_gb=40.0)
    with pytest.raises(CapacityError, match="no adapter fits"):
        plan(load_deployment("dev", environments_dir=envs))
    envs = _env(tmp_path, max_loras=500)
    with pytest.raises(CapacityError, match=r"field 'serving.max_loras': 500 device slots"):
        plan(load_deployment("dev", environments_dir=envs))


def test_an_explicit_setting_that_fits_is_kept(tmp_path: Path) -> None:
    p = plan(load_deployment("dev", environments_dir=_env(tmp_path, max_loras=4)))
    assert (p.max_loras, p.source) == (4, "environment")


def test_adding_an_adapter_no_larger_than_the_largest_keeps_the_plan(tmp_path: Path) -> None:
    data = copy.deepcopy(REAL)
    data["adapters"].append(
        {"name": "extra", "version": "1", "base": "qwen3-4b", "task": "sales_json"}
    )
    path = tmp_path / "adapters.yaml"
    path.write_text(yaml.safe_dump(data))
    assert plan(load_deployment("dev", path)) == plan(load_deployment("dev"))


def test_cli_prints_the_table() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "config", "plan", "--env", "prod"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "OPTION_MAX_LORAS" in out and "adapters that fit" in out
