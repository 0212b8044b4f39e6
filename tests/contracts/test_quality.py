"""The label-free quality signals the router compares a shadow canary on, with the inputs an
adapter of each task meets."""

from __future__ import annotations

import pytest

from contracts import quality as q

NOTE = "Pt 54 y/o seen by Dr Alvarez on 3 May, BP 140/90, given 5 mg amlodipine."
CONTACT = "Please call Maria Lopez at 555-123-4567 or mail maria.lopez@example.com today."


def test_json_valid_takes_only_an_object_that_passes_the_check() -> None:
    assert q.json_valid('{"a": 1}') == 1.0
    assert q.json_valid(' {"a": 1}\n') == 1.0
    assert q.json_valid('{"a": 1') == 0.0  # cut short
    assert q.json_valid("[1, 2]") == 0.0  # not an object
    assert q.json_valid('{"a": NaN}') == 0.0  # RFC 8259 has no NaN
    assert q.json_valid('{"a": 1}', check=lambda o: "b" in o) == 0.0


def test_facts_kept_is_the_share_of_the_inputs_facts_the_answer_states() -> None:
    full = "Patient, 54 y/o, seen by Dr Alvarez on 3 May; BP 140/90; 5 mg amlodipine given."
    assert q.facts_kept(full, NOTE) == 1.0
    # A fact restated in other words counts only where the gate's patterns find it.
    assert q.facts_kept(full.replace("54 y/o", "fifty-four"), NOTE) == pytest.approx(5 / 6)
    assert q.facts_kept("The patient was seen.", NOTE) < 0.3
    # Spelled-out numbers count as the number.
    assert q.facts_kept("five mg", "given 5 mg") == 1.0
    assert q.facts_kept("anything", "no facts here") == 1.0


def test_pii_leaked_finds_the_inputs_values_in_any_part_or_grouping() -> None:
    redacted = "Please call [NAME] at [PHONE] or mail [EMAIL] today."
    assert q.pii_leaked(redacted, CONTACT) == 0.0
    assert q.pii_leaked(CONTACT, CONTACT) == 1.0
    # A first name alone, or the digits regrouped, still leak their value.
    assert q.pii_leaked("Call her at 5551234567.", CONTACT) == pytest.approx(1 / 3)
    assert q.pii_leaked("Ask for Maria.", CONTACT) == pytest.approx(2 / 3)  # name and e-mail
    assert q.pii_leaked("nothing to leak", "no personal values") == 0.0


def test_repetition_and_answered_see_a_loop_and_an_empty_answer() -> None:
    assert q.repetition("the patient was seen today and sent home") == 0.0
    assert q.repetition("the the the the the the the the the the") > 0.8
    assert q.answered("  \n") == 0.0 and q.answered("ok") == 1.0


def test_every_signal_has_a_direction_a_default_margin_and_a_task() -> None:
    assert set(q.HIGHER_IS_BETTER) == set(q.DEFAULT_MARGINS) == set(q.SIGNALS)
    assert q.signals_for("json_field_f1") == ("json_valid", "answered", "repetition")
    assert q.signals_for("pii_leak_rate")[0] == "pii_leaked"
    assert q.signals_for("exact") == q.COMMON
    got = q.measure(q.SIGNALS, CONTACT, CONTACT)
    assert set(got) == set(q.SIGNALS) and all(0.0 <= v <= 1.0 for v in got.values())
