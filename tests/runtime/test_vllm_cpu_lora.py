"""vLLM's CPU LoRA ops and the runtime's replacements (``runtime/vllm_cpu_lora.py``): as
shipped, a row that uses no adapter (index -1) is computed with the last slot's adapter; the
replacements leave such rows alone and compute the others as the shipped ops do, one matrix
product per adapter instead of one weight copy per row."""

from __future__ import annotations

import pytest
import torch
from vllm.lora.ops.torch_ops import lora_ops
from vllm.platforms import current_platform

from runtime import vllm_cpu_lora

SLOTS, RANK, HIDDEN, OUT = 3, 4, 8, 6
#: Rows: no adapter, slot 0, slot 2, slot 0 again, slot 1 (groups that are not contiguous).
INDICES = torch.tensor([-1, 0, 2, 0, 1])
ROWS = len(INDICES)


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.fixture
def tensors() -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    return {
        "x": torch.randn(ROWS, RANK),
        "b": torch.randn(SLOTS, 1, OUT, RANK),  # vLLM's stacked lora_B: (slots, 1, out, rank)
        "a": torch.randn(SLOTS, 1, RANK, HIDDEN),  # and lora_A: (slots, 1, rank, in)
        "h": torch.randn(ROWS, HIDDEN),
        "y": torch.randn(ROWS, OUT),
    }


def test_as_shipped_a_row_without_adapter_gets_the_last_slots_delta(tensors) -> None:
    y = tensors["y"].clone()
    lora_ops.bgmv_expand(tensors["x"], tensors["b"], y, INDICES, add_inputs=True)
    assert not torch.equal(y[0], tensors["y"][0])  # the bug: row 0 has no adapter


@pytest.mark.parametrize("add_inputs", [True, False])
def test_expand_leaves_rows_without_adapter_and_matches_the_shipped_op_elsewhere(
    tensors, add_inputs: bool
) -> None:
    shipped = tensors["y"].clone()
    lora_ops.bgmv_expand(tensors["x"][1:], tensors["b"], shipped[1:], INDICES[1:], add_inputs)
    ours = tensors["y"].clone()
    vllm_cpu_lora.bgmv_expand(tensors["x"], tensors["b"], ours, INDICES, add_inputs)
    assert torch.equal(ours[0], tensors["y"][0])
    assert _close(ours[1:], shipped[1:])


def test_shrink_assigns_each_rows_own_adapter_and_skips_rows_without_one(tensors) -> None:
    out = torch.full((ROWS, RANK), 7.0)
    vllm_cpu_lora.bgmv_shrink(tensors["h"], tensors["a"], out, INDICES, 0.5)
    assert torch.equal(out[0], torch.full((RANK,), 7.0))
    for row, slot in enumerate(INDICES.tolist()[1:], start=1):
        want = 0.5 * tensors["h"][row] @ tensors["a"][slot, 0].T
        assert _close(out[row], want), f"row {row} (slot {slot})"
    shipped = torch.zeros(ROWS - 1, RANK)
    lora_ops.bgmv_shrink(tensors["h"][1:], tensors["a"], shipped, INDICES[1:], 0.5)
    assert _close(out[1:], shipped)


def test_expand_slice_writes_only_its_columns(tensors) -> None:
    wide = torch.zeros(ROWS, OUT + 4)
    vllm_cpu_lora.bgmv_expand_slice(tensors["x"], tensors["b"], wide, INDICES, 2, OUT, True)
    assert torch.equal(wide[0], torch.zeros(OUT + 4))
    assert torch.equal(wide[:, :2], torch.zeros(ROWS, 2))
    assert torch.equal(wide[:, 2 + OUT :], torch.zeros(ROWS, 2))
    shipped = torch.zeros(ROWS - 1, OUT + 4)
    lora_ops.bgmv_expand_slice(tensors["x"][1:], tensors["b"], shipped, INDICES[1:], 2, OUT, True)
    assert _close(wide[1:], shipped)


def test_one_adapter_for_every_row_and_the_shipped_ops_edge_cases(tensors) -> None:
    same = torch.full((ROWS,), 2)
    ours, shipped = tensors["y"].clone(), tensors["y"].clone()
    vllm_cpu_lora.bgmv_expand(tensors["x"], tensors["b"], ours, same, True)
    lora_ops.bgmv_expand(tensors["x"], tensors["b"], shipped, same, True)
    assert _close(ours, shipped)
    # One input row against many output rows: like vLLM's op, its delta goes to every row.
    ours, shipped = tensors["y"].clone(), tensors["y"].clone()
    vllm_cpu_lora.bgmv_expand(tensors["x"][:1], tensors["b"], ours, same[:1], True)
    lora_ops.bgmv_expand(tensors["x"][:1], tensors["b"], shipped, same[:1], True)
    assert _close(ours, shipped) and not torch.equal(ours[1:], tensors["y"][1:])
    # An output narrower than the adapter's: the columns both have.
    narrow = torch.zeros(ROWS, OUT - 2)
    vllm_cpu_lora.bgmv_expand(tensors["x"], tensors["b"], narrow, same, False)
    want = tensors["x"] @ tensors["b"][2, 0, : OUT - 2].T
    assert _close(narrow, want)


