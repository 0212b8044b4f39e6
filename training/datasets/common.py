"""Record shape, deterministic generation and the three-way split shared by every task.

Records follow the seed article's shape (category, raw, label, note) plus ``facts``: the
entities of the input (ages, durations, names, amounts...) as the label states them, which the
faithfulness score looks for in an output.

``build`` draws until it has ``size`` distinct inputs, then splits them three ways:

- ``train``: what the adapter (and, for the local Qwen3 base, its pre-training) sees;
- ``validation``: early stopping and the choice of checkpoint;
- ``test``: the publish gate, and nothing else.

The split is by *label*, not by record: records whose labels are equal after normalization
land in the same part, so no test label (and no test input) ever appears in training text.
``check_disjoint`` verifies that and is run on every split that is built.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Record:
    category: str
    raw: str
    label: str
    note: str = ""
    facts: tuple[str, ...] = ()


@dataclass(frozen=True)
class Split:
    task: str
    seed: int
    train: tuple[Record, ...]
    validation: tuple[Record, ...]
    test: tuple[Record, ...]

    def sha256(self) -> str:
        """Content hash recorded in the adapter manifest (what exactly it was trained on)."""
        payload = json.dumps(
            {part: [asdict(r) for r in getattr(self, part)] for part in PARTS}, sort_keys=True
        )
        return hashlib.sha256(payload.encode()).hexdigest()

    def sizes(self) -> dict[str, int]:
        return {part: len(getattr(self, part)) for part in PARTS}


PARTS = ("train", "validation", "test")
Generator = Callable[[random.Random], Record]


class SplitError(ValueError):
    """A split shares inputs or labels between its parts, or is too small."""


def normalize(text: str) -> str:
    """What counts as "the same text" across splits: case and spacing do not make it new."""
    return " ".join(text.lower().split())


def check_disjoint(split: Split) -> None:
    """Raise unless no input and no label of one part appears in another."""
    seen: dict[str, tuple[set[str], set[str]]] = {
        part: ({normalize(r.raw) for r in recs}, {normalize(r.label) for r in recs})
        for part in PARTS
        for recs in [getattr(split, part)]
    }
    for i, a in enumerate(PARTS):
        for b in PARTS[i + 1 :]:
            inputs = seen[a][0] & seen[b][0]
            labels = seen[a][1] & seen[b][1]
            if inputs or labels:
                example = next(iter(inputs or labels))
                raise SplitError(
                    f"{split.task}: {len(inputs)} inputs and {len(labels)} labels are in both "
                    f"{a} and {b}, e.g. {example[:80]!r}"
                )


def build(
    task: str,
    make: Generator,
    *,
    seed: int = 0,
    size: int = 600,
    validation: int = 32,
    test: int = 64,
) -> Split:
    # Salt with the task so two tasks with the same seed do not walk the same random stream.
    rng = random.Random(f"{task}:{seed}")
    by_raw: dict[str, Record] = {}
    attempts = 0
    while len(by_raw) < size:
        attempts += 1
        if attempts > size * 50:
            raise SplitError(
                f"{task}: templates produce only {len(by_raw)} distinct inputs, fewer than {size}"
            )
        rec = make(rng)
        by_raw.setdefault(normalize(rec.raw), rec)
    groups: dict[str, list[Record]] = {}
    for rec in by_raw.values():
        groups.setdefault(normalize(rec.label), []).append(rec)
    order = list(groups.values())
    rng.shuffle(order)
    parts: dict[str, list[Record]] = {"test": [], "validation": [], "train": []}
    for group in order:
        # Whole label groups go to test, then validation, then train: a label is in one part.
        if len(parts["test"]) < test:
            parts["test"] += group
        elif len(parts["validation"]) < validation:
            parts["validation"] += group
        else:
            parts["train"] += group
    if len(parts["train"]) < size // 2:
        raise SplitError(
            f"{task}: only {len(parts['train'])} training records once test and validation "
            "took whole label groups; the generator needs more variety"
        )
    split = Split(task, seed, *(tuple(parts[p]) for p in PARTS))
    check_disjoint(split)
    return split


def pick(rng: random.Random, options: tuple[str, ...] | list[str]) -> str:
    return options[rng.randrange(len(options))]
