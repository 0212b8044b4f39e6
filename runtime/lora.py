"""Batched multi-adapter LoRA for linear layers: every row of a batch may use its own adapter.

Each wrapped projection keeps the device-resident adapters' A/B matrices per slot. For a batch,
every row's delta is two batched matrix products in which the row is its own item (``bmm``), in
one of two ways, chosen per layer and batch composition:

- gathered: each row's A and B are copied into one stack once per batch composition (cached
  until it changes, as Punica's SGMV and S-LoRA index per-row weights in custom GPU kernels),
  then two ``bmm`` calls serve the whole batch, however many adapters it mixes;
- grouped: the rows are ordered by adapter once per composition (a permutation), each
  adapter's contiguous run of rows makes one pair of ``bmm`` calls against a stride-0 expanded
  view of its A and B (no weight copies), written into one delta for the batch that is put
  back in row order and added at once: three tensor calls per adapter, where scattering each
  group into the output took eight (profiled on the serving benchmark's Zipf case: the LoRA
  layers' own time fell by about a tenth).

Gathering costs rows x rank x (in + out) per projection (gigabytes for a 4B model at rank 64
and batch 16), so it is used only while the copies fit ``gather_budget`` bytes (the engine's
``OPTION_LORA_GATHER_BYTES``, shared by all layers), every adapter of the batch has the same
rank (a zero-padded rank would change the products' bits), and the composition has already run
``GATHER_AFTER`` steps unchanged: under continuous batching rows join and leave often, and a
copy made for one step costs more than it saves. Otherwise the layer groups. Both give each
row the same bits, so a row may change paths between steps. No library offers multi-adapter
batches for transformers models except PEFT's ``adapter_names=`` loop, whose arithmetic depends
on the batch (below), hence this module.

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

#: Steps a batch composition must have run unchanged before layers copy per-row weights.
GATHER_AFTER = 2


@dataclass(frozen=True)
class Layout:
    """A batch's rows ordered by adapter: ``perm`` puts them in that order (None: they already
    are), ``inverse`` puts them back, and ``segments`` gives each adapter's run of rows in the
    ordered batch as (slot, start, end). Rows of the base model come last, in no segment."""

    segments: tuple[tuple[int, int, int], ...]
    perm: torch.Tensor | None
    inverse: torch.Tensor | None
    rows: int

    @property
    def whole(self) -> int | None:
        """The slot that every row of the batch uses, if one does."""
        if len(self.segments) == 1 and self.segments[0][2] - self.segments[0][1] == self.rows:
            return self.segments[0][0]
        return None


@dataclass
class BatchContext:
    """Which adapter slot each row of the current batch uses; shared by every LoRA layer.

    ``rows`` holds one slot id per row, ``None`` for the base model. The layout is computed
    once per composition and reused by every layer and decode step until it changes.
    """

    rows: tuple[int | None, ...] = ()
    #: Changes with every new composition; layers key their gathered copies on it.
    version: int = 0
    #: Forward passes the current composition has run unchanged before this one.
    stable: int = 0
    _layout: Layout | None = field(default=None, repr=False)

    def set_rows(self, rows: list[int | None] | tuple[int | None, ...]) -> None:
        rows = tuple(rows)
        if rows != self.rows:
            self.rows = rows
            self.version += 1
            self.stable = 0
            self._layout = None
        else:
            self.stable += 1

    def layout(self, device: torch.device) -> Layout:
        """The current composition's layout (a model's layers share one device)."""
        if self._layout is None:
            order: list[int] = []
            segments = []
            for slot in dict.fromkeys(self.rows):
                if slot is not None:
                    rows = [i for i, r in enumerate(self.rows) if r == slot]
                    segments.append((slot, len(order), len(order) + len(rows)))
                    order += rows
            order += [i for i, r in enumerate(self.rows) if r is None]
            perm = inverse = None
            if order != list(range(len(order))):
                perm = torch.tensor(order, device=device)
                inverse = torch.empty_like(perm)
                inverse[perm] = torch.arange(len(order), device=device)
            self._layout = Layout(tuple(segments), perm, inverse, len(order))
        return self._layout


@dataclass
class SlotWeights:
    a: torch.Tensor  # [r, in], float32
    b: torch.Tensor  # [out, r], float32
    scale: float


class MultiLoraLinear(nn.Module):
    """A frozen ``nn.Linear`` plus per-slot LoRA weights applied per row."""

    def __init__(self, base: nn.Linear, ctx: BatchContext, gather_budget: int = 0) -> None:
        super().__init__()
        self.base_layer = base
        self.ctx = ctx
        self.slots: dict[int, SlotWeights] = {}
        #: Bytes this layer may spend on per-row copies of A and B (0: always group).
        self.gather_budget = gather_budget
        self._gathered: tuple[int, torch.Tensor, torch.Tensor, torch.Tensor] | None = None

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
        self._gathered = None

    def _gather(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
        """Every row's A and B (zeros for rows this layer does not adapt) and scale, stacked;
        None when the copies would exceed the budget or the ranks differ."""
        ctx = self.ctx
        if self._gathered is not None and self._gathered[0] == ctx.version:
            return self._gathered[1:]
        used = [self.slots[s] for s in dict.fromkeys(ctx.rows) if s in self.slots]
        ranks = {w.a.shape[0] for w in used}
        if len(ranks) != 1:
            return None
        (r,) = ranks
        if len(ctx.rows) * r * (self.in_features + self.out_features) * 4 > self.gather_budget:
            return None
        zero_a = x.new_zeros((r, self.in_features), dtype=LORA_DTYPE)
        zero_b = x.new_zeros((self.out_features, r), dtype=LORA_DTYPE)
        picked = [self.slots.get(s) if s is not None else None for s in ctx.rows]
        a = torch.stack([w.a if w is not None else zero_a for w in picked])
        b = torch.stack([w.b if w is not None else zero_b for w in picked])
        scale = torch.tensor([w.scale if w is not None else 0.0 for w in picked],
                             dtype=LORA_DTYPE, device=x.device).view(-1, 1, 1)  # fmt: skip
        # The transposed views keep each item's layout that of ``w.a.T`` (a contiguous copy of
        # the transpose would run another kernel, with other bits).
        self._gathered = (ctx.version, a.transpose(1, 2), b.transpose(1, 2), scale)
        return self._gathered[1:]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        result = self.base_layer(x)
        if not self.slots:
            return result
        layout = self.ctx.layout(x.device)
        if not layout.segments:
            return result
        squeeze = x.dim() == 2
        h = (x.unsqueeze(1) if squeeze else x).to(LORA_DTYPE)
        out = result.unsqueeze(1) if squeeze else result
        # Prompts (more than one position per row) go row by row: a batched product of
        # several rows' [positions x rank] blocks changed the second product's bits (measured
        # here), while one position per row (decoding) gives every row its own bits in a batch.
        prefill = h.shape[1] > 1
        worth = len(layout.segments) > 1 and self.gather_budget and self.ctx.stable >= GATHER_AFTER
        gathered = self._gather(x) if worth and not prefill else None
        if gathered is not None:
            a, b, scale = gathered
            delta = torch.bmm(torch.bmm(h, a), b) * scale
        elif (slot := layout.whole) is not None:
            w = self.slots.get(slot)
            if w is None:  # the batch's adapter does not target this layer
                return result
            delta = _rows_delta(h, w, prefill)
        else:
            ordered = h if layout.perm is None else h.index_select(0, layout.perm)
            # Rows of no adapter (base rows, or an adapter that does not target this layer)
            # add an exact zero: their sum, and its cast to the base dtype, is unchanged.
            delta = h.new_zeros((h.shape[0], h.shape[1], self.out_features))
            for slot, start, end in layout.segments:
                w = self.slots.get(slot)
                if w is not None:
                    _rows_delta(ordered[start:end], w, prefill, out=delta[start:end])
            if layout.inverse is not None:
                delta = delta.index_select(0, layout.inverse)
        out = (out + delta).to(result.dtype)
        return out.squeeze(1) if squeeze else out


def _rows_delta(
    part: torch.Tensor, w: SlotWeights, prefill: bool, out: torch.Tensor | None = None
) -> torch.Tensor:
    """The delta of these rows: all at once when decoding, row by row for prompts."""
    if not prefill:
        return _delta(part, w, out)
    if out is None:
        out = part.new_empty((part.shape[0], part.shape[1], w.b.shape[0]))
    for i in range(part.shape[0]):
        _delta(part[i : i + 1], w, out[i : i + 1])
    return out


def _delta(part: torch.Tensor, w: SlotWeights, out: torch.Tensor | None = None) -> torch.Tensor:
    """PEFT's ``lora_B(lora_A(x)) * scaling``, one ``bmm`` item per row (see the module doc)."""
    n = part.shape[0]
    first = torch.bmm(part, w.a.T.expand(n, *w.a.T.shape))
    return torch.mul(torch.bmm(first, w.b.T.expand(n, *w.b.T.shape)), w.scale, out=out)


def inject(
    model: nn.Module, ctx: BatchContext, gather_budget: int = 0
) -> dict[str, MultiLoraLinear]:
    """Wrap every targetable projection of ``model`` in place; returns them by module name.
    ``gather_budget`` bytes of per-row copies are shared evenly by the wrapped layers."""
    targets = [
        (name, module)
        for name, module in model.named_modules()
        if name.rsplit(".", 1)[-1] in TARGETABLE and isinstance(module, nn.Linear)
    ]
    if not targets:
        raise ValueError("the base model has no LoRA-targetable projections (q_proj, ...)")
    share = gather_budget // len(targets)
    wrapped: dict[str, MultiLoraLinear] = {}
    for name, module in targets:
        parent_name, leaf = name.rsplit(".", 1)
        layer = MultiLoraLinear(module, ctx, share)
        setattr(model.get_submodule(parent_name), leaf, layer)
        wrapped[name] = layer
    return wrapped
