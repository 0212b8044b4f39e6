"""The capacity planner: the seed formula, refusals that name the setting, stable slot counts."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from config import CATALOG_PATH, ENVIRONMENTS_DIR, CatalogError, load_deployment
from config.plan import (
    DEFAULT_MAX_LORAS,
    GIB,
    GPU_RUNTIME_RESERVE_GIB,
    CapacityError,
    adapter_bytes,
    base_bytes,
    plan,
    slot_rank,
)
from config.processes import runtime_settings
from config.tasks import TARGET_MODULES

REAL = yaml.safe_load(CATALOG_PATH.read_text())


def _env(tmp_path: Path, **serving: object) -> Path:
    env = yaml.safe_load((ENVIRONMENTS_DIR / "dev.yaml").read_text())
    env["serving"].update(serving)
    directory = tmp_path / "envs"
    directory.mkdir(exist_ok=True)
    (directory / "dev.yaml").write_text(yaml.safe_dump(env))
    return directory


def test_the_seed_formula_on_a_g5_xlarge_from_what_cuda_reports() -> None:
    """An A10G reports 23,028 MiB, not 24 GiB; vLLM's memory fraction
    (its default 0.92, 2.5) applies to that."""
    dep = load_deployment("dev")
    p = plan(dep)
    assert p.device_gib == pytest.approx(23028 / 1024)
    assert dep.env.serving.vram_headroom == 0.92
    assert p.usable_gib <= 0.92 * 22.5
    usable = 23028 / 1024 * dep.env.serving.vram_headroom
    expected = int(
        (usable - base_bytes(dep.base) / GIB - dep.env.serving.kv_cache_gb)
        * GIB
        // (p.adapter_mib * 2**20)
    )
    assert p.fits == expected > 0
    s = dep.env.serving
    catalog = 1 << (len(dep.adapters) - 1).bit_length()
    assert p.max_loras == min(expected, s.max_cpu_loras, DEFAULT_MAX_LORAS, catalog)


def test_slots_are_sized_to_the_catalog_not_to_sixteen() -> None:
    """VLLM mixes at most max_loras adapters per step, so an 8-adapter
    catalog's 8 unused slots only took KV cache (rank 64: 252 MiB each)."""
    dep = load_deployment("dev")
    assert len(dep.adapters) <= 8
    assert plan(dep).max_loras == 1 << (len(dep.adapters) - 1).bit_length() <= 8


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


def _with_adapters(tmp_path: Path, count: int) -> Path:
    data = copy.deepcopy(REAL)
    extra = [
        {"name": f"extra-{i}", "version": "1", "base": "qwen3-4b", "task": "sales_json"}
        for i in range(max(0, count - len(data["adapters"])))
    ]
    data["adapters"] = (data["adapters"] + extra)[:count]
    path = tmp_path / f"adapters-{count}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_adding_an_adapter_within_its_power_of_two_keeps_the_plan(tmp_path: Path) -> None:
    """What the base's container is started with stays while the catalog grows inside the same
    power of two (its pinned host memory grows); crossing one doubles the slots, once."""
    five, eight = _with_adapters(tmp_path, 5), _with_adapters(tmp_path, 8)
    assert runtime_settings(load_deployment("dev", five)) == runtime_settings(
        load_deployment("dev", eight)
    )
    nine = load_deployment("dev", _with_adapters(tmp_path, 9))
    assert plan(nine).max_loras == 16 > plan(load_deployment("dev", eight)).max_loras


def test_cli_prints_the_table() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "config", "plan", "--env", "prod"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "OPTION_MAX_LORAS" in out and "adapters that fit" in out
    for row in ("OPTION_MAX_BATCH_SIZE", "KV tokens", "slot padding", "pinned host memory"):
        assert row in out, out


