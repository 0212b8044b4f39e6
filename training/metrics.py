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
from decimal import Decimal
from difflib import SequenceMatcher
from typing import Any

from config.json_schema import validator
from config.tasks import headline
from contracts import quality
from contracts.quality import (
    extract_facts,
    fact_pattern,
    leaked_parts,
    normalize_numbers,
    refuse_constant,
)

#: The scorers' version: an archive evaluated by another one is evaluated again before it is
#: reused (``training.reuse``). Raise it whenever a score can change.
SCORER_VERSION = 6


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


def faithfulness(
    hypothesis: str, facts: tuple[str, ...] | list[str], vocabulary: frozenset[str] = frozenset()
) -> float:
    """The share of ``facts`` the output states (1.0 when the input has none), times the share
    of the ``vocabulary`` terms it states that are among the facts: a medical answer that
    lists every expansion the lexicon knows keeps every fact, and is still wrong."""
    kept = (
        sum(1 for f in facts if fact_pattern(f).search(hypothesis)) / len(facts) if facts else 1.0
    )
    if not vocabulary:
        return kept
    said = {t for t in vocabulary if fact_pattern(t).search(hypothesis)}
    # "pain" inside a stated "chest pain" is not a term of its own.
    said = {t for t in said if not any(t != u and t in u for u in said)}
    known = [f.lower() for f in facts]
    wrong = sum(1 for t in said if not any(t in f for f in known))
    return kept * (1 - wrong / len(said)) if said else kept


def _vocabulary(category: str) -> frozenset[str]:
    """The terms an answer of this task may state only when its input explains them."""
    if category != "medical_shorthand":
        return frozenset()
    from training.datasets.medical import expansions

    return expansions()


def json_field_f1(
    hypothesis: str, reference: str, schema: dict[str, Any] | None = None
) -> tuple[bool, float]:
    """(valid?, F1 of its key/value pairs against the reference's). Valid means a JSON object
    that satisfies ``schema`` (checked with ``jsonschema``), when there is one: ``{"a": 1}``
    parses, but is not a sales record. An invalid output scores no fields."""
    try:
        # NaN and Infinity are not JSON (RFC 8259), though Python's parser takes them.
        obj = json.loads(hypothesis.strip(), parse_constant=refuse_constant)
    except (ValueError, TypeError):
        return False, 0.0
    if not isinstance(obj, dict):
        return False, 0.0
    if schema is not None and not validator(schema).is_valid(obj):
        return False, 0.0
    ref = json.loads(reference)
    pairs_h = {(k, _canonical(v)) for k, v in obj.items()}
    pairs_r = {(k, _canonical(v)) for k, v in ref.items()}
    if not pairs_r:  # the answer is the empty object: only "{}" has all of its fields
        return True, float(not pairs_h)
    tp = len(pairs_h & pairs_r)
    if tp == 0:
        return True, 0.0
    p, r = tp / len(pairs_h), tp / len(pairs_r)
    return True, 2 * p * r / (p + r)


def _canonical(value: Any) -> str:
    """A JSON value as text that is equal for equal values: 1711 and 1711.0 are one number
    (a label written by Python says 1711.0; an answer may not), true is not 1. Numbers are
    compared exactly (``Decimal``): an order number past 2**53 is not equal to its neighbour
    because both round to one float."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        exact = Decimal(value) if isinstance(value, int) else Decimal(repr(value))
        return "n:" + (str(exact.normalize()) if exact else "0")  # no JSON text starts so
    if isinstance(value, list):
        return "[" + ",".join(_canonical(v) for v in value) + "]"
    elif isinstance(value, dict):
        return (
            "{"
            + ",".join(f"{json.dumps(k)}:{_canonical(v)}" for k, v in sorted(value.items()))
            + "}"
        )
    return json.dumps(value, sort_keys=True)


#: A typed placeholder: "[NAME]", "[PHONE_NUMBER]", "[ID2]".
PLACEHOLDER = re.compile(r"\[[A-Z][A-Z0-9_]*\]")
_TOKEN = re.compile(rf"{PLACEHOLDER.pattern}|\w+|[^\w\s]")


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
    # The placeholders' types, in order: "[NAME]" written for every value loses here what the
    # sentence's other tokens would hide in the ratio above.
    types = SequenceMatcher(None, PLACEHOLDER.findall(hypothesis), PLACEHOLDER.findall(label))
    return leak_share, ratio * (types.ratio() if PLACEHOLDER.search(label) else 1.0)


def redacted_values(raw: str, label: str) -> dict[str, str]:
    """The values a redaction label replaced: for a team's own records, which list none (the
    generator records its values in ``Record.note``). The label's text between placeholders
    is looked up in the input in order (``str.find``: no backtracking, whatever the length),
    and what stands between is the value; placeholders side by side share one value. A label
    that also rewrote its text is aligned token by token (difflib) instead, and then the
    input's words the label rewrote around a placeholder count as part of its value."""
    kinds = PLACEHOLDER.findall(label)
    if not kinds:
        return {}
    pieces = [" ".join(p.split()).lower() for p in PLACEHOLDER.split(label)]
    text = " ".join(raw.split())
    lowered = text.lower()
    values: dict[str, str] = {}
    if lowered.startswith(pieces[0]):
        at, group = len(pieces[0]), [kinds[0]]
        for kind, piece in zip([*kinds[1:], None], pieces[1:], strict=True):
            if not piece.strip() and kind is not None:  # "[NAME] [PHONE]": one value
                group.append(kind)
                continue
            end = len(lowered) if kind is None and not piece else lowered.find(piece, at + 1)
            if end < 0 or (kind is None and not lowered.endswith(piece)):
                break
            if kind is None:
                end = len(lowered) - len(piece)
            values["".join(group) + f"#{len(values)}"] = text[at:end].strip()
            at, group = end + len(piece), [kind] if kind else []
        else:
            return values
    src, dst = _TOKEN.findall(raw), _TOKEN.findall(label)
    values = {}
    for tag, i1, i2, j1, j2 in SequenceMatcher(None, src, dst, autojunk=False).get_opcodes():
        placed = [t for t in dst[j1:j2] if PLACEHOLDER.fullmatch(t)]
        if tag == "replace" and placed:
            values["".join(placed) + f"#{len(values)}"] = " ".join(src[i1:i2])
    return values


