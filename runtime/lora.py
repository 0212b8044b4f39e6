"""Batched multi-adapter LoRA for linear layers: every row of a batch may use its own adapter.

Each wrapped projection keeps the device-resident adapters' A/B matrices per slot. For a batch,
the rows are grouped by adapter once per batch composition (``BatchContext``), and each group's
delta is two batched matrix products in which every row is its own item: ``bmm`` of the row
against a stride-0 expanded view of its adapter's A and B. No weight is copied per row (a
per-row gather of A and B costs rows x rank x (in + out) per projection: gigabytes for a 4B
model at batch 16), and the launches per layer grow with the adapters in the batch, not with
its rows. No library offers multi-adapter batches for transformers models except PEFT's
``adapter_names=`` loop, whose arithmetic depends on the batch (below), hence this module.

Why one item per row. A float32 ``linear`` over M rows does not give each row the bits it
gets alone: the matrix kernel's blocking depends on M. Measured on this machine, rows differ
from their single-row result in the last bits for most M, and on a bfloat16 base those bits
decide the rounding of the sum, so the greedy token of a row changed with its neighbours.
A ``bmm`` item of one row is the same computation whatever the batch holds, and equals
PEFT's ``lora_B(lora_A(x)) * scaling`` for that row alone, bit for bit (tested against PEFT).
So a row's output does not depend on what joins or leaves the batch, in float32 and bfloat16.

Precision follows PEFT. PEFT keeps LoRA weights in float32 on a bfloat16 or float16 base
(``autocast_adapter_dtype``), casts the input to float32 for the LoRA path, adds the float32
delta to the base layer's output (which promotes it) and casts the sum back to the base dtype.
Casting A and B down to bfloat16 instead changes the greedy token within one step, so the slots
hold float32 weights and every path here adds in float32.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

#: The projections of a Qwen3 / Llama decoder layer that adapters may target.
TARGETABLE = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
#: The dtype LoRA weights are kept and computed in, whatever the base's (PEFT's choice).
LORA_DTYPE = torch.float32

#: One adapter's rows in a batch: its slot, and the row indices (None: every row).
Group = tuple[int, torch.Tensor | None]


@dataclass
class BatchContext:
    """Which adapter slot each row of the current batch uses; shared by every LoRA layer.

    ``rows`` holds one slot id per row, ``None`` for the base model. The row groups are
    computed once per composition and reused by every layer and decode step until it changes.
    """

    rows: tuple[int | None, ...] = ()
    _groups: dict[torch.device, list[Group]] = field(default_factory=dict, repr=False)

    def set_rows(self, rows: list[int | None] | tuple[int | None, ...]) -> None:
        rows = tuple(rows)
        if rows != self.rows:
            self.rows = rows
            self._groups = {}

    def groups(self, device: torch.device) -> list[Group]:
        """(slot, row indices) per adapter in the batch, in order of first appearance."""
        cached = self._groups.get(device)
        if cached is None:
            slots = [s for s in dict.fromkeys(self.rows) if s is not None]
            if len(slots) == 1 and None not in self.rows:
                cached = [(slots[0], None)]
            else:
                index = {s: [i for i, r in enumerate(self.rows) if r == s] for s in slots}
                cached = [(s, torch.tensor(index[s], device=device)) for s in slots]
            self._groups[device] = cached
        return cached


@dataclass
class SlotWeights:
    a: torch.Tensor  # [r, in], float32
    b: torch.Tensor  # [out, r], float32
    scale: float


class MultiLoraLinear(nn.Module):
    """A frozen ``nn.Linear`` plus per-slot LoRA weights applied per row."""

    def __init__(self, base: nn.Linear, ctx: BatchContext) -> None:
        super().__init__()
        self.base_layer = base
        self.ctx = ctx
        self.slots: dict[int, SlotWeights] = {}

    @property
    def in_features(self) -> int:
        return self.base_layer.in_features

    @property
    def out_features(self) -> int:
        return self.base_layer.out_features

    @property
    def weight(self) -> torch.Tensor:
        return self.base_layer.weight

    def set_slot(self, slot: int, weights: SlotWeights | None) -> None:
        if weights is None:
            self.slots.pop(slot, None)
        else:
            self.slots[slot] = weights

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        result = self.base_layer(x)
        if not self.slots:
            return result
        groups = self.ctx.groups(x.device)
        if not groups:
            return result
        squeeze = x.dim() == 2
        h = (x.unsqueeze(1) if squeeze else x).to(LORA_DTYPE)
        out = result.unsqueeze(1) if squeeze else result
        for slot, index in groups:
            w = self.slots.get(slot)
            if w is None:  # this adapter does not target this layer
                continue
            part = h if index is None else h.index_select(0, index)
            n = part.shape[0]
            # PEFT's lora_B(lora_A(x)) * scaling, one bmm item per row (see the module doc).
            delta = torch.bmm(
                torch.bmm(part, w.a.T.expand(n, *w.a.T.shape)), w.b.T.expand(n, *w.b.T.shape)
            ) * w.scale  # fmt: skip
            if index is None:
                out = (out + delta).to(result.dtype)
            else:
                out.index_copy_(0, index, (out.index_select(0, index) + delta).to(result.dtype))
        return out.squeeze(1) if squeeze else out


def inject(model: nn.Module, ctx: BatchContext) -> dict[str, MultiLoraLinear]:
    """Wrap every targetable projection of ``model`` in place; returns them by module name."""
    wrapped: dict[str, MultiLoraLinear] = {}
    for name, module in list(model.named_modules()):
        leaf = name.rsplit(".", 1)[-1]
        if leaf in TARGETABLE and isinstance(module, nn.Linear):
            parent = model.get_submodule(name.rsplit(".", 1)[0])
            layer = MultiLoraLinear(module, ctx)
            setattr(parent, leaf, layer)
            wrapped[name] = layer
    if not wrapped:
        raise ValueError("the base model has no LoRA-targetable projections (q_proj, ...)")
    return wrapped