def test_the_batch_is_sized_from_the_kv_cache_the_slots_leave() -> None:
    """vLLM's own max_num_seqs on an A10G is 256; 16 left 48 of 64 requests queued (GPU
    review defect 4). The batch is what the KV cache holds at the planned context."""
    dep = load_deployment("dev")
    p = plan(dep)
    a = dep.base.architecture
    per_token = 2 * a.num_hidden_layers * a.num_key_value_heads * a.head_dim * 2
    assert per_token == 147_456  # Qwen3-4B in bfloat16: 144 KiB
    kv = p.usable_gib - p.base_gib - p.max_loras * p.adapter_mib / 1024 - GPU_RUNTIME_RESERVE_GIB
    assert p.kv_tokens == int(kv * GIB // per_token)
    assert p.max_num_seqs == p.kv_tokens // dep.env.serving.planned_context_tokens
    assert 16 < p.max_num_seqs <= 256
    # The deployed container runs the planned batch.
    assert runtime_settings(dep).max_batch_size == p.max_num_seqs


def test_the_planner_names_the_adapter_whose_rank_pads_every_slot(tmp_path: Path) -> None:
    p = plan(load_deployment("dev"))
    assert p.slot_rank == 64 and p.unpadded_rank == 16 and 0.05 < p.padding_cost < 0.5
    assert any("'medical-shorthand-r64'" in w and "padded" in w for w in p.warnings)
    data = copy.deepcopy(REAL)
    data["adapters"] = [a for a in data["adapters"] if a.get("rank") != 64]
    path = tmp_path / "adapters.yaml"
    path.write_text(yaml.safe_dump(data))
    lean = plan(load_deployment("dev", path))
    assert any("no adapter needs rank 64" in w for w in lean.warnings), lean.warnings


def test_check_warns_of_padding_and_of_more_adapters_than_host_slots(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "config", "check", "--env", "dev"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "warning: environment 'dev': 'medical-shorthand-r64' sets the device slots' rank" in out
    p = plan(load_deployment("dev", environments_dir=_env(tmp_path, max_cpu_loras=2, max_loras=2)))
    assert any("host slots" in w and "stalling" in w for w in p.warnings), p.warnings


def test_pinned_host_memory_is_planned_from_the_catalog(tmp_path: Path) -> None:
    dep = load_deployment("dev")
    sizes = [
        adapter_bytes(dep.base, a.profile.rank, TARGET_MODULES[a.profile.targets])
        for a in dep.adapters
    ]
    assert plan(dep).pinned_mib == pytest.approx(sum(sizes) / 2**20)
    small = plan(load_deployment("dev", environments_dir=_env(tmp_path, memory_mb=1024)))
    assert any("of host memory" in w and "serving.memory_mb 1024" in w for w in small.warnings)


def test_a_gpu_component_reserves_the_cpu_cores_vllm_asks_for(tmp_path: Path) -> None:
    """VLLM asks 2 + N cores for N GPUs; dev reserved 2 for 1 GPU,
    which starves the engine loop and the start-up compile against vLLM's 600 s limit."""
    with pytest.raises(CatalogError, match="cpu_cores 2 is under the 3 vLLM asks for 1 GPU"):
        load_deployment("dev", environments_dir=_env(tmp_path, cpu_cores=2))
    for env in ("dev", "staging", "prod"):
        s = load_deployment(env).env.serving
        assert s.cpu_cores >= 2 + s.accelerators, env
    out = subprocess.run(
        [sys.executable, "-m", "config", "plan", "--env", "dev"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "3 reserved (vLLM asks 2 + N for N GPUs: 3)" in out, out


def test_vllms_engine_wait_is_derived_from_the_start_up_health_check() -> None:
    """VLLM waits 600 s for its engine by default, under SageMaker's
    900 s budget: a slow cold start ended the process first, on every retry."""
    from config.processes import ENGINE_WAIT_MARGIN_S
    from infra.serving import container_environment

    dep = load_deployment("dev")
    env = container_environment(dep)
    wait = int(env["VLLM_ENGINE_READY_TIMEOUT_S"])
    assert wait == dep.env.serving.startup_timeout_s - ENGINE_WAIT_MARGIN_S > 600
