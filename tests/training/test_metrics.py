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
    json_field_f1,
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


@pytest.mark.parametrize(
    "output",
    [
        "Call Pei Shan back at [PHONE] about the refund.",  # a first name
        "Call [NAME] back at 81234567 about the refund.",  # the phone in another format
        "Call [NAME] back at 8123-4567 about the refund.",
        "Call Ms Tan back at [PHONE] about the refund.",  # a family name
    ],
)
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
    assert (
        paired_bootstrap(noisy, list(reversed(noisy)))["ci_low"]
        < 0
        < paired_bootstrap(noisy, list(reversed(noisy)))["ci_high"]
    )
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


# --- Baselines and scorers that a trivial answer cannot pass (issue 22) ---

REWRITES = (
    "singlish_to_standard",
    "sentiment_neutralization",
    "style_transfer",
    "medical_shorthand",
)


@pytest.mark.parametrize("task", REWRITES)
@pytest.mark.parametrize("trivial", ["echo", "nearest_label", "most_frequent_label"])
def test_a_trivial_adapter_fails_the_gate_on_every_rewrite_task(task: str, trivial: str) -> None:
    """An adapter that echoes its input, or looks up the nearest training label, ties that
    baseline on every example, so its interval cannot lie above zero."""
    from training.evaluate import trivial_outputs

    profile = TASK_PROFILES[task]
    split = load(task)
    test = list(split.test)
    rivals = trivial_outputs(test, list(split.train))
    adapter = score(profile.metric, rivals[trivial], test)
    silent = score(profile.metric, ["" for _ in test], test)  # a base that says nothing
    scored = {name: score(profile.metric, outs, test) for name, outs in rivals.items()}
    verdict = gate(profile, adapter, silent, rivals=scored)
    assert not verdict["publishable"]
    assert verdict["strongest_baseline"] in ("echo", "nearest_label", "most_frequent_label")
    assert any("does not beat the strongest baseline" in f for f in verdict["failures"])


@pytest.mark.parametrize(
    ("output", "value"),
    [
        ("Customer ID 52 76 60 5 asked for a refund.", "S5276605"),
        ("Call back on 65 84 59 02 41 about the refund.", "6584590241"),
        ("Call back on 658-459-024-1 about the refund.", "+65 8459 0241"),
        ("Call back on (65) 8459.0241 about the refund.", "6584590241"),
        ("Call back on 845,902,41 about the refund.", "8459 0241"),
        ("Call back on 84:59:02:41 about the refund.", "8459 0241"),
        ("Call back at Blk 123 about the refund.", "Blk 123 Hougang Ave 3"),
    ],
)
def test_digits_leak_whatever_their_grouping(output: str, value: str) -> None:
    label = "Call back on [PHONE] about the refund."
    leak, redaction = pii_example(output, label, {"phone": value})
    assert leak == 1.0 and redaction == 0.0


def test_generic_words_of_a_value_are_not_leaks_and_placeholder_types_count() -> None:
    label = "Send it to [ADDRESS] and copy [EMAIL]."
    values = {"address": "12 Jalan Besar Road", "email": "kim.lee@mail.com"}
    leak, _ = pii_example("Send it to [ADDRESS] by road and copy [EMAIL] on .com.", label, values)
    assert leak == 0.0
    _, right = pii_example(label, label, values)
    _, all_names = pii_example("Send it to [NAME] and copy [NAME].", label, values)
    assert right == 1.0 and all_names < 0.6


def test_a_json_object_that_misses_the_schema_is_not_valid() -> None:
    from config.loader import SCHEMAS_DIR

    schema = json.loads((SCHEMAS_DIR / "sales-record.json").read_text())
    rec = load("sales_json").test[0]
    s = score("json_field_f1", ['{"a":1}', rec.label], [rec, rec], schema=schema)
    assert s.per_example == [0.0, 1.0] and s.summary["json_valid"] == 0.5


def test_json_fields_are_compared_by_value() -> None:
    """A price said as "1,711 Singapore dollars" is 1711 in an answer and may be 1711.0 in a
    label; the field is right either way. A flag is not a number: true is not 1."""
    from training.metrics import json_field_f1

    assert json_field_f1('{"unit_price": 1711, "n": 2}', '{"unit_price": 1711.0, "n": 2}')[1] == 1.0
    assert json_field_f1('{"follow_up": 1}', '{"follow_up": true}')[1] == 0.0


