"""A team's own records split so that nothing can be memorized across parts."""

from __future__ import annotations

from pathlib import Path

from config.dataset_files import Row, read_rows
from config.near_duplicates import mask, near_duplicate_groups
from training.datasets.common import PARTS, straddling_groups
from training.datasets.user import split_rows

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "support-triage.jsonl"


def test_slot_fills_of_one_template_are_one_group() -> None:
    pairs = [
        ("Hi, my order 1234 from Anna has not arrived.", "shipping"),
        ("Hi, my order 98765 from Bob has not arrived.", "shipping"),
        ("The blender I bought stopped working after a week, and support never replied.", "x"),
        ("My blender I bought stopped working after a week, and support never replied!", "y"),
        ("Please close my account.", "account"),
    ]
    groups = near_duplicate_groups(pairs)
    assert groups[0] == groups[1]  # digits and names masked
    assert groups[2] == groups[3]  # one core sentence
    assert len({groups[0], groups[2], groups[4]}) == 3


def test_the_example_dataset_splits_with_no_group_across_parts() -> None:
    split = split_rows("support_triage", read_rows(EXAMPLE))
    sizes = split.sizes()
    assert sizes["test"] >= 20 and sizes["validation"] >= 10 and sizes["train"] >= 150
    assert straddling_groups(split) == 0
    assert split.sha256() == split_rows("support_triage", read_rows(EXAMPLE)).sha256()


def test_templated_records_never_straddle_two_parts() -> None:
    """What the built-in generators did: slot fills of a few templates. Split by groups, no
    template has records in two parts."""
    templates = [
        "Where is my order {n}? It was due on day {d}.",
        "I was charged twice for order {n}, {d} days ago.",
        "Can I return order {n}? It arrived {d} days late and broken.",
    ]

    def word(i: int) -> str:  # distinct once digits are masked
        return "".join(chr(97 + (i // 26**k) % 26) for k in range(3))

    rows = [
        Row(f"line {i}", templates[i % 3].format(n=1000 + i, d=i % 9), f"answer {i % 3}")
        for i in range(9)
    ] + [Row(f"line {9 + i}", f"a question about {word(i)}", word(i)[::-1]) for i in range(120)]
    split = split_rows("t", rows)
    assert len({r.category for r in split.test}) >= 10
    assert straddling_groups(split) == 0
    template_parts = {p for p in PARTS for r in getattr(split, p) if r.raw.startswith("Where is")}
    assert len(template_parts) == 1  # the template's three slot fills sit in one part


def test_splits_given_in_the_file_are_honoured() -> None:
    def text(i: int) -> str:  # distinct once digits are masked
        return "question about " + "".join(chr(97 + (i // 26**k) % 26) for k in range(3))

    rows = [
        Row(f"line {i}", text(i), text(i)[::-1], split="test" if i < 25 else "train")
        for i in range(80)
    ]
    split = split_rows("t", rows)
    assert {r.raw for r in split.test} == {text(i) for i in range(25)}
    assert split.validation and not {r.raw for r in split.validation} & {r.raw for r in split.train}
    assert sum(split.sizes()[p] for p in PARTS) == 80


def test_records_that_share_a_short_label_are_not_one_group() -> None:
    """A class label ("billing") repeats by design; the inputs decide the groups."""
    words = [
        "apple",
        "berry",
        "cherry",
        "delta",
        "echo",
        "foxtrot",
        "golf",
        "hotel",
        "india",
        "juliet",
        "kilo",
        "lima",
    ]
    rows = [
        Row(
            f"line {i}",
            f"{words[i % 12]} {words[(i // 12) % 12]} {words[(i // 7) % 12]}",
            ("billing", "shipping", "returns")[i % 3],
        )
        for i in range(144)
    ]
    groups = near_duplicate_groups([(r.input, r.output) for r in rows])
    assert len(set(groups)) > 100
    split = split_rows("t", rows)
    assert {r.label for r in split.test} == {"billing", "shipping", "returns"}


def test_names_are_masked_at_the_start_of_a_line_and_numbers_in_groups_are_one() -> None:
    """An e-mail opens its second line with the name it is addressed to; a phone number is
    written in groups. Neither may tell two slot fills of one template apart."""
    a = "Hi team,\nSarah, the parcel for +65 8123 4567 is late."
    b = "Hi team,\nRajesh, the parcel for 91234567 is late."
    assert mask(a) == mask(b) == "hi team n the parcel for 0 is late"


def test_texts_that_mask_to_almost_nothing_are_not_one_group() -> None:
    """Title-case subject lines mask to "subject n": equal leftovers are no template. Equal
    texts still are one record's duplicates."""
    pairs = [
        ("Subject: Password Reset Needed", "account"),
        ("Subject: Invoice Missing", "billing"),
        ("Re: Quarterly Budget Review Meeting", "meeting"),
        ("Hello", "greeting"),
        ("hello", "greeting"),
    ]
    groups = near_duplicate_groups(pairs)
    assert len(set(groups[:3])) == 3 and groups[3] == groups[4]


def test_names_in_any_script_or_in_capitals_are_masked_and_shouting_is_not() -> None:
    """'Łukasz' and 'JOHN SMITH' were kept as words, so two fills of one template with them
    were two groups, and could be split across train and test."""
    assert mask("Please call Łukasz about order 5.") == mask("Please call Żaneta about order 7.")
    assert mask("Ask JOHN SMITH to refund me") == mask("Ask Mei Ling Tan to refund me")
    assert mask("I WANT MY REFUND NOW") == "i want my refund now"
    # One word in capitals is an acronym or emphasis, not a name: these are not one record.
    assert mask("i am VERY happy with DHL") != mask("i am NOT happy with UPS")
    pairs = [
        ("The parcel for Zoë Müller arrived damaged and the box was wet.", "damaged"),
        ("The parcel for ÅSA LINDQVIST arrived damaged and the box was wet.", "damaged"),
    ]
    assert len(set(near_duplicate_groups(pairs))) == 1
