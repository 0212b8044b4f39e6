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


def test_answers_that_look_valid_or_present_but_are_not() -> None:
    """An overflowing number, a loop in a script without spaces,
    an answer of zero-width characters."""
    assert q.json_valid('{"a": 1e999}') == 0.0  # Python reads inf; RFC 8259 has no such number
    assert q.json_valid('{"a": 1e300}') == 1.0
    assert q.repetition("哈哈哈哈哈哈哈哈哈哈哈哈") > 0.7  # one "word" to \\w+, a loop all the same
    assert q.repetition("我今天去商店买了苹果和香蕉") == 0.0
    assert q.answered("\u200b\u200b \n") == 0.0
    assert q.answered("ok") == 1.0


def test_the_online_signals_read_a_bounded_part_of_a_request() -> None:
    """A request body may be 256 KB; the router scores the first ``MAX_SCORED_CHARS`` of it and
    of the answer, at most ``MAX_FACTS`` facts and ``MAX_VALUES`` personal values. (Unbounded,
    one 3.6 KB request of 900 capitalised words took a mirror 5 s and 700 MiB: every run of a
    long name's words was built.)"""
    pad = "x " * q.MAX_SCORED_CHARS
    late = pad + "then the 5 mg dose"
    assert q.measure(("facts_kept",), late, "nothing")["facts_kept"] == 1.0  # past the bound
    assert q.measure(("facts_kept",), "the 5 mg dose", "nothing")["facts_kept"] == 0.0
    # The JSON answer is read whole: a cut is what makes it invalid.
    answer = '{"notes": "' + "y" * q.MAX_SCORED_CHARS + '"}'
    assert q.measure(("json_valid",), "in", answer)["json_valid"] == 1.0
    # A long value's words written together are a leak up to RUN_WORDS of them.
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = [f"N{letters[i // 676]}{letters[i // 26 % 26]}{letters[i % 26]}" for i in range(900)]
    value = " ".join(words)
    run = "".join(words[10 : 10 + q.RUN_WORDS]).lower()
    assert q.leaked_parts(f"wrote {run}", value, "") == [run]
    assert q.leaked_parts("wrote " + "".join(words[10 : 11 + q.RUN_WORDS]), value, "") == []
    many = ", ".join(f"mail u{i}@example.com" for i in range(200))
    assert len(q.personal_values(many)) == 200
    half = ", ".join(f"u{i}@example.com" for i in range(q.MAX_VALUES))
    assert q.measure(("pii_leaked",), many, half)["pii_leaked"] == 1.0  # the first 32 compared