def test_facts_penalise_invented_and_changed_facts() -> None:
    from training.metrics import facts_score

    source = "Refund for order 5519 placed on 3 March, 2 items."
    label = "Refund order 5519: 2 items, placed 3 March."
    assert facts_score(label, source, label) == 1.0
    assert facts_score(source, source, label) < 0.7  # the echo keeps every fact, not the answer
    listed = "Refund order 5519: 2 items, placed 3 March, 7 items, 9 days, 4410."
    assert facts_score(listed, source, label) <= 0.5  # three of six stated facts invented
    changed = "Refund order 5591: 2 items, placed 3 March."
    assert facts_score(changed, source, label) < 0.5  # a fact lost and a wrong one stated


def test_the_cluster_bootstrap_is_wider_than_the_example_bootstrap() -> None:
    adapter = [1.0] * 10 + [0.0] * 10
    base = [0.5] * 20
    groups = ["a"] * 10 + ["b"] * 10  # two groups: every example of one behaves alike
    flat = paired_bootstrap(adapter, base)
    clustered = paired_bootstrap(adapter, base, groups=groups)
    assert clustered["ci_high"] - clustered["ci_low"] > flat["ci_high"] - flat["ci_low"]


def test_a_medical_answer_with_every_term_swapped_fails_the_gate() -> None:
    """Ages, sexes and durations kept, every expansion swapped for another of its kind: what
    faithfulness over ages and durations alone scored 1.0."""
    from training.datasets.medical import LEXICON

    profile = TASK_PROFILES["medical_shorthand"]
    test = list(load("medical_shorthand").test)
    swaps = {
        full: others[(i + 1) % len(others)]
        for kind in LEXICON.values()
        for others in [list(kind.values())]
        for i, full in enumerate(others)
    }

    def swapped(label: str) -> str:
        for full in sorted(swaps, key=len, reverse=True):
            label = label.replace(full, swaps[full].upper())
        return label.lower()

    outputs = [swapped(r.label) for r in test]
    adapter = score(profile.metric, outputs, test)
    assert adapter.summary["faithfulness"] < 0.6
    verdict = gate(profile, adapter, score(profile.metric, ["" for _ in test], test))
    assert not verdict["publishable"]
    assert any(f.startswith("faithfulness") for f in verdict["failures"])


def test_json_fields_edge_cases_score_what_they_are() -> None:
    """Order numbers past 2**53 differ although they round to one float; the empty object is
    the whole of an empty answer; NaN is not JSON."""
    assert json_field_f1('{"id": 12345678901234567890}', '{"id": 12345678901234567891}') == (
        True,
        0.0,
    )
    assert json_field_f1('{"a": [1, 2.0]}', '{"a": [1.0, 2]}') == (True, 1.0)
    assert json_field_f1("{}", "{}") == (True, 1.0)
    assert json_field_f1('{"a": 1}', "{}") == (True, 0.0)
    assert json_field_f1('{"a": NaN}', '{"a": 1}') == (False, 0.0)


def test_a_remote_schema_reference_is_never_fetched(monkeypatch) -> None:
    import urllib.request

    fetched: list[str] = []
    monkeypatch.setattr(urllib.request, "urlopen", lambda url, *a, **k: fetched.append(url))
    schema = {"type": "object", "properties": {"a": {"$ref": "https://example.com/s.json"}}}
    with pytest.raises(Exception, match="Unresolvable"):
        json_field_f1('{"a": 1}', '{"a": 1}', schema)
    assert fetched == []


@pytest.mark.parametrize(
    "output",
    [
        "Call W E I back at [PHONE] about the refund.",
        "Call W-E-I L-I-N-G back at [PHONE] about the refund.",
        "Call back at weilingtan@[DOMAIN] about the refund.",
        "Call W. E. I. back at [PHONE] about the refund.",
    ],
)
def test_letters_leak_whatever_their_grouping(output: str) -> None:
    label = "Call [NAME] back at [PHONE] about the refund."
    leak, redaction = pii_example(output, label, {"name": "Wei Ling Tan"})
    assert leak == 1.0 and redaction == 0.0


def test_a_word_that_merely_contains_a_names_words_run_together_is_no_leak() -> None:
    """'visiting' holds 'siting' ('Si' + 'Ting'); only a whole word made of a value's words
    run together is one ('siting@...')."""
    label = "[NAME] was visiting the store about the refund."
    assert pii_example(label, label, {"name": "Lim Si Ting"})[0] == 0.0
    assert (
        pii_example("[NAME] was visiting, write siting@[DOMAIN].", label, {"name": "Lim Si Ting"})[
            0
        ]
        == 1.0
    )


