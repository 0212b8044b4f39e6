"""Capacity planner: how many adapters fit in device memory next to the base and KV cache.

The seed article's formula, ``N = (usable - base - KV) / adapter`` with usable = device
memory x headroom (the 85 % safety buffer). Adapter size comes from the largest rank and the
widest target set among the adapters an environment deploys, over the base's real layer
shapes, so a rank-64 all-linear adapter is sized as such, not as a file size.
"""

from __future__ import annotations

from dataclasses import dataclass

from config.devices import BYTES_PER_PARAM, DEVICES, GIB
from config.loader import Deployment
from config.schema import BaseModelEntry
from config.tasks import TARGET_MODULES, Targets
from contracts.fairness import overflow_slots
from contracts.settings import slot_rank as contract_slot_rank

#: What vLLM holds on a GPU besides weights, LoRA slots and the KV cache: the activations of
#: its profiling pass at ``max_num_batched_tokens``, CUDA graphs, cuBLAS workspaces and the
#: sampler. An estimate (vLLM measures it at start and gives the KV cache what remains), so the
#: planner's KV figure is an estimate too, and labelled as one.
GPU_RUNTIME_RESERVE_GIB = 1.5
#: vLLM 0.32's default share of device memory (``vllm/config/cache.py``,
#: ``gpu_memory_utilization``); the planner's default too: vLLM already profiles weights, slots,
#: activations and CUDA graphs inside it, so a lower one only takes KV cache away.
VLLM_MEMORY_UTILIZATION = 0.92
#: vLLM's own ``max_num_seqs`` for its API server on A10G/L4/L40S-class GPUs
#: (``vllm/engine/arg_utils.py``, ``_set_default_args``; 1024 on H100): the batch is never planned
#: above it.
VLLM_MAX_NUM_SEQS = 256
#: Device slots the planner gives when the environment sets none: adapters per batch. Every slot
#: is preallocated at the slot rank for every projection, taken from the KV cache.
DEFAULT_MAX_LORAS = 16
#: Distinct adapters per decode step the padding cost is stated for (the review's case).
ADAPTERS_PER_STEP = 8


class CapacityError(ValueError):
    pass


