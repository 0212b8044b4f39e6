"""Task metrics for the evaluation gate, per example, and the paired bootstrap that compares an
adapter with its base.

- chrF: the standard character n-gram F-score (Popović 2015: n = 1..6, beta = 2), written out
  here because it is a dozen lines and no package on the training image provides it.
- faithfulness: the share of the input's facts (ages, sexes, durations, names, places, amounts;
  ``Record.facts``) that the output states. chrF alone rewards fluent text that changes them.
- JSON: whether the output is a JSON object, and the F1 of its key/value pairs.
- PII: the output against the label (placeholders in place, the rest of the sentence kept),
  zero for an example that leaks any part of a value: a name token, a run of the digits of a
  phone, ID or address, a piece of an e-mail address.

Every score is computed per example, so that the gate can ask whether the adapter beats the
base with a confidence interval over examples rather than by comparing two means.
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from dataclasses import dataclass
from difflib import SequenceMatcher
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


def _fact_pattern(fact: str) -> re.Pattern[str]:
    """A fact as a whole phrase: "4 days" must not match inside "14 days"."""
    body = r"\s+".join(re.escape(part) for part in fact.split())
    return re.compile(rf"(?<![\w]){body}(?![\w])", re.IGNORECASE)


def faithfulness(hypothesis: str, facts: tuple[str, ...] | list[str]) -> float:
    """The share of ``facts`` the output states (1.0 when the input has none)."""
    if not facts:
        return 1.0
    return sum(1 for f in facts if _fact_pattern(f).search(hypothesis)) / len(facts)


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


_TOKEN = re.compile(r"\[[A-Z]+\]|\w+|[^\w\s]")
_DIGITS = re.compile(r"\d+")
_ALPHA = re.compile(r"[^\W\d_]+")


def leaked_parts(hypothesis: str, value: str, label: str) -> list[str]:
    """The parts of one PII value found in the output.

    Parts are the value's words (a first name alone leaks a name; e-mail user names split at
    dots and underscores; the domain counts) and its digit runs of three or more. A digit run
    leaks when it appears inside one of the output's runs, or an output run of four or more
    digits appears inside the value's digits (a phone number written in another format). Parts
    the label itself contains (words of the sentence that are not personal) are not leaks.
    """
    label_words = {w.lower() for w in _ALPHA.findall(label)}
    out_words = {w.lower() for w in _ALPHA.findall(hypothesis)}
    found = [
        w
        for w in _ALPHA.findall(value)
        if (len(w) >= 2 and w.lower() not in label_words and w.lower() in out_words)
    ]
    label_runs = set(_DIGITS.findall(label))
    out_runs = [r for r in _DIGITS.findall(hypothesis) if r not in label_runs]
    value_digits = "".join(_DIGITS.findall(value))
    for run in _DIGITS.findall(value):
        if len(run) >= 3 and run not in label_runs and any(run in o for o in out_runs):
            found.append(run)
    found += [o for o in out_runs if len(o) >= 4 and o in value_digits and o not in found]
    if "@" in value:
        domain = value.split("@", 1)[1].lower()
        if domain in hypothesis.lower():
            found.append(domain)
    return found


def pii_example(hypothesis: str, label: str, values: dict[str, str]) -> tuple[float, float]:
    """(share of PII values with any part leaked, redaction score in [0, 1]).

    The score is the similarity of the output's tokens to the label's, in order (difflib's
    ratio: placeholders must stand where the values stood and the rest of the sentence must
    stay), and zero when anything leaks: "[NAME] [ADDRESS] [PHONE]." alone scores low, and so
    does a perfect sentence that keeps a first name.
    """
    leaks = sum(1 for v in values.values() if v and leaked_parts(hypothesis, v, label))
    leak_share = leaks / max(1, len(values))
    if leaks:
        return leak_share, 0.0
    ratio = SequenceMatcher(None, _TOKEN.findall(hypothesis), _TOKEN.findall(label)).ratio()
    return leak_share, ratio


def headline(metric: str) -> str:
    """What ``score`` measures for a task metric (the PII gate scores redaction, not leaks)."""
    return "redaction_score" if metric == "pii_leak_rate" else metric


@dataclass(frozen=True)
class Scores:
    """Mean scores (``summary``, with ``score`` the headline) and the headline per example."""

    summary: dict[str, float]
    per_example: list[float]


def score(metric: str, outputs: list[str], records: list[Any]) -> Scores:
    """The task's headline metric (``score``, higher is better) and its companions."""
    pairs = list(zip(outputs, records, strict=True))
    n = max(1, len(pairs))
    columns: dict[str, list[float]] = {
        "exact_match": [exact_match(o, r.label) for o, r in pairs],
        "chrf": [chrf(o, r.label) for o, r in pairs],
        "faithfulness": [faithfulness(o, r.facts) for o, r in pairs],
    }
    if metric == "json_field_f1":
        res = [json_field_f1(o, r.label) for o, r in pairs]
        columns["json_valid"] = [float(v) for v, _ in res]
        columns["json_field_f1"] = [f for _, f in res]
        head = columns["json_field_f1"]
    elif metric == "pii_leak_rate":
        res = [pii_example(o, r.label, json.loads(r.note)) for o, r in pairs]
        columns["pii_leak_rate"] = [leak for leak, _ in res]
        columns["redaction_score"] = [s for _, s in res]
        head = columns["redaction_score"]
    else:
        head = columns[metric]
    summary = {k: sum(v) / n for k, v in columns.items()}
    summary["score"] = sum(head) / n
    return Scores(summary, head)


def paired_bootstrap(
    adapter: list[float],
    base: list[float],
    *,
    resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> dict[str, float]:
    """Mean of (adapter - base) per example and its percentile bootstrap interval.

    Resampling the examples, with the adapter's and the base's score of one example kept
    together, is the paired bootstrap of Koehn (2004) for comparing two systems on one test
    set; the adapter beats the base when the interval's lower bound is above zero.
    """
    if len(adapter) != len(base) or not adapter:
        raise ValueError("the bootstrap needs the same non-empty examples scored twice")
    diffs = [a - b for a, b in zip(adapter, base, strict=True)]
    n = len(diffs)
    rng = random.Random(seed)  # noqa: S311 - resampling, not secrecy
    means = sorted(sum(diffs[rng.randrange(n)] for _ in range(n)) / n for _ in range(resamples))
    tail = (1 - confidence) / 2
    lo = means[int(tail * resamples)]
    hi = means[min(resamples - 1, int((1 - tail) * resamples))]
    return {"mean_diff": sum(diffs) / n, "ci_low": lo, "ci_high": hi, "confidence": confidence,
            "resamples": resamples, "examples": n}  # fmt: skip