def test_a_medical_term_that_opens_a_clause_is_a_fact_and_unexplained_terms_cost() -> None:
    """A clause's first word is capitalised, so its expansion was missed as a fact (50 of 383
    in the test split); and an answer that states every expansion the lexicon knows kept every
    fact and scored 1.0."""
    from training.datasets.medical import expansions

    test = list(load("medical_shorthand").test)
    opening = [
        (r, f)
        for r in test
        for f in r.facts
        if f[0].islower() and f". {f[0].upper()}{f[1:]}" in r.label
    ]
    assert opening, "no record opens with an expansion"
    record, fact = opening[0]
    swapped = record.label.replace(fact[0].upper() + fact[1:], "Pulmonary embolism", 1)
    assert faithfulness(swapped, record.facts) < 1.0
    profile = TASK_PROFILES["medical_shorthand"]
    assert score(profile.metric, [r.label for r in test], test).summary["faithfulness"] == 1.0
    every = " ".join(sorted(expansions()))
    listed = score(profile.metric, [f"{r.label} {every}" for r in test], test)
    assert listed.summary["faithfulness"] < 0.1


def test_redaction_on_a_teams_records_reads_the_values_from_the_pair() -> None:
    """A file's records list no values; the label's placeholders say where they stood."""
    record = Record(
        "own",
        "Hi, I'm Wei Ling Tan, mail weiling.tan@acme.sg or call 8123 4567.",
        "Hi, I'm [NAME], mail [EMAIL] or call [PHONE_NUMBER].",
    )
    right = score("redaction", [record.label], [record])
    assert right.summary == {**right.summary, "pii_leak_rate": 0.0, "redaction_score": 1.0}
    leaked = score("redaction", ["Hi, I'm [NAME], mail [EMAIL] or call 81 23 45 67."], [record])
    assert leaked.summary["pii_leak_rate"] == pytest.approx(1 / 3)
    assert leaked.per_example == [0.0]
    echo = score("redaction", [record.raw], [record])
    assert echo.summary["pii_leak_rate"] == 1.0


@pytest.mark.parametrize(
    ("said", "label", "wrong"),
    [
        (
            "The order of 1,000 items ships in five days.",
            "The order of 1000 items ships in 5 days.",
            "The order of 2,000 items ships in seven days.",
        ),
        (
            "Call at 3pm about the 5.00 usd fee.",
            "Call at 3 pm about the 5 usd fee.",
            "Call at 4pm about the 7.00 usd fee.",
        ),
        ("Take 5% off the 2 items.", "Take 5 % off the 2 items.", "Take 7% off the 3 items."),
        (
            "It shipped twenty-five days ago; call at 10.30 am.",
            "It shipped 25 days ago; call at 10:30am.",
            "It shipped twenty-seven days ago; call at 10.50 am.",
        ),
        (
            "Pay the $5.00 fee a day before.",
            "Pay the $5 fee one day before.",
            "Pay the $7.00 fee two days before.",
        ),
    ],
)
def test_a_fact_kept_in_another_spelling_is_kept(said: str, label: str, wrong: str) -> None:
    """A correct rewrite that writes a number differently scored 0 on facts: "1,000" was not
    "1000", "five days" not "5 days", "3pm" not "3 pm"; a wrong number still costs."""
    from training.metrics import facts_score

    right = facts_score(said, label, label)
    assert right > 0.5
    assert facts_score(wrong, label, label) < right / 2


def test_a_version_is_not_a_decimal_and_a_times_minutes_count() -> None:
    """Only amounts lose their trailing zeros: "Python 3.10" is not "3.1", "10.30 am" is not
    "10:03am"."""
    from training.metrics import normalize_numbers

    assert normalize_numbers("Python 3.10 and 2.0.1") == "Python 3.10 and 2.0.1"
    assert normalize_numbers("at 10.30 am, 5.00 pm") == "at 10:30am, 5pm"


def test_redaction_values_of_side_by_side_placeholders_and_long_records() -> None:
    """Placeholders side by side share one value; the lookup is linear (one lazy group per
    placeholder in a regex backtracked for seconds on a 500-character record)."""
    from training.metrics import redacted_values

    assert redacted_values("Call John Smith 91234567 now", "Call [NAME] [PHONE] now") == {
        "[NAME][PHONE]#0": "John Smith 91234567"
    }
    raw = "Dear Wei Ling Wei Ling, " + "the parcel is late again " * 40 + "thx"
    label = "Dear [FIRST] [LAST] [FIRST] [LAST], " + "the parcel is late again " * 40 + "thanks"
    values = redacted_values(raw, label)
    assert any("Wei Ling" in v for v in values.values())