@dataclass(frozen=True)
class CapacityPlan:
    instance_type: str
    device: str
    device_gib: float
    usable_gib: float
    base_gib: float
    #: The environment's minimum KV cache (``serving.kv_cache_gb``): what ``fits`` leaves aside.
    kv_gib: float
    adapter_mib: float
    fits: int
    max_loras: int
    source: str  # "environment" or "planner"
    #: The KV cache that remains once the slots are taken (an estimate on a GPU: see above).
    kv_budget_gib: float = 0.0
    kv_tokens: int = 0
    kv_bytes_per_token: int = 0
    #: vLLM's ``max_num_seqs``: the KV cache's tokens over the planned context, capped at
    #: vLLM's own default.
    max_num_seqs: int = 1
    batch_source: str = "planner"
    planned_context: int = 0
    slot_rank: int = 0
    #: The rank the slots would have without the catalog's largest-rank adapters, and what the
    #: difference costs a decode step.
    unpadded_rank: int = 0
    padding_cost: float = 0.0
    #: Host memory vLLM pins for ``max_cpu_loras`` adapters of this catalog (the largest ones).
    pinned_mib: float = 0.0
    max_cpu_loras: int = 0
    adapters: int = 0
    headroom: float = VLLM_MEMORY_UTILIZATION
    cpu_cores: float = 0.0
    accelerators: int = 0
    warnings: tuple[str, ...] = ()

    def rows(self) -> list[tuple[str, str]]:
        padded = (
            f"rank {self.slot_rank}; at rank {self.unpadded_rank} the catalog's other adapters "
            f"would read {self.padding_cost:.0%} fewer bytes per decode step at "
            f"{ADAPTERS_PER_STEP} adapters per batch (estimate)"
            if self.padding_cost > 0
            else f"rank {self.slot_rank}; no adapter is padded past the rank it needs"
        )
        return [
            ("instance", f"{self.instance_type} ({self.device})"),
            (
                "CPU cores",
                f"{self.cpu_cores:g} reserved (vLLM asks 2 + N for N GPUs: {2 + self.accelerators})"
                if self.accelerators
                else f"{self.cpu_cores:g} reserved",
            ),
            ("device memory", f"{self.device_gib:.2f} GiB (as CUDA reports it)"),
            (
                "usable (headroom)",
                f"{self.usable_gib:.2f} GiB (OPTION_VRAM_HEADROOM {self.headroom:g}; vLLM's "
                f"gpu_memory_utilization, whose default is {VLLM_MEMORY_UTILIZATION:g})",
            ),
            ("base weights", f"{self.base_gib:.2f} GiB"),
            ("minimum KV cache", f"{self.kv_gib:.2f} GiB (serving.kv_cache_gb)"),
            ("one device slot", f"{self.adapter_mib:.1f} MiB (slot rank, every projection)"),
            ("adapters that fit", str(self.fits)),
            ("OPTION_MAX_LORAS", f"{self.max_loras} ({self.source})"),
            ("device slots", f"{self.max_loras * self.adapter_mib / 1024:.2f} GiB"),
            ("slot padding", padded),
            ("KV cache", f"{self.kv_budget_gib:.2f} GiB (estimate)"),
            (
                "KV tokens",
                f"{self.kv_tokens} ({self.kv_bytes_per_token / 1024:.0f} KiB per token)",
            ),
            (
                "OPTION_MAX_BATCH_SIZE",
                f"{self.max_num_seqs} ({self.batch_source}; KV tokens over "
                f"{self.planned_context}-token sequences, at most {VLLM_MAX_NUM_SEQS}); vLLM's "
                f"max_num_seqs {self.max_num_seqs + overflow_slots(self.max_num_seqs)} with the "
                "fair queue's slots for a sender with nothing running",
            ),
            (
                "vLLM's multi-LoRA defaults",
                f"gpu_memory_utilization {VLLM_MEMORY_UTILIZATION:g}, max_num_seqs "
                f"{VLLM_MAX_NUM_SEQS} (bounded by the KV cache), max_loras = the distinct "
                "adapters a batch mixes, max_cpu_loras >= the working set",
            ),
            (
                "pinned host memory",
                f"{self.pinned_mib / 1024:.2f} GiB ({min(self.adapters, self.max_cpu_loras)} of "
                f"the catalog's {self.adapters} adapters in OPTION_MAX_CPU_LORAS="
                f"{self.max_cpu_loras} host slots)",
            ),
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


def _dtype_bytes(base: BaseModelEntry) -> float:
    # vLLM keeps LoRA weights and the KV cache in the model's dtype (``lora_dtype``,
    # ``kv_cache_dtype``: auto); a 4-bit base computes in bfloat16.
    return 2.0 if base.quantization == "nf4" else BYTES_PER_PARAM[base.dtype]


def adapter_bytes(base: BaseModelEntry, rank: int, modules: tuple[str, ...]) -> float:
    """One device slot: A and B of the given projections at ``rank``, over the base's layer
    shapes (Qwen3 and Llama name their projections alike), in the base's dtype."""
    shapes = base.architecture.module_shapes()
    per_layer = sum(rank * (shapes[m][0] + shapes[m][1]) for m in modules)
    return per_layer * base.architecture.num_hidden_layers * _dtype_bytes(base)


def kv_bytes_per_token(base: BaseModelEntry) -> int:
    """K and V of every layer for one token: 2 x layers x KV heads x head size x dtype bytes
    (Qwen3-4B in bfloat16: 144 KiB)."""
    a = base.architecture
    return int(2 * a.num_hidden_layers * a.num_key_value_heads * a.head_dim * _dtype_bytes(base))


def padding(dep: Deployment, slot: int) -> tuple[int, float, list[str]]:
    """The rank the slots would need without the catalog's largest-rank adapters, the share of
    a decode step's bytes the difference costs at ``ADAPTERS_PER_STEP`` distinct adapters
    (decode is memory-bound: weights, slots and the batch's KV are read every step; an
    estimate), and the adapters that force it."""
    ranks = sorted({a.profile.rank for a in dep.adapters})
    if not ranks:
        return slot, 0.0, []
    needed = contract_slot_rank(ranks[-1])
    below = [r for r in ranks if contract_slot_rank(r) < needed]
    unpadded = contract_slot_rank(below[-1]) if below else needed
    if needed < slot:  # no adapter needs the base's max_lora_rank at all
        unpadded, forcing = needed, []
    else:
        forcing = [a.name for a in dep.adapters if contract_slot_rank(a.profile.rank) == needed]
    if unpadded >= slot:
        return slot, 0.0, forcing
    every = TARGET_MODULES[Targets.all_linear]
    n = ADAPTERS_PER_STEP
    context = dep.env.serving.planned_context_tokens
    kv_read = n * context / 2 * kv_bytes_per_token(dep.base)
    lean = base_bytes(dep.base) + n * adapter_bytes(dep.base, unpadded, every) + kv_read
    padded = base_bytes(dep.base) + n * adapter_bytes(dep.base, slot, every) + kv_read
    return unpadded, (padded - lean) / padded, forcing


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
    rank = slot_rank(dep.base)
    # vLLM preallocates every slot at max rank for every projection it can wrap, whatever the
    # catalog's adapters use.
    adapter = adapter_bytes(dep.base, rank, TARGET_MODULES[Targets.all_linear])
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
        # Not the number of adapters: the value sits in the model's environment, and adding a
        # catalog entry must not restart the base. The host tier bounds it (vLLM requires
        # max_cpu_loras >= max_loras), and every slot past what a batch mixes takes its
        # preallocation from the KV cache for nothing.
        #
        # Nor more than the catalog can put in one batch: vLLM's scheduler mixes at most
        # max_loras distinct adapters per step, and a slot no batch uses costs its KV share.
        # Sized to the next power of two at or above the catalog, so a growing catalog restarts
        # the base at most once per doubling.
        catalog = 1 << max(0, len(dep.adapters) - 1).bit_length()
        max_loras = max(1, min(fits, s.max_cpu_loras, DEFAULT_MAX_LORAS, catalog))
        source = f"planner: the catalog's {len(dep.adapters)} adapters, next power of two"
    if pinned > max_loras:
        raise CapacityError(
            f"{where}: {pinned} pinned adapters exceed {max_loras} device slots; unpin some"
        )
    gpu = s.accelerators > 0
    if gpu:
        kv_budget = usable - base - max_loras * adapter / GIB - GPU_RUNTIME_RESERVE_GIB
        if kv_budget < kv:
            raise CapacityError(
                f"{where}: {max_loras} device slots of {adapter / 2**20:.1f} MiB and vLLM's "
                f"working memory (about {GPU_RUNTIME_RESERVE_GIB} GiB) leave {kv_budget:.2f} "
                f"GiB of KV cache, under serving.kv_cache_gb {kv:.2f}; lower serving.max_loras"
            )
    else:
        kv_budget = kv  # the CPU build's KV cache is its own setting (VLLM_CPU_KVCACHE_SPACE)
    per_token = kv_bytes_per_token(dep.base)
    kv_tokens = int(kv_budget * GIB // per_token)
    context = s.planned_context_tokens
    if s.max_batch_size is not None:
        batch, batch_source = s.max_batch_size, "environment"
    else:
        batch, batch_source = max(1, min(VLLM_MAX_NUM_SEQS, kv_tokens // context)), "planner"
    unpadded, cost, forcing = padding(dep, rank)
    sizes = sorted(
        (
            adapter_bytes(dep.base, a.profile.rank, TARGET_MODULES[a.profile.targets])
            for a in dep.adapters
        ),
        reverse=True,
    )
    pinned_bytes = sum(sizes[: s.max_cpu_loras])
    warnings = _warnings(dep, rank, unpadded, cost, forcing, pinned_bytes)
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
        kv_budget_gib=kv_budget,
        kv_tokens=kv_tokens,
        kv_bytes_per_token=per_token,
        max_num_seqs=batch,
        batch_source=batch_source,
        planned_context=context,
        slot_rank=rank,
        unpadded_rank=unpadded,
        padding_cost=cost,
        pinned_mib=pinned_bytes / 2**20,
        max_cpu_loras=s.max_cpu_loras,
        adapters=len(dep.adapters),
        headroom=s.vram_headroom,
        cpu_cores=s.cpu_cores,
        accelerators=s.accelerators,
        warnings=tuple(warnings),
    )


def _warnings(
    dep: Deployment,
    rank: int,
    unpadded: int,
    cost: float,
    forcing: list[str],
    pinned_bytes: float,
) -> list[str]:
    """What the plan allows but costs: a rank that pads every slot, more adapters than host
    slots, more pinned host memory than the component can spare."""
    s = dep.env.serving
    warnings = []
    if cost > 0:
        who = ", ".join(repr(n) for n in forcing) or "no adapter"
        warnings.append(
            f"{who} set{'s' if len(forcing) == 1 else ''} the device slots' rank {rank}: every "
            f"other adapter is padded from rank {unpadded} or less in every batch, "
            f"{cost:.0%} more bytes per decode step at {ADAPTERS_PER_STEP} adapters per batch "
            "(estimate); consider a lower rank, serving: merged, or a base max_lora_rank of "
            f"{unpadded}"
            if forcing
            else f"no adapter needs rank {rank}: base {dep.base_key!r} max_lora_rank pads every "
            f"slot, {cost:.0%} more bytes per decode step (estimate); lower it to {unpadded}"
        )
    if len(dep.adapters) > s.max_cpu_loras:
        warnings.append(
            f"the catalog holds {len(dep.adapters)} adapters for {s.max_cpu_loras} host slots "
            "(serving.max_cpu_loras): an adapter evicted from host memory is read from disk "
            "again inside an engine step, stalling every running sequence"
        )
    host_share = pinned_bytes / (s.memory_mb * 2**20)
    if s.accelerators > 0 and host_share > 0.5:
        # A warning, not a refusal: the memory is pinned only once that many distinct adapters
        # have been loaded, and the figure follows the catalog, which must never restart the
        # base by changing its container's settings.
        warnings.append(
            f"vLLM would pin {pinned_bytes / GIB:.2f} GiB of host memory for the "
            f"{min(len(dep.adapters), s.max_cpu_loras)} largest adapters in its host slots, "
            f"over half of serving.memory_mb {s.memory_mb} (the API and engine processes need "
            "the rest); lower serving.max_cpu_loras or raise serving.memory_mb"
        )
    return warnings
