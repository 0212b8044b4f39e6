"""The multi-adapter LoRA layer: a row gets the same bits whatever else its batch holds, whether
the layer gathers per-row copies or groups rows by adapter, and equal to PEFT's arithmetic for
that row alone."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

from runtime.lora import GATHER_AFTER, BatchContext, MultiLoraLinear, SlotWeights


def _layer(budget: int, rank: int = 8) -> tuple[MultiLoraLinear, BatchContext, dict]:
    torch.manual_seed(0)
    ctx = BatchContext()
    layer = MultiLoraLinear(nn.Linear(96, 160, bias=False), ctx, gather_budget=budget)
    weights = {}
    for slot in range(3):
        w = SlotWeights(torch.randn(rank, 96), torch.randn(160, rank) * 0.1, scale=2.0 / (slot + 1))
        layer.set_slot(slot, w)
        weights[slot] = w
    return layer, ctx, weights


def _alone(result: torch.Tensor, w: SlotWeights | None, x: torch.Tensor) -> torch.Tensor:
    """PEFT's lora.Linear for one row: result + lora_B(lora_A(x)) * scaling. (The base layer's
    own product depends on the batch in float32; the LoRA part is what this layer owns.)"""
    return result if w is None else result + F.linear(F.linear(x, w.a), w.b) * w.scale


@pytest.mark.parametrize("budget", [0, 1 << 30], ids=["grouped", "gathered"])
@pytest.mark.parametrize("tokens", [1, 7], ids=["decode", "prefill"])
def test_each_row_gets_its_single_row_bits_in_any_batch(budget: int, tokens: int) -> None:
    layer, ctx, weights = _layer(budget)
    rows = [0, None, 2, 1, 0, 2, None, 1, 1]
    x = torch.randn(len(rows), tokens, 96)
    for _ in range(GATHER_AFTER + 1):  # a composition that has run a few steps unchanged
        ctx.set_rows(rows)
    with torch.inference_mode():
        out = layer(x)
        base = layer.base_layer(x)
        for i, slot in enumerate(rows):
            w = weights.get(slot) if slot is not None else None
            assert torch.equal(out[i : i + 1], _alone(base[i : i + 1], w, x[i : i + 1])), (i, slot)
    # Decoding steps gather when the budget allows; prompts go row by row.
    assert (layer._gathered is not None) == (bool(budget) and tokens == 1)


@pytest.mark.parametrize(
    "rows",
    [[1, 1, None], [None, 1, 1], [2, 2, 2], [0, 1, 2, 1], [None, None]],
    ids=["adapter-then-base", "base-then-adapter", "one-adapter", "untargeted-mixed", "base"],
)
def test_grouped_rows_keep_their_own_bits_whatever_the_order(rows: list[int | None]) -> None:
    """Rows are reordered by adapter and put back; slot 1 does not target this layer (as an
    attention-only adapter's rows reach an MLP projection), so its rows get the base's bits."""
    layer, ctx, weights = _layer(0)
    layer.set_slot(1, None)
    x = torch.randn(len(rows), 1, 96)
    ctx.set_rows(rows)
    with torch.inference_mode():
        out, base = layer(x), layer.base_layer(x)
    for i, slot in enumerate(rows):
        w = weights[slot] if slot in (0, 2) else None
        assert torch.equal(out[i : i + 1], _alone(base[i : i + 1], w, x[i : i + 1])), (i, slot)


def test_gathered_copies_follow_the_composition_and_the_slots() -> None:
    layer, ctx, weights = _layer(1 << 30)
    x = torch.randn(4, 1, 96)

    def steady(rows: list[int]) -> None:
        for _ in range(GATHER_AFTER + 1):
            ctx.set_rows(rows)

    with torch.inference_mode():
        steady([0, 1, 0, 1])
        first = layer(x)
        assert layer._gathered is not None
        steady([1, 0, 1, 0])
        swapped = layer(x)
        assert not torch.equal(first, swapped)
        layer.set_slot(1, SlotWeights(weights[0].a, weights[0].b, weights[0].scale))
        same = layer(x)  # slot 1 now holds slot 0's weights: every row as slot 0
        steady([0, 0, 0, 0])
        assert torch.equal(same, layer(x))


def test_the_budget_and_mixed_ranks_fall_back_to_grouping() -> None:
    layer, ctx, _ = _layer(1 << 30)
    layer.set_slot(1, SlotWeights(torch.randn(4, 96), torch.randn(160, 4), 1.0))  # rank 4
    for _ in range(GATHER_AFTER + 1):
        ctx.set_rows([0, 1])
    with torch.inference_mode():
        layer(torch.randn(2, 1, 96))
    assert layer._gathered is None, "different ranks would need zero padding: grouped instead"
    small, ctx2, _ = _layer(budget=2 * 8 * (96 + 160) * 4 - 1)  # one byte short of two rows
    for _ in range(GATHER_AFTER + 1):
        ctx2.set_rows([0, 1])
    with torch.inference_mode():
        small(torch.randn(2, 1, 96))
    assert small._gathered is None


def test_a_composition_that_just_changed_is_not_copied() -> None:
    layer, ctx, _ = _layer(1 << 30)
    x = torch.randn(2, 1, 96)
    with torch.inference_mode():
        ctx.set_rows([0, 1])
        layer(x)
        assert layer._gathered is None, "a copy for one step costs more than it saves"
        for _ in range(GATHER_AFTER):
            ctx.set_rows([0, 1])
        layer(x)
        assert layer._gathered is not None
