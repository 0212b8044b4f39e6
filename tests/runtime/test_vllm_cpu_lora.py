"""vLLM's CPU LoRA ops with rows that use no adapter (index -1): as shipped they compute such a
row with the last slot's adapter; the runtime's plugin leaves the row alone."""

from __future__ import annotations

import torch
from vllm.lora.ops.torch_ops import lora_ops

from runtime.vllm_cpu_lora import skip_rows_without_adapter

SLOTS, RANK, HIDDEN, OUT = 2, 4, 8, 6


def _case() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    x = torch.randn(3, RANK)
    b = torch.randn(SLOTS, 1, OUT, RANK)  # vLLM's stacked lora_B: (slots, 1, out, rank)
    y = torch.randn(3, OUT)
    return x, b, y, torch.tensor([-1, 0, 1])


def test_as_shipped_a_row_without_adapter_gets_the_last_slots_delta() -> None:
    x, b, y, idx = _case()
    before = y.clone()
    lora_ops.bgmv_expand(x, b, y, idx, add_inputs=True)
    assert not torch.equal(y[0], before[0])  # the bug the plugin fixes: row 0 has no adapter


def test_the_plugin_leaves_rows_without_adapter_unchanged_and_the_others_exact() -> None:
    x, b, y, idx = _case()
    expected = y.clone()
    lora_ops.bgmv_expand(x[1:], b, expected[1:], idx[1:], add_inputs=True)
    expected[0] = y[0]
    fixed = skip_rows_without_adapter(lora_ops.bgmv_expand)
    fixed(x, b, y, idx, add_inputs=True)
    assert torch.equal(y, expected)
    # Shrink (which assigns rather than adds) and the slice variant alike.
    a = torch.randn(SLOTS, 1, RANK, HIDDEN)
    h = torch.randn(3, HIDDEN)
    out = torch.full((3, RANK), 7.0)
    skip_rows_without_adapter(lora_ops.bgmv_shrink)(h, a, out, idx, 0.5)
    assert torch.equal(out[0], torch.full((RANK,), 7.0))
    ref = torch.zeros(2, RANK)
    lora_ops.bgmv_shrink(h[1:], a, ref, idx[1:], 0.5)
    assert torch.equal(out[1:], ref)
    wide = torch.zeros(3, OUT + 4)
    skip_rows_without_adapter(lora_ops.bgmv_expand_slice)(x, b, wide, idx, 2, OUT, True)
    assert torch.equal(wide[0], torch.zeros(OUT + 4)) and wide[1:].abs().sum() > 0
