"""A team's own records (``config.dataset_files``) as a train / validation / test split that
nothing can be memorized across.

Records are grouped as near-duplicates before they are split, and whole groups go to one part:
two records are one group when their inputs or (text) outputs are equal once digits, capitalized
words (names, places) and punctuation are masked, or when they share six masked words in a row
(a template, or a core sentence with other slot values). A run of words that a fifth of the
records or more repeat (a greeting, a signature) is boilerplate and joins nothing.

Splits given in the file are honoured; without a validation part, one is carved out of the
training groups. The group of each record is kept (``Record.category``) so that the gate can
resample whole groups (a cluster bootstrap).
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter

from config.dataset_files import Row
from training.datasets.common import PARTS, Record, Split, SplitError

#: The share of records a masked sentence may appear in before it counts as boilerplate.
BOILERPLATE_SHARE = 0.2
#: Masked words in a row that, shared, tie two records into one group.
SHINGLE_WORDS = 6
#: Test and validation shares of the records when the file gives no split, with floors.
TEST_SHARE, TEST_MIN = 0.15, 20
VALIDATION_SHARE, VALIDATION_MIN = 0.10, 10
#: Fewest near-duplicate groups the test part may hold: the gate resamples groups, and a few
#: groups make an interval that says nothing.
TEST_GROUPS_MIN = 10

_NAME = re.compile(r"(?<=[a-z,;:] )[A-Z][a-z]+|(?<=^)[A-Z][a-z]+(?=,)")
_DIGITS = re.compile(r"\d+")
_SENTENCES = re.compile(r"(?<=[.!?])\s+|\n+")


def mask(text: str) -> str:
    """A text with what varies between slot fills removed: digits, names, case, punctuation."""
    text = _NAME.sub("N", text)
    text = _DIGITS.sub("0", text)
    return " ".join(re.sub(r"[^\w]+", " ", text.lower()).split())


def _shingles(text: str) -> set[str]:
    """Every run of ``SHINGLE_WORDS`` masked words, sentence by sentence."""
    out: set[str] = set()
    for sentence in _SENTENCES.split(text):
        words = mask(sentence).split()
        out.update(
            " ".join(words[i : i + SHINGLE_WORDS]) for i in range(len(words) - SHINGLE_WORDS + 1)
        )
    return out


def _structured(output: str) -> bool:
    """A JSON output: its values come from a small set by design (a category, a flag), so two
    records with one output are not near-duplicates; their inputs decide. So do short text
    outputs (a class label): only an output of ``SHINGLE_WORDS`` words or more is a text."""
    try:
        return isinstance(json.loads(output), dict | list)
    except ValueError:
        return False


def near_duplicate_groups(pairs: list[tuple[str, str]]) -> list[int]:
    """A group id per (input, output) pair; pairs that are near-duplicates share one."""
    parent = list(range(len(pairs)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    keys: list[set[str]] = []
    for text, output in pairs:
        ks = {"in:" + mask(text)} | {"s:" + s for s in _shingles(text)}
        if not _structured(output) and len(mask(output).split()) >= SHINGLE_WORDS:
            ks |= {"out:" + mask(output)} | {"s:" + s for s in _shingles(output)}
        keys.append(ks)
    counts = Counter(k for ks in keys for k in ks)
    limit = max(2, int(BOILERPLATE_SHARE * len(pairs)))
    first: dict[str, int] = {}
    for i, ks in enumerate(keys):
        for k in ks:
            if not k.startswith("in:") and counts[k] > limit:
                continue
            if k in first:
                parent[find(i)] = find(first[k])
            else:
                first[k] = i
    roots: dict[int, int] = {}
    return [roots.setdefault(find(i), len(roots)) for i in range(len(pairs))]


def straddling_groups(split: Split) -> int:
    """How many near-duplicate groups have records in two parts of ``split``."""
    recs = [(p, r) for p in PARTS for r in getattr(split, p)]
    groups = near_duplicate_groups([(r.raw, r.label) for _, r in recs])
    parts: dict[int, set[str]] = {}
    for g, (p, _) in zip(groups, recs, strict=True):
        parts.setdefault(g, set()).add(p)
    return sum(1 for ps in parts.values() if len(ps) > 1)


def _take(groups: list[list[Record]], want: int) -> tuple[list[Record], list[list[Record]]]:
    """Whole groups, in order, until ``want`` records are taken; the rest."""
    taken: list[Record] = []
    for i, group in enumerate(groups):
        if len(taken) >= want:
            return taken, groups[i:]
        taken += group
    return taken, []


def split_rows(task: str, rows: list[Row], seed: int = 0) -> Split:
    """The split of a dataset file: its own, or by near-duplicate groups."""
    ids = near_duplicate_groups([(r.input, r.output) for r in rows])
    records = [
        Record(category=f"group-{g}", raw=r.input, label=r.output)
        for g, r in zip(ids, rows, strict=True)
    ]
    rng = random.Random(f"{task}:{seed}")

    def grouped(recs: list[Record]) -> list[list[Record]]:
        by: dict[str, list[Record]] = {}
        for rec in recs:
            by.setdefault(rec.category, []).append(rec)
        order = list(by.values())
        rng.shuffle(order)
        return order

    given = {r.split for r in rows}
    if given != {None}:
        parts = {
            p: [rec for rec, row in zip(records, rows, strict=True) if row.split == p]
            for p in PARTS
        }
        if not parts["validation"]:
            want = max(VALIDATION_MIN, round(VALIDATION_SHARE * len(parts["train"])))
            taken, rest = _take(grouped(parts["train"]), want)
            parts["validation"], parts["train"] = taken, [r for g in rest for r in g]
    else:
        order = grouped(records)
        test, order = _take(order, max(TEST_MIN, round(TEST_SHARE * len(records))))
        validation, order = _take(
            order, max(VALIDATION_MIN, round(VALIDATION_SHARE * len(records)))
        )
        parts = {"train": [r for g in order for r in g], "validation": validation, "test": test}
    test_groups = len({r.category for r in parts["test"]})
    if (
        len(parts["train"]) < len(rows) // 4
        or len(parts["test"]) < TEST_MIN
        or test_groups < TEST_GROUPS_MIN
    ):
        sizes = ", ".join(f"{p} {len(parts[p])}" for p in PARTS)
        raise SplitError(
            f"{task}: the near-duplicate groups leave {sizes} records ({test_groups} groups "
            f"in test, at least {TEST_GROUPS_MIN} needed); the file needs more distinct inputs "
            "(records that repeat one sentence or one text are one group)"
        )
    return Split(task, seed, *(tuple(parts[p]) for p in PARTS))
