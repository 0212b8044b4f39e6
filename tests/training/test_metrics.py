"""The gate's metrics cannot be flattered: PII is scored against the label with partial leaks
counted, rewrites must keep the input's facts, and "beats the base" needs a bootstrap interval
above zero, not a larger mean."""

from __future__ import annotations

import json

import pytest

from config import TASK_PROFILES
from training.datasets import Record, load
from training.evaluate import gate
from training.metrics import (
    Scores,
    faithfulness,
    leaked_parts,
    paired_bootstrap,
    pii_example,
    score,
)

LABEL = "Call [NAME] back at [PHONE] about the refund."
VALUES = {"name": "Pei Shan Tan", "phone": "+65 8123 4567"}


def test_placeholders_alone_do_not_score_as_a_redaction() -> None:
    _, only_tags = pii_example("[NAME] [ADDRESS] [PHONE].", LABEL, VALUES)
    _, perfect = pii_example(LABEL, LABEL, VALUES)
    _, swapped = pii_example("Call [PHONE] back at [NAME] about the refund.", LABEL, VALUES)
    assert perfect == 1.0
    assert only_tags < 0.5 and swapped < perfect


@pytest.mark.parametrize("output", [
    "Call Pei Shan back at [PHONE] about the refund.",      # a first name
    "Call [NAME] back at 81234567 about the refund.",       # the phone in another format
    "Call [NAME] back at 8123-4567 about the refund.",
    "Call Ms Tan back at [PHONE] about the refund.",        # a family name
])  # fmt: skip
def test_partial_leaks_count_and_zero_the_example(output: str) -> None:
    leak, redaction = pii_example(output, LABEL, VALUES)
    assert leak > 0 and redaction == 0.0


def test_email_parts_leak_but_words_of_the_sentence_do_not() -> None:
    value = "peishan.tan12@mail.test"
    assert leaked_parts("Reply to peishan at [EMAIL].", value, "Reply to [EMAIL].")
    assert leaked_parts("Reply to [EMAIL] at mail.test.", value, "Reply to [EMAIL].")
    # "Road" is a word of the label itself, so saying it leaks nothing of the address.
    label = "Send it to [ADDRESS] via the Road office."
    assert not leaked_parts(label, "12 Orchard Road #01-02", label)
    assert leaked_parts("Send it to Orchard via the Road office.", "12 Orchard Road #01-02", label)


def test_faithfulness_catches_changed_facts() -> None:
    facts = ("81-year-old", "female", "4 days")
    good = "Patient is a 81-year-old female complaining of fracture pain for 4 days."
    wrong = "Patient is a 58-year-old male complaining of altered mental status for 14 days."
    assert faithfulness(good, facts) == 1.0
    assert faithfulness(wrong, facts) == 0.0, "14 days is not 4 days"
    assert faithfulness("Patient is an 81-YEAR-OLD female.", facts) == pytest.approx(2 / 3)


def test_rewrite_tasks_score_faithfulness_beside_chrf() -> None:
    recs = list(load("singlish_to_standard").test[:4])
    fluent_but_wrong = ["Can Siti go to the void deck this weekend?"] * 4
    s = score("chrf", [r.label for r in recs], recs)
    w = score("chrf", fluent_but_wrong, recs)
    assert s.summary["faithfulness"] == 1.0 and w.summary["faithfulness"] < 0.5
    assert len(s.per_example) == 4


def test_pii_scores_per_example_on_real_records() -> None:
    recs = list(load("pii_redaction").test[:6])
    copied = score("pii_leak_rate", [r.raw for r in recs], recs)
    assert copied.summary["pii_leak_rate"] == 1.0 and copied.summary["score"] == 0.0
    ideal = score("pii_leak_rate", [r.label for r in recs], recs)
    assert ideal.summary["pii_leak_rate"] == 0.0 and ideal.summary["score"] == 1.0
    assert all(json.loads(r.note) for r in recs)


def test_bootstrap_needs_a_lower_bound_above_zero() -> None:
    noisy = [0.1, 0.9] * 32
    assert paired_bootstrap(noisy, list(reversed(noisy)))["ci_low"] < 0 < paired_bootstrap(
        noisy, list(reversed(noisy)))["ci_high"]  # fmt: skip
    # A higher mean on a few examples is not a win: one lucky example of 64.
    lucky = [0.0] * 63 + [1.0]
    assert sum(lucky) > 0 and paired_bootstrap(lucky, [0.0] * 64)["ci_low"] <= 0
    clear = paired_bootstrap([0.8 + 0.001 * i for i in range(64)], [0.2] * 64)
    assert clear["ci_low"] > 0.5 and clear["examples"] == 64


def _scores(mean: float, n: int = 64, **summary: float) -> Scores:
    return Scores({"score": mean, **summary}, [mean] * n)


def test_the_gate_applies_the_task_floors() -> None:
    pii = TASK_PROFILES["pii_redaction"]
    base = _scores(0.0, pii_leak_rate=0.5, redaction_score=0.0)
    ok = gate(pii, _scores(0.95, pii_leak_rate=0.0, redaction_score=0.95), base)
    assert ok["publishable"] and ok["beats_base"]
    leaky = gate(pii, _scores(0.95, pii_leak_rate=0.02, redaction_score=0.95), base)
    assert not leaky["publishable"] and "pii_leak_rate" in leaky["failures"][0]
    low = gate(pii, _scores(0.5, pii_leak_rate=0.0, redaction_score=0.5), base)
    assert low["beats_base"] and not low["publishable"]


def test_a_record_without_facts_is_fully_faithful() -> None:
    rec = Record("t", "x", "y")
    assert score("chrf", ["anything"], [rec]).summary["faithfulness"] == 1.0
