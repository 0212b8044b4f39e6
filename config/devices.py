"""The accelerators the planner knows, by SageMaker instance type: the planner's inputs, below
both the catalog schema (which sizes a rolling update by them) and the planner itself."""

from __future__ import annotations

GIB = 1024**3

#: Device memory per accelerator as CUDA reports it (GiB; the total nvidia-smi and NVML print,
#: which vLLM's ``gpu_memory_utilization`` is a fraction of), and the accelerator count, by
#: SageMaker instance type. Not the marketed size: an A10G "24 GB" reports 23,028 MiB, so a
#: plan from 24 GiB overstates its KV cache by about 15%. The runtime compares this figure with
#: NVML's at start and warns on a difference (``runtime.hardware``).
DEVICES: dict[str, tuple[str, float, int]] = {
    "ml.g4dn.xlarge": ("NVIDIA T4", 15360 / 1024, 1),
    "ml.g4dn.2xlarge": ("NVIDIA T4", 15360 / 1024, 1),
    "ml.g5.xlarge": ("NVIDIA A10G", 23028 / 1024, 1),
    "ml.g5.2xlarge": ("NVIDIA A10G", 23028 / 1024, 1),
    "ml.g5.4xlarge": ("NVIDIA A10G", 23028 / 1024, 1),
    "ml.g5.12xlarge": ("NVIDIA A10G", 23028 / 1024, 4),
    "ml.g6.xlarge": ("NVIDIA L4", 23034 / 1024, 1),
    "ml.g6.2xlarge": ("NVIDIA L4", 23034 / 1024, 1),
    "ml.g6e.xlarge": ("NVIDIA L40S", 46068 / 1024, 1),
    "ml.g6e.2xlarge": ("NVIDIA L40S", 46068 / 1024, 1),
    "ml.p4d.24xlarge": ("NVIDIA A100 40GB", 40960 / 1024, 8),
    "ml.p5.48xlarge": ("NVIDIA H100", 81559 / 1024, 8),
    # The local platform runs on the host CPU; "device memory" is a share of host memory.
    "ml.local.cpu": ("host CPU", 4, 1),
}

BYTES_PER_PARAM = {"float32": 4.0, "bfloat16": 2.0, "float16": 2.0, "auto": 2.0}

__all__ = ["BYTES_PER_PARAM", "DEVICES", "GIB"]
