"""The machine under the server: a GPU instance whose CUDA does not work refuses to start, and
vLLM's CPU build gets every core and its OpenMP by default."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from runtime import hardware


def test_accelerators_without_cuda_refuse_to_start(tiny_base: Path, tmp_path: Path) -> None:
    """As on a g5 whose driver is older than the image's CUDA: the server exits with the reason
    instead of loading the base on the CPU and answering /ping."""
    env = {**os.environ, "NVIDIA_VISIBLE_DEVICES": "0", "OPTION_WORK_DIR": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, "-m", "runtime", "serve", "--model-dir", str(tiny_base), "--port", "0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert "CUDA is unavailable" in out and "InferenceAmiVersion" in out, out[-2000:]


def test_no_accelerator_serves_on_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NVIDIA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(hardware, "_NVIDIA_DEVICES", "/nonexistent/nvidia[0-9]*")
    assert hardware.require_cuda_where_gpus_are() is False
    for hidden in ("void", "none", ""):
        monkeypatch.setenv("NVIDIA_VISIBLE_DEVICES", hidden)
        assert hardware.gpu_devices() == []


def test_vllm_cpu_gets_every_core_and_its_openmp() -> None:
    cores = sorted(os.sched_getaffinity(0))
    env = hardware.cpu_environment("all", 2)
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == ",".join(map(str, cores))
    assert env["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "0" and env["VLLM_CPU_KVCACHE_SPACE"] == "2"
    assert hardware.cpu_environment("0-1", 0)["VLLM_CPU_OMP_THREADS_BIND"] == "0-1"
    lib = hardware.iomp_library()
    assert lib is not None, "vllm-cpu installs Intel OpenMP (intel-openmp) into the environment"
    preload = hardware.iomp_preload({"LD_PRELOAD": "/x/libfoo.so"})
    assert preload is not None and preload["LD_PRELOAD"] == f"{lib}:/x/libfoo.so"
    assert hardware.iomp_preload({"LD_PRELOAD": str(lib)}) is None  # already: no re-exec loop
    assert hardware.iomp_preload({"OPTION_CPU_IOMP": "false"}) is None
