"""Capacity planner: how many adapters fit in device memory next to the base and KV cache.

The seed article's formula, ``N = (usable - base - KV) / adapter`` with usable = device
memory x headroom (the 85 % safety buffer). Adapter size comes from the largest rank and the
widest target set among the adapters an environment deploys, over the base's real layer
shapes, so a rank-64 all-linear adapter is sized as such, not as a file size.
"""

from __future__ import annotations

from dataclasses import dataclass

from config.loader import Deployment
from config.schema import BaseModelEntry
from config.tasks import TARGET_MODULES, Targets
from contracts.settings import slot_rank as contract_slot_rank

GIB = 1024**3

#: Device memory per accelerator (GiB) and accelerator count, by SageMaker instance type.
DEVICES: dict[str, tuple[str, float, int]] = {
    "ml.g4dn.xlarge": ("NVIDIA T4", 16, 1),
    "ml.g4dn.2xlarge": ("NVIDIA T4", 16, 1),
    "ml.g5.xlarge": ("NVIDIA A10G", 24, 1),
    "ml.g5.2xlarge": ("NVIDIA A10G", 24, 1),
    "ml.g5.4xlarge": ("NVIDIA A10G", 24, 1),
    "ml.g5.12xlarge": ("NVIDIA A10G", 24, 4),
    "ml.g6.xlarge": ("NVIDIA L4", 24, 1),
    "ml.g6.2xlarge": ("NVIDIA L4", 24, 1),
    "ml.g6e.xlarge": ("NVIDIA L40S", 48, 1),
    "ml.g6e.2xlarge": ("NVIDIA L40S", 48, 1),
    "ml.p4d.24xlarge": ("NVIDIA A100 40GB", 40, 8),
    "ml.p5.48xlarge": ("NVIDIA H100", 80, 8),
    # The local platform runs on the host CPU; "device memory" is a share of host memory.
    "ml.local.cpu": ("host CPU", 4, 1),
}

BYTES_PER_PARAM = {"float32": 4.0, "bfloat16": 2.0, "float16": 2.0, "auto": 2.0}


class CapacityError(ValueError):
    pass


@dataclass(frozen=True)
class CapacityPlan:
    instance_type: str
    device: str
    device_gib: float
    usable_gib: float
    base_gib: float
    kv_gib: float
    adapter_mib: float
    fits: int
    max_loras: int
    source: str  # "environment" or "planner"

    def rows(self) -> list[tuple[str, str]]:
        return [
            ("instance", f"{self.instance_type} ({self.device})"),
            ("device memory", f"{self.device_gib:.1f} GiB"),
            ("usable (headroom)", f"{self.usable_gib:.2f} GiB"),
            ("base weights", f"{self.base_gib:.2f} GiB"),
            ("KV cache", f"{self.kv_gib:.2f} GiB"),
            ("one device slot", f"{self.adapter_mib:.1f} MiB (max rank, every projection)"),
            ("adapters that fit", str(self.fits)),
            ("OPTION_MAX_LORAS", f"{self.max_loras} ({self.source})"),
        ]


def base_bytes(base: BaseModelEntry) -> float:
    params = base.architecture.parameters
    if base.quantization == "nf4":
        # 4-bit weights plus one fp16 scale per 64-weight block; embeddings stay 16-bit.
        embed = base.architecture.vocab_size * base.architecture.hidden_size
        return (params - embed) * (0.5 + 2 / 64) + embed * 2
    return params * BYTES_PER_PARAM[base.dtype]


def slot_rank(base: BaseModelEntry) -> int:
    """The rank vLLM preallocates device slots at: the base's ``max_lora_rank`` rounded up."""
    return contract_slot_rank(base.max_lora_rank)


def adapter_bytes(base: BaseModelEntry, rank: int, modules: tuple[str, ...]) -> float:
    """One device slot: A and B of the given projections at ``rank``, over the base's layer
    shapes (Qwen3 and Llama name their projections alike), in the base's dtype: vLLM keeps LoRA
    weights in the model's dtype (``lora_dtype: auto``; a 4-bit base computes in bfloat16)."""
    shapes = base.architecture.module_shapes()
    per_layer = sum(rank * (shapes[m][0] + shapes[m][1]) for m in modules)
    dtype_bytes = 2.0 if base.quantization == "nf4" else BYTES_PER_PARAM[base.dtype]
    return per_layer * base.architecture.num_hidden_layers * dtype_bytes


def plan(dep: Deployment) -> CapacityPlan:
    s = dep.env.serving
    if s.instance_type not in DEVICES:
        raise CapacityError(
            f"environment {dep.env.name!r}: field 'serving.instance_type': unknown instance type "
            f"{s.instance_type!r} for the planner (known: {', '.join(sorted(DEVICES))})"
        )
    device, gib, count = DEVICES[s.instance_type]
    device_gib = gib * max(1, min(s.accelerators, count))
    usable = device_gib * s.vram_headroom
    base = base_bytes(dep.base) / GIB
    kv = s.kv_cache_gb
    # vLLM preallocates every slot at max rank for every projection it can wrap, whatever the
    # catalog's adapters use.
    adapter = adapter_bytes(dep.base, slot_rank(dep.base), TARGET_MODULES[Targets.all_linear])
    fits = int((usable - base - kv) * GIB // adapter) if usable > base + kv else 0
    pinned = sum(1 for a in dep.adapters if a.entry.pin)
    where = f"environment {dep.env.name!r} ({s.instance_type}, base {dep.base_key!r})"
    if fits < 1:
        raise CapacityError(
            f"{where}: no adapter fits: usable {usable:.2f} GiB < base {base:.2f} GiB + KV "
            f"{kv:.2f} GiB + one adapter {adapter / 2**20:.1f} MiB"
        )
    if s.max_loras is not None:
        if s.max_loras > fits:
            raise CapacityError(
                f"{where}: field 'serving.max_loras': {s.max_loras} device slots do not fit; "
                f"at most {fits} adapters of {adapter / 2**20:.1f} MiB fit"
            )
        max_loras, source = s.max_loras, "environment"
    else:
        # Not capped by the number of adapters: the value sits in the model's environment, and
        # adding a catalog entry must not restart the base. The host tier bounds it (vLLM
        # requires max_cpu_loras >= max_loras), and so does the batch: a batch of
        # max_batch_size sequences holds at most that many adapters, and every further slot
        # would take its preallocation from the KV cache for nothing.
        max_loras, source = max(1, min(fits, s.max_cpu_loras, s.max_batch_size)), "planner"
    if pinned > max_loras:
        raise CapacityError(
            f"{where}: {pinned} pinned adapters exceed {max_loras} device slots; unpin some"
        )
    return CapacityPlan(
        s.instance_type,
        device,
        device_gib,
        usable,
        base,
        kv,
        adapter / 2**20,
        fits,
        max_loras,
        source,
    )
