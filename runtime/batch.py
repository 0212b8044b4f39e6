"""The running batch's tensors: its rows' KV cache, attention mask, positions and next scores.

Rows join and leave between decode steps. Each row is left-padded to the batch's length:
``mask`` marks its real positions and ``positions`` its own position ids, so padding changes
nothing a row computes (masked keys get no attention weight). ``merge`` pads the shorter of
two batches on the left and stacks them; ``keep`` drops rows and then the columns that no
remaining row uses, so a long finished row does not leave its length behind. This is the
concatenate / filter pair of Hugging Face TGI's first ``CausalLMBatch``, on transformers'
``DynamicCache``; no library exposes it for a transformers model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812 - the conventional alias

from runtime.request import GenRequest


def _layers(cache: Any) -> list[Any]:
    layers = getattr(cache, "layers", None)
    if layers is None:
        raise TypeError(f"{type(cache).__name__} has no per-layer key/value tensors")
    return layers


def check_cache(cache: Any) -> None:
    """Continuous batching rewrites the cache between steps: only full-attention layers whose
    keys and values are plain tensors (transformers' ``DynamicLayer``) can be padded and cut."""
    from transformers.cache_utils import DynamicLayer

    for layer in _layers(cache):
        if type(layer) is not DynamicLayer:
            raise TypeError(
                f"cache layer {type(layer).__name__} is not a full-attention DynamicLayer "
                "(sliding-window or recurrent layers cannot join a running batch)"
            )


@dataclass
class RunningBatch:
    rows: list[GenRequest] = field(default_factory=list)
    kv: Any = None
    mask: torch.Tensor | None = None  # [rows, length], 1 where a row has a real token
    positions: torch.Tensor | None = None  # [rows], the position id of each row's last token
    logits: torch.Tensor | None = None  # [rows, vocab], the scores of each row's next token

    @property
    def length(self) -> int:
        return 0 if self.mask is None else int(self.mask.shape[1])

    def merge(self, other: RunningBatch) -> None:
        """Append ``other``'s rows (its KV cache is taken over, not copied twice)."""
        if not other.rows:
            return
        if not self.rows:
            self.rows, self.kv, self.mask = list(other.rows), other.kv, other.mask
            self.positions, self.logits = other.positions, other.logits
            return
        assert self.mask is not None
        assert other.mask is not None
        length = max(self.length, other.length)
        pad_a, pad_b = length - self.length, length - other.length
        for mine, theirs in zip(_layers(self.kv), _layers(other.kv), strict=True):
            mine.keys = torch.cat([F.pad(mine.keys, (0, 0, pad_a, 0)),
                                   F.pad(theirs.keys, (0, 0, pad_b, 0))])  # fmt: skip
            mine.values = torch.cat([F.pad(mine.values, (0, 0, pad_a, 0)),
                                     F.pad(theirs.values, (0, 0, pad_b, 0))])  # fmt: skip
        self.mask = torch.cat([F.pad(self.mask, (pad_a, 0)), F.pad(other.mask, (pad_b, 0))])
        self.positions = torch.cat([self.positions, other.positions])  # type: ignore[list-item]
        self.logits = torch.cat([self.logits, other.logits])  # type: ignore[list-item]
        self.rows += other.rows

    def keep(self, indices: list[int]) -> None:
        """Keep only these rows, in this order, and cut the columns none of them uses."""
        if len(indices) == len(self.rows):
            return
        if not indices:
            self.rows, self.kv, self.mask, self.positions, self.logits = [], None, None, None, None
            return
        assert self.mask is not None
        index = torch.tensor(indices, device=self.mask.device)
        mask = self.mask.index_select(0, index)
        used = mask.any(dim=0).nonzero()
        start = int(used[0]) if len(used) else 0
        for layer in _layers(self.kv):
            layer.keys = layer.keys.index_select(0, index)[:, :, start:]
            layer.values = layer.values.index_select(0, index)[:, :, start:]
        self.mask = mask[:, start:]
        self.positions = self.positions.index_select(0, index)  # type: ignore[union-attr]
        if self.logits is not None:
            self.logits = self.logits.index_select(0, index)
        self.rows = [self.rows[i] for i in indices]

    def extend_mask(self) -> torch.Tensor:
        """The mask with one more real column for every row: the token about to be fed."""
        assert self.mask is not None
        self.mask = torch.cat([self.mask, self.mask.new_ones((len(self.rows), 1))], dim=1)
        return self.mask
