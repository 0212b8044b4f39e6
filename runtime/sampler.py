"""Next-token choice for every row of a batch, each with its own parameters and generator.

``generate()`` applies one set of sampling parameters to a whole batch; here each row has its
own temperature, top-k, top-p, repetition penalty, minimum length and seeded generator. A row
whose scores or probabilities are not finite, or whose post-processing raises, fails alone:
``choose`` reports it and the other rows go on unchanged.

The steps run in transformers' order (``RepetitionPenaltyLogitsProcessor``, then temperature,
top-k and top-p warpers), on scores in float32.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from runtime.request import EngineError, GenRequest

#: Sampling bounds, the same in the router's schema: a temperature is 0 (greedy) or at least
#: MIN_TEMPERATURE; a repetition penalty lies within REPETITION_PENALTY. Outside them logits
#: overflow to inf/nan (5e-324 divides them into infinity).
MIN_TEMPERATURE = 1e-2
REPETITION_PENALTY = (0.1, 10.0)


def _check_scores(row: torch.Tensor, after: str) -> None:
    """Scores may be -inf (masked) but never NaN or +inf: both make sampling meaningless."""
    if torch.isnan(row).any() or torch.isposinf(row).any():
        raise FloatingPointError(f"the scores are not finite after {after}")


def choose(
    logits: torch.Tensor, rows: list[GenRequest], eos_ids: Iterable[int]
) -> tuple[list[int], dict[int, EngineError]]:
    """Each row's next token, and the rows that cannot go on (by index): those fail alone."""
    logits = logits.float()
    eos = sorted(eos_ids)
    for i, r in enumerate(rows):
        if eos and len(r.output_ids) < r.params.min_new_tokens:
            logits[i, eos] = float("-inf")  # as transformers' min_new_tokens does
    greedy = logits.argmax(dim=-1).tolist()
    bad = (~torch.isfinite(logits).any(dim=-1) | torch.isnan(logits).any(dim=-1)).tolist()
    out: list[int] = []
    failed: dict[int, EngineError] = {}
    for i, r in enumerate(rows):
        try:
            if bad[i]:
                raise FloatingPointError("the model's scores are not finite")
            out.append(choose_row(logits[i], greedy[i], r))
        except Exception as exc:
            failed[i] = EngineError(
                400 if isinstance(exc, FloatingPointError) else 500,
                f"sampling failed for this request: {exc}",
            )
            out.append(0)
    return out, failed


def choose_row(scores: torch.Tensor, greedy: int, r: GenRequest) -> int:
    p = r.params
    if p.greedy and p.repetition_penalty == 1.0:
        return greedy
    if not (p.greedy or p.temperature >= MIN_TEMPERATURE):
        raise FloatingPointError(f"temperature {p.temperature:g} is below {MIN_TEMPERATURE:g}")
    row = scores.clone()
    if p.repetition_penalty != 1.0:
        seen = torch.tensor(sorted(set(r.input_ids) | set(r.output_ids)), device=row.device)
        score = row[seen]
        row[seen] = torch.where(
            score < 0, score * p.repetition_penalty, score / p.repetition_penalty
        )
        _check_scores(row, "the repetition penalty")
    if p.greedy:
        return int(row.argmax())
    row = row / p.temperature
    _check_scores(row, "the temperature")
    if p.top_k > 0:
        kth = torch.topk(row, min(p.top_k, row.numel())).values[-1]
        row[row < kth] = float("-inf")
    if p.top_p < 1.0:
        sorted_logits, order = torch.sort(row, descending=True)
        cum = sorted_logits.softmax(-1).cumsum(-1)
        drop = cum - sorted_logits.softmax(-1) > p.top_p  # keep the token crossing top_p
        row[order[drop]] = float("-inf")
    probs = row.softmax(-1).cpu()
    if not torch.isfinite(probs).all() or float(probs.sum()) <= 0:
        raise FloatingPointError("the sampling probabilities are not finite")
    return int(torch.multinomial(probs, 1, generator=r.generator))
