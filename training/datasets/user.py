"""A team's own records (``config.dataset_files``) as a train / validation / test split that
nothing can be memorized across.

Records are grouped as near-duplicates (``near_duplicates``: a template, or a core sentence
with other names and numbers) before they are split, and whole groups go to one part.

Splits given in the file are honoured, and checked: a record of one part that is a
near-duplicate of another part's is refused, naming both lines. Without a validation part, one
is carved out of the training groups. The group of each record is kept (``Record.category``)
so that the gate can resample whole groups (a cluster bootstrap).
"""

from __future__ import annotations

import random

from config.dataset_files import Row
from config.near_duplicates import near_duplicate_groups
from training.datasets.common import PARTS, Record, Split, SplitError

#: Test and validation shares of the records when the file gives no split, with floors.
TEST_SHARE, TEST_MIN = 0.15, 20
VALIDATION_SHARE, VALIDATION_MIN = 0.10, 10
#: Fewest near-duplicate groups the test part may hold: the gate resamples groups, and a few
#: groups make an interval that says nothing.
TEST_GROUPS_MIN = 10


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
