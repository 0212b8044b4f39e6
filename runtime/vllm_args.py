"""The runtime's settings (``contracts.settings.RuntimeSettings``) as vLLM's engine arguments.

Each ``OPTION_*`` keeps the meaning it had before vLLM became the engine; this module says which
vLLM argument it becomes (docs/model-server.md's "Engine options" table lists the same mapping).
"""

from __future__ import annotations

import json
from typing import Any

from contracts.fairness import overflow_slots
from contracts.settings import RuntimeSettings, slot_rank
from runtime.hardware import compute_capability


def model_len(s: RuntimeSettings) -> int:
    """``OPTION_MAX_MODEL_LEN``, else the input and output limits together, but never past
    the model's own ``max_position_embeddings``: vLLM refuses to start beyond it (the
    local platform's small Qwen3 has 1,024 positions, under the default 3,072)."""
    if s.max_model_len:
        return s.max_model_len
    wanted = s.max_input_tokens + s.max_new_tokens
    try:
        config = json.loads((s.model_dir / "config.json").read_text())
    except (OSError, ValueError):
        return wanted
    positions = config.get("max_position_embeddings")
    return min(wanted, positions) if isinstance(positions, int) and positions > 0 else wanted


def engine_args(s: RuntimeSettings, *, cuda: bool) -> dict[str, Any]:
    """vLLM's engine arguments for these settings (``AsyncEngineArgs(**...)``)."""
    length = model_len(s)
    args: dict[str, Any] = {
        "model": str(s.model_dir),
        "tokenizer": str(s.model_dir),
        "enable_lora": s.enable_lora,
        # The planned batch, plus the slots the fair gate gives a sender with nothing running
        # while the batch is full (``runtime.fair_gate``); none under FCFS.
        "max_num_seqs": max_num_seqs(s),
        "max_model_len": length,
        "max_num_batched_tokens": max(s.max_prefill_tokens, length),
        "dtype": pick_dtype(s.dtype, cuda=cuda),
        # The runtime tokenizes (its chat encoding keeps user text from forging control
        # tokens) and detokenizes through vLLM; vLLM never loads remote code.
        "trust_remote_code": False,
        "seed": 0,
        # By default the waiting queue ordered by (priority, arrival), not first come first
        # served: the engine gives each request its sender's in-flight count as priority
        # (fair queuing between tenants, contracts.fairness). vLLM's docs:
        # ``scheduling_policy`` "priority" "means that requests are handled based on given
        # priority (lower value means earlier handling) and time of arrival deciding any ties".
        "scheduling_policy": s.scheduling_policy,
        # Compact JSON under a schema, as the adapters' labels are written: a grammar that
        # allows any whitespace lets a model spend its whole budget on it (measured: an
        # untrained model wrote tabs until max_new_tokens). vLLM sets this per engine, and
        # only for a named backend: xgrammar, its default.
        "structured_outputs_config": {"backend": "xgrammar", "disable_any_whitespace": True},
    }
    if s.enable_lora:
        args |= {
            "max_loras": s.max_loras,
            "max_cpu_loras": s.max_cpu_loras,
            "max_lora_rank": slot_rank(s.max_lora_rank),
        }
    if cuda:
        args["gpu_memory_utilization"] = s.vram_headroom
    if s.quantization == "nf4":
        args["quantization"] = "bitsandbytes"
    elif s.quantization == "fp8":
        args["quantization"] = "fp8"
    return args


def max_num_seqs(s: RuntimeSettings) -> int:
    if s.scheduling_policy != "priority":
        return s.max_batch_size
    return s.max_batch_size + overflow_slots(s.max_batch_size)


def pick_dtype(setting: str, *, cuda: bool) -> str:
    """``auto``: bfloat16 on a GPU of compute capability 8 or newer, float16 on older ones, and
    float32 on a CPU (where the answers are compared with PEFT's, token for token)."""
    if setting != "auto":
        return setting
    if cuda:
        # NVML's answer, not torch.cuda's: the API process never initialises CUDA
        # (runtime.hardware); an unknown capability is taken as a current GPU.
        capability = compute_capability(cuda)
        return "bfloat16" if capability is None or capability[0] >= 8 else "float16"
    return "float32"
