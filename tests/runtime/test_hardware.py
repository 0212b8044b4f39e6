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
    assert "CUDA is unusable" in out and "InferenceAmiVersion" in out, out[-2000:]


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


class FakeNvml:
    """pynvml as it answers on a g5 (one A10G, compute capability 8.6) whose driver runs
    ``driver_cuda``: the GPU found with no CUDA context, as vLLM's platform detection does."""

    class NVMLError(Exception):
        pass

    def __init__(self, driver_cuda: int = 13000) -> None:
        self.driver_cuda = driver_cuda

    def nvmlInit(self) -> None:  # noqa: N802 - pynvml's names
        pass

    def nvmlShutdown(self) -> None:  # noqa: N802
        pass

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        return 1

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:  # noqa: N802
        return i

    def nvmlDeviceGetName(self, _h: int) -> str:  # noqa: N802
        return "NVIDIA A10G"

    def nvmlDeviceGetCudaComputeCapability(self, _h: int) -> tuple[int, int]:  # noqa: N802
        return (8, 6)

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:  # noqa: N802
        return self.driver_cuda


@pytest.fixture
def a_gpu(monkeypatch: pytest.MonkeyPatch) -> FakeNvml:
    """A GPU instance as the API process sees it, where any torch.cuda call fails the test:
    on a real GPU it would initialise CUDA and poison the fork of vLLM's engine process."""
    import torch

    nvml = FakeNvml()
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.setenv("NVIDIA_VISIBLE_DEVICES", "0")
    monkeypatch.setattr(torch.version, "cuda", "13.0")

    def poisons_fork(*_a: object, **_k: object) -> None:
        raise AssertionError("torch.cuda was called in the API process")

    for name in ("is_available", "get_device_name", "get_device_capability", "device_count"):
        monkeypatch.setattr(torch.cuda, name, poisons_fork)
    monkeypatch.setattr(torch.cuda, "_lazy_init", poisons_fork)
    return nvml


def test_the_api_process_finds_the_gpu_without_initialising_cuda(a_gpu: FakeNvml) -> None:
    from runtime import doctor
    from runtime.vllm_args import pick_dtype

    assert hardware.require_cuda_where_gpus_are() is True
    assert hardware.device_name(True) == "NVIDIA A10G"
    assert pick_dtype("auto", cuda=True) == "bfloat16"
    assert doctor.check_cuda().ok


def test_a_driver_older_than_the_images_cuda_refuses_to_start(a_gpu: FakeNvml) -> None:
    from runtime import doctor

    a_gpu.driver_cuda = 12040  # driver 550: CUDA 12.4
    with pytest.raises(
        SystemExit, match=r"driver runs CUDA 12\.4, older than the image's CUDA 13\.0"
    ):
        hardware.require_cuda_where_gpus_are()
    check = doctor.check_cuda()
    assert not check.ok and "12.4" in check.message and "InferenceAmiVersion" in check.message


def test_no_nvml_on_a_gpu_instance_refuses_to_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NVIDIA_VISIBLE_DEVICES", "0")
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    with pytest.raises(SystemExit, match="nvidia-ml-py"):
        hardware.require_cuda_where_gpus_are()


def test_the_fork_safe_environment_is_set_before_torch_is_imported(tmp_path: Path) -> None:
    """``python -m runtime serve`` sets torch's NVML-based CUDA check and vLLM's spawn method
    before anything imports torch (a check after would have poisoned the fork already)."""
    code = (
        "import os, sys\n"
        "import runtime.hardware as h\n"
        "real, seen = h.prepare_process, {}\n"
        "def spy(*a, **k):\n"
        "    seen['torch'] = 'torch' in sys.modules\n"
        "    real(*a, **k)\n"
        "h.prepare_process = spy\n"
        "import runtime.__main__ as m\n"
        "try:\n"
        "    m.main(['serve', '--model-dir', sys.argv[1], '--port', '0'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print('RESULT', seen, os.environ.get('PYTORCH_NVML_BASED_CUDA_CHECK'),"
        " os.environ.get('VLLM_WORKER_MULTIPROC_METHOD'))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTORCH_", "VLLM_"))}
    env |= {"NVIDIA_VISIBLE_DEVICES": "0", "OPTION_CPU_IOMP": "false"}
    env["OPTION_WORK_DIR"] = str(tmp_path / "work")
    proc = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "no-model")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT")]
    assert line == ["RESULT {'torch': False} 1 spawn"], proc.stdout[-1500:] + proc.stderr[-1500:]
