"""Datasets: deterministic, large enough, disjoint splits, in the seed article's record shape."""

from __future__ import annotations

import json
import re

import pytest

from config import TASK_PROFILES
from training.datasets import GENERATORS, card, load
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
    assert len(a.train) + len(a.held_out) >= 400 and len(a.held_out) >= 80
    assert not {r.raw for r in a.train} & {r.raw for r in a.held_out}
    rec = a.train[0]
    assert rec.category == task and rec.raw and rec.label and rec.raw != rec.label
    assert card(task)


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