@pytest.mark.skipif(not current_platform.is_cpu(), reason="the plugin acts on vLLM's CPU build")
def test_the_prefill_ops_use_the_replacements_once_registered(tensors, monkeypatch) -> None:
    """``sgmv_*`` (prefill) call the ``bgmv_*`` ops through vLLM's module: registering the
    plugin makes them skip rows without an adapter too."""
    import vllm.lora.ops.torch_ops as package
    import vllm.lora.punica_wrapper.punica_cpu as punica_cpu

    for module in (lora_ops, package, punica_cpu):
        for name in vllm_cpu_lora.OPS:
            if hasattr(module, name):
                monkeypatch.setattr(module, name, getattr(module, name))
    vllm_cpu_lora.register()
    y = tensors["y"].clone()
    # Two sequences: three tokens without an adapter, then two with slot 1.
    lora_ops.sgmv_expand(
        tensors["x"],
        tensors["b"],
        y,
        torch.tensor([0, 3]),
        torch.tensor([3, 2]),
        torch.tensor([-1, 1]),
        2,
        3,
        ROWS,
        add_inputs=True,
    )
    assert torch.equal(y[:3], tensors["y"][:3])
    assert _close(y[3:], tensors["y"][3:] + tensors["x"][3:] @ tensors["b"][1, 0].T)
    assert punica_cpu.bgmv_expand is vllm_cpu_lora.bgmv_expand


@pytest.mark.parametrize("rows_per_slot", [0, 1000], ids=["sorted-by-adapter", "per-row-copy"])
def test_both_ways_of_computing_agree_with_the_shipped_ops(monkeypatch, rows_per_slot) -> None:
    """Many rows over few adapters (a prefill) are sorted by adapter; few rows per adapter (a
    decode step) take a weight copy per row. Either way each row gets its own adapter's
    product, and rows without one are untouched."""
    monkeypatch.setattr(vllm_cpu_lora, "GATHER_ROWS_PER_SLOT", rows_per_slot)
    torch.manual_seed(1)
    rows = 40
    indices = torch.randint(-1, SLOTS, (rows,))
    indices[:3] = torch.tensor([-1, 0, 2])
    h, x, y = torch.randn(rows, HIDDEN), torch.randn(rows, RANK), torch.randn(rows, OUT + 2)
    a, b = torch.randn(SLOTS, 1, RANK, HIDDEN), torch.randn(SLOTS, 1, OUT, RANK)
    adapter = indices >= 0
    shrunk = torch.zeros(rows, RANK)
    vllm_cpu_lora.bgmv_shrink(h, a, shrunk, indices, 2.0)
    want = torch.zeros(int(adapter.sum()), RANK)
    lora_ops.bgmv_shrink(h[adapter], a, want, indices[adapter], 2.0)
    assert _close(shrunk[adapter], want)
    assert not shrunk[~adapter].any()  # untouched: still the zeros it held
    for add in (True, False):
        ours = y.clone()
        vllm_cpu_lora.bgmv_expand_slice(x, b, ours, indices, 1, OUT, add)
        want = y[adapter].clone()
        lora_ops.bgmv_expand_slice(x[adapter], b, want, indices[adapter], 1, OUT, add)
        assert _close(ours[adapter], want)
        assert torch.equal(ours[~adapter], y[~adapter])


@pytest.mark.parametrize("rows_per_slot", [0, 1000], ids=["sorted-by-adapter", "per-row-copy"])
def test_bfloat16_weights_into_a_float32_buffer_and_a_narrower_output(
    monkeypatch, rows_per_slot
) -> None:
    """A bfloat16 model: vLLM's shrink writes into a float32 buffer and its expand adds into
    bfloat16 activations, some narrower than the adapter (``common_len``)."""
    monkeypatch.setattr(vllm_cpu_lora, "GATHER_ROWS_PER_SLOT", rows_per_slot)
    torch.manual_seed(2)
    rows = 24
    indices = torch.tensor([-1, 0, 1, 2] * 6)
    h = torch.randn(rows, HIDDEN, dtype=torch.bfloat16)
    a = torch.randn(SLOTS, 1, RANK, HIDDEN, dtype=torch.bfloat16)
    b = torch.randn(SLOTS, 1, OUT, RANK, dtype=torch.bfloat16)
    adapter = indices >= 0
    ours = torch.zeros(rows, RANK)
    vllm_cpu_lora.bgmv_shrink(h, a, ours, indices, 1.0)
    shipped = torch.zeros(int(adapter.sum()), RANK)
    lora_ops.bgmv_shrink(h[adapter], a, shipped, indices[adapter], 1.0)
    assert ours.dtype == torch.float32 and _close(ours[adapter], shipped)
    y = torch.randn(rows, OUT - 2, dtype=torch.bfloat16)
    mine = y.clone()
    vllm_cpu_lora.bgmv_expand(ours, b, mine, indices, True)
    theirs = y[adapter].clone()
    lora_ops.bgmv_expand(ours[adapter], b, theirs, indices[adapter], True)
    assert mine.dtype == torch.bfloat16 and torch.equal(mine[~adapter], y[~adapter])
    assert torch.allclose(mine[adapter].float(), theirs.float(), rtol=1e-2, atol=1e-2)


def test_an_empty_batch_writes_nothing_and_mismatched_rows_are_refused(tensors) -> None:
    empty = torch.empty(0, dtype=torch.long)
    out = torch.zeros(0, RANK)
    vllm_cpu_lora.bgmv_shrink(torch.randn(0, HIDDEN), tensors["a"], out, empty, 1.0)
    vllm_cpu_lora.bgmv_expand(torch.randn(0, RANK), tensors["b"], torch.zeros(0, OUT), empty)
    # One index per input row, as vLLM 0.32.0 passes them: anything else is an error, not a
    # guess at which adapter a row meant.
    with pytest.raises(ValueError, match="2 input rows, 3 adapter indices"):
        vllm_cpu_lora.bgmv_shrink(
            tensors["h"][:2], tensors["a"], torch.zeros(2, RANK), torch.tensor([0, 1, 2]), 1.0
        )