def facts_score(hypothesis: str, source: str, reference: str) -> float:
    """chrF against the reference (in [0, 1]), times the share of the reference's facts the
    output keeps, times the share of the output's facts that are true (in the reference or
    the source): listing facts earns nothing when some are wrong or invented, and echoing
    the input, which keeps every fact, earns only its likeness to the answer."""
    expected = extract_facts(reference)
    stated = extract_facts(hypothesis)
    said = normalize_numbers(hypothesis)
    kept = sum(1 for f in expected if fact_pattern(f).search(said)) / max(1, len(expected))
    known = expected | extract_facts(source)
    invented = sum(1 for f in stated if f not in known)
    precision = 1.0 - invented / len(stated) if stated else 1.0
    return chrf(hypothesis, reference) / 100 * (kept if expected else 1.0) * precision


@dataclass(frozen=True)
class Scores:
    """Mean scores (``summary``, with ``score`` the headline) and the headline per example."""

    summary: dict[str, float]
    per_example: list[float]


def score(
    metric: str, outputs: list[str], records: list[Any], *, schema: dict[str, Any] | None = None
) -> Scores:
    """The task's headline metric (``score``, higher is better) and its companions.
    ``schema``: the JSON Schema a JSON task's output must satisfy to count as valid."""
    pairs = list(zip(outputs, records, strict=True))
    n = max(1, len(pairs))
    columns: dict[str, list[float]] = {
        "exact_match": [exact_match(o, r.label) for o, r in pairs],
        "chrf": [chrf(o, r.label) for o, r in pairs],
        "faithfulness": [faithfulness(o, r.facts, _vocabulary(r.category)) for o, r in pairs],
    }
    if metric == "facts":
        columns["facts"] = [facts_score(o, r.raw, r.label) for o, r in pairs]
    if metric in ("json_field_f1", "json_schema"):
        res = [json_field_f1(o, r.label, schema) for o, r in pairs]
        columns["json_valid"] = [float(v) for v, _ in res]
        columns["json_field_f1"] = [f for _, f in res]
        head = columns["json_field_f1"]
    elif metric in ("pii_leak_rate", "redaction"):
        res = [
            pii_example(
                o, r.label, json.loads(r.note) if r.note else redacted_values(r.raw, r.label)
            )
            for o, r in pairs
        ]
        columns["pii_leak_rate"] = [leak for leak, _ in res]
        columns["redaction_score"] = [s for _, s in res]
        head = columns["redaction_score"]
    else:
        head = columns[headline(metric)]
    # The label-free signals the router compares a shadow canary on (``contracts.quality``),
    # on the test split: the level a served answer of this adapter is expected to keep.
    check = validator(schema).is_valid if schema is not None else None
    measured = [quality.measure(quality.signals_for(metric), r.raw, o, check) for o, r in pairs]
    for name in quality.signals_for(metric):
        columns[f"online_{name}"] = [m[name] for m in measured]
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
    groups: list[str] | None = None,
) -> dict[str, float]:
    """Mean of (adapter - base) per example and its percentile bootstrap interval.

    Resampling the examples, with the adapter's and the base's score of one example kept
    together, is the paired bootstrap of Koehn (2004) for comparing two systems on one test
    set; the adapter beats the base when the interval's lower bound is above zero. With
    ``groups`` (a team's near-duplicate groups, or generated records' template combinations)
    whole groups are resampled, a cluster bootstrap: near-duplicates are not independent
    evidence.
    """
    if len(adapter) != len(base) or not adapter:
        raise ValueError("the bootstrap needs the same non-empty examples scored twice")
    diffs = [a - b for a, b in zip(adapter, base, strict=True)]
    n = len(diffs)
    rng = random.Random(seed)  # noqa: S311 - resampling, not secrecy
    if groups is not None and 2 <= len(set(groups)) < n:
        clusters: dict[str, list[float]] = {}
        for g, d in zip(groups, diffs, strict=True):
            clusters.setdefault(g, []).append(d)
        sums = [(sum(c), len(c)) for c in clusters.values()]
        k = len(sums)
        means = []
        for _ in range(resamples):
            picked = [sums[rng.randrange(k)] for _ in range(k)]
            means.append(sum(s for s, _ in picked) / sum(m for _, m in picked))
        means.sort()
    else:
        means = sorted(sum(diffs[rng.randrange(n)] for _ in range(n)) / n for _ in range(resamples))
    tail = (1 - confidence) / 2
    lo = means[int(tail * resamples)]
    hi = means[min(resamples - 1, int((1 - tail) * resamples))]
    return {
        "mean_diff": sum(diffs) / n,
        "ci_low": lo,
        "ci_high": hi,
        "confidence": confidence,
        "resamples": resamples,
        "examples": n,
    }
