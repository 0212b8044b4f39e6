"""Datasets: deterministic, large enough, three disjoint splits (no input and no label of the
test split anywhere else, nor in the local base's pre-training text), in the seed article's
record shape, with the facts a faithful output must keep."""

from __future__ import annotations

import json
import re

import pytest

from config import TASK_PROFILES
from training.datasets import (
    GENERATORS,
    Record,
    Split,
    SplitError,
    card,
    check_disjoint,
    corpus,
    load,
)
from training.datasets.common import normalize
from training.datasets.medical import lexicon_size
from training.datasets.pii import PLACEHOLDERS
from training.datasets.sales import SCHEMA


def test_every_catalog_task_has_a_generator() -> None:
    assert set(GENERATORS) == set(TASK_PROFILES)


@pytest.mark.parametrize("task", sorted(GENERATORS))
def test_deterministic_sized_and_disjoint(task: str) -> None:
    a, b = load(task, seed=7), load(task, seed=7)
    assert a == b and a.sha256() == b.sha256()
    assert load(task, seed=8).sha256() != a.sha256()
    assert len(a.train) >= 450 and len(a.validation) >= 32 and len(a.test) >= 64
    for x, y in (("train", "test"), ("train", "validation"), ("validation", "test")):
        parts = getattr(a, x), getattr(a, y)
        assert not {normalize(r.raw) for r in parts[0]} & {normalize(r.raw) for r in parts[1]}
        labels = {normalize(r.label) for r in parts[0]} & {normalize(r.label) for r in parts[1]}
        assert not labels, f"{task}: {len(labels)} labels in both {x} and {y}"
    rec = a.train[0]
    assert rec.category == task and rec.raw and rec.label and rec.raw != rec.label
    assert card(task)


@pytest.mark.parametrize("task", sorted(GENERATORS))
def test_facts_are_stated_in_the_label(task: str) -> None:
    split = load(task)
    for rec in (*split.train, *split.test):
        for fact in rec.facts:
            assert normalize(fact) in normalize(rec.label), (task, fact, rec.label)
    if "faithfulness" in TASK_PROFILES[task].minimums:
        assert all(r.facts for r in split.test), "a faithfulness floor needs facts to check"


def test_overlap_between_parts_is_refused() -> None:
    same = Record("t", "an input", "a label")
    other = Record("t", "another input", "A  LABEL")  # the same label, spacing and case aside
    with pytest.raises(SplitError, match="labels are in both train and test"):
        check_disjoint(Split("t", 0, (same,), (), (other,)))


def test_the_pretraining_corpus_holds_no_validation_or_test_text() -> None:
    texts = {normalize(t) for t in corpus()}
    for task in GENERATORS:
        split = load(task)
        for rec in (*split.validation, *split.test):
            assert normalize(rec.label) not in texts, (task, rec.label)
            assert normalize(rec.raw) not in texts, (task, rec.raw)


def test_medical_lexicon_has_150_abbreviations() -> None:
    assert lexicon_size() >= 150
    assert str(lexicon_size()) in card("medical_shorthand")


def test_sales_labels_satisfy_the_schema() -> None:
    required = set(SCHEMA["required"])
    for rec in load("sales_json").train:
        obj = json.loads(rec.label)
        assert set(obj) == required
        assert obj["stage"] in SCHEMA["properties"]["stage"]["enum"]
        assert isinstance(obj["quantity"], int) and obj["quantity"] >= 1


def test_pii_labels_hold_placeholders_and_no_values() -> None:
    for rec in load("pii_redaction").train:
        values = json.loads(rec.note)
        assert values
        for kind, value in values.items():
            assert value in rec.raw and value not in rec.label
            assert PLACEHOLDERS[kind] in rec.label
        assert not re.search(r"@|\+65", rec.label)
