"""Task metrics for the evaluation gate: chrF, exact match, JSON validity and field F1, PII score.

chrF is the standard character n-gram F-score (Popović 2015: n = 1..6, beta = 2), written out
here because it is a dozen lines and no package on the training image provides it.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any


def chrf(hypothesis: str, reference: str, n: int = 6, beta: float = 2.0) -> float:
    hyp, ref = hypothesis.replace(" ", ""), reference.replace(" ", "")
    precisions, recalls = [], []
    for k in range(1, n + 1):
        h = Counter(hyp[i : i + k] for i in range(len(hyp) - k + 1))
        r = Counter(ref[i : i + k] for i in range(len(ref) - k + 1))
        if not h or not r:
            continue
        overlap = sum((h & r).values())
        precisions.append(overlap / sum(h.values()))
        recalls.append(overlap / sum(r.values()))
    if not precisions:
        return 0.0
    p, r = sum(precisions) / len(precisions), sum(recalls) / len(recalls)
    if p + r == 0:
        return 0.0
    return 100 * (1 + beta**2) * p * r / (beta**2 * p + r)


def exact_match(hypothesis: str, reference: str) -> float:
    return float(hypothesis.strip() == reference.strip())


def json_field_f1(hypothesis: str, reference: str) -> tuple[bool, float]:
    """(valid JSON object?, F1 of its key/value pairs against the reference's)."""
    try:
        obj = json.loads(hypothesis.strip())
    except (ValueError, TypeError):
        return False, 0.0
    if not isinstance(obj, dict):
        return False, 0.0
    ref = json.loads(reference)
    pairs_h = {(k, json.dumps(v, sort_keys=True)) for k, v in obj.items()}
    pairs_r = {(k, json.dumps(v, sort_keys=True)) for k, v in ref.items()}
    tp = len(pairs_h & pairs_r)
    if tp == 0:
        return True, 0.0
    p, r = tp / len(pairs_h), tp / len(pairs_r)
    return True, 2 * p * r / (p + r)


def pii_scores(hypothesis: str, reference: str, values: dict[str, str]) -> tuple[float, float]:
    """(leak rate: share of PII values that survive, redaction score in [0, 1]).

    The redaction score rewards placeholders in the right places and penalizes leaks, so an
    output that merely drops everything (no leak, no placeholder) does not win.
    """
    leaked = sum(1 for v in values.values() if v and v in hypothesis)
    leak_rate = leaked / max(1, len(values))
    want = Counter(tok for tok in reference.split() if tok.startswith("[") and "]" in tok)
    have = Counter(tok for tok in hypothesis.split() if tok.startswith("[") and "]" in tok)
    recall = sum((want & have).values()) / max(1, sum(want.values()))
    return leak_rate, recall * (1 - leak_rate)


def headline(metric: str) -> str:
    """What ``score`` measures for a task metric (the PII gate scores redaction, not leaks)."""
    return "redaction_score" if metric == "pii_leak_rate" else metric


def score(metric: str, outputs: list[str], records: list[Any]) -> dict[str, float]:
    """The task's headline metric (``score``, higher is better) and its companions."""
    n = max(1, len(outputs))
    out: dict[str, float] = {
        "exact_match": sum(exact_match(o, r.label) for o, r in zip(outputs, records, strict=True))
        / n,
        "chrf": sum(chrf(o, r.label) for o, r in zip(outputs, records, strict=True)) / n,
    }
    if metric == "json_field_f1":
        res = [json_field_f1(o, r.label) for o, r in zip(outputs, records, strict=True)]
        out["json_valid"] = sum(v for v, _ in res) / n
        out["json_field_f1"] = sum(f for _, f in res) / n
        out["score"] = out["json_field_f1"]
    elif metric == "pii_leak_rate":
        res = [
            pii_scores(o, r.label, json.loads(r.note))
            for o, r in zip(outputs, records, strict=True)
        ]
        out["pii_leak_rate"] = sum(leak for leak, _ in res) / n
        out["redaction_score"] = sum(s for _, s in res) / n
        out["score"] = out["redaction_score"]
    else:
        out["score"] = out["chrf"]
    return out
