"""Record shape, deterministic generation and the three-way split shared by every task.

Records follow the seed article's shape (category, raw, label, note) plus ``facts``: the
entities of the input (ages, durations, names, amounts...) as the label states them, which the
faithfulness score looks for in an output; ``template``: the templates a record was built
from; and ``slots``: the slot values filled into them.

``build`` draws each part from its own share of every pool (``Draw``):

- ``train``: what the adapter (and, for the local Qwen3 base, its pre-training) sees;
- ``validation``: early stopping and the choice of checkpoint;
- ``test``: the publish gate, and nothing else.

Whole templates and whole slot values are held out: a test record is made of templates and
values no training record uses, so the gate measures what an adapter learned, not what it can
look up (a nearest-training-label lookup scored above a trained adapter when the split was by
label only). ``check_disjoint`` and ``check_held_out`` verify every split that is built: no
input or label in two parts, no template in two parts, and no near-duplicate group
(``near_duplicates``, with the slot values masked) across parts.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import TypeVar

from config.near_duplicates import near_duplicate_groups


@dataclass(frozen=True)
class Record:
    category: str
    raw: str
    label: str
    note: str = ""
    facts: tuple[str, ...] = ()
    #: The templates the record was built from (``pool:index``), ``+``-joined.
    template: str = ""
    #: The slot values filled into them, masked when near-duplicates are looked for.
    slots: tuple[str, ...] = ()


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
#: The share of every pool (templates, slot values) held out for test and for validation;
#: train has the rest. A pool gives each part at least one option.
HOLDOUT = {"test": 0.25, "validation": 0.2}
T = TypeVar("T")


class SplitError(ValueError):
    """A split shares inputs, labels, templates or near-duplicates between its parts, or is
    too small."""


@dataclass
class Draw:
    """The draws of one record, each from the share of its pool that belongs to ``part``.

    A pool is partitioned the same way for every record of a split (by a hash of the task,
    the seed, the pool's name and the option), so another seed holds out other templates and
    values; ``template`` and ``value`` record what was drawn on the record."""

    task: str
    seed: int
    part: str
    rng: random.Random
    templates: list[str] = field(default_factory=list)
    slots: list[str] = field(default_factory=list)

    def _rank(self, pool: str, option: object) -> str:
        return hashlib.sha256(f"{self.task}:{self.seed}:{pool}:{option!r}".encode()).hexdigest()

    def share(self, pool: str, options: Sequence[T]) -> list[T]:
        """The options of ``pool`` that belong to this part."""
        if len({repr(o) for o in options}) != len(options):
            raise SplitError(f"{self.task}: pool {pool!r} repeats an option")
        order = sorted(range(len(options)), key=lambda i: self._rank(pool, options[i]))
        test = max(1, round(HOLDOUT["test"] * len(order)))
        validation = max(1, round(HOLDOUT["validation"] * len(order)))
        if len(order) < test + validation + 1:
            raise SplitError(
                f"{self.task}: pool {pool!r} has {len(order)} options, too few to hold out"
            )
        cut = {"test": order[:test], "validation": order[test : test + validation]}
        return [options[i] for i in sorted(cut.get(self.part, order[test + validation :]))]

    def template(self, pool: str, options: Sequence[T]) -> T:
        """A template of this part's share; its id joins the record's ``template``."""
        share = self.share(pool, options)
        chosen = share[self.rng.randrange(len(share))]
        self.templates.append(f"{pool}:{options.index(chosen)}")
        return chosen

    def value(self, pool: str, options: Sequence[str]) -> str:
        """A slot value of this part's share, recorded on the record's ``slots``."""
        share = self.share(pool, options)
        chosen = share[self.rng.randrange(len(share))]
        self.slots.append(chosen)
        return chosen

    def fresh(self, pool: str, produce: Callable[[random.Random], str]) -> str:
        """A value from an open-ended source (faker), redrawn until it hashes into this part:
        the parts' values never meet, whatever the source produces."""
        for _ in range(10_000):
            chosen = produce(self.rng)
            bucket = int(self._rank(pool, chosen)[:8], 16) / 16**8
            part = (
                "test"
                if bucket < HOLDOUT["test"]
                else "validation"
                if bucket < HOLDOUT["test"] + HOLDOUT["validation"]
                else "train"
            )
            if part == self.part:
                self.slots.append(chosen)
                return chosen
        raise SplitError(f"{self.task}: pool {pool!r} produced no value for {self.part}")

    def shared(self, options: Sequence[T]) -> T:
        """An option of the task's own vocabulary, which every part uses (the medical lexicon:
        holding it out would test the base's medicine, not what the adapter learned); string
        parts are still slot values, masked when near-duplicates are looked for."""
        chosen = options[self.rng.randrange(len(options))]
        parts = chosen if isinstance(chosen, tuple) else (chosen,)
        self.slots.extend(p for p in parts if isinstance(p, str))
        return chosen

    def record(self, raw: str, label: str, *, note: str = "", facts: Sequence[str] = ()) -> Record:
        return Record(
            category=self.task,
            raw=raw,
            label=label,
            note=note,
            facts=tuple(facts),
            template="+".join(self.templates),
            slots=tuple(dict.fromkeys(self.slots)),
        )


Generator = Callable[[Draw], Record]


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


def straddling_groups(split: Split, *, slots: bool = False) -> int:
    """How many near-duplicate groups have records in two parts of ``split``. With ``slots``
    (a generator's split), the records' own slot values are masked too, and a run of words
    many records share is a shared template, not boilerplate."""
    recs = [(p, r) for p in PARTS for r in getattr(split, p)]
    groups = near_duplicate_groups(
        [(r.raw, r.label) for _, r in recs],
        [r.slots for _, r in recs] if slots else None,
        boilerplate=not slots,
    )
    parts: dict[int, set[str]] = {}
    for g, (p, _) in zip(groups, recs, strict=True):
        parts.setdefault(g, set()).add(p)
    return sum(1 for ps in parts.values() if len(ps) > 1)


def check_held_out(split: Split) -> None:
    """Raise unless every template is in one part and no near-duplicate group (slot values
    masked) has records in two."""
    where: dict[str, set[str]] = {}
    for part in PARTS:
        for rec in getattr(split, part):
            for template in filter(None, rec.template.split("+")):
                where.setdefault(template, set()).add(part)
    shared = sorted(t for t, parts in where.items() if len(parts) > 1)
    if shared:
        raise SplitError(f"{split.task}: templates in two parts: {', '.join(shared[:5])}")
    straddling = straddling_groups(split, slots=True)
    if straddling:
        raise SplitError(
            f"{split.task}: {straddling} near-duplicate groups have records in two parts; "
            "two templates share a run of words (near_duplicates.SHINGLE_WORDS)"
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
    """``size`` records with distinct inputs: ``test`` and ``validation`` of them drawn from
    their parts' held-out templates and values, the rest from train's."""
    wanted = {"test": test, "validation": validation, "train": size - test - validation}
    if wanted["train"] < size // 2:
        raise SplitError(f"{task}: {size} records leave too few for training")
    parts: dict[str, list[Record]] = {p: [] for p in PARTS}
    inputs: set[str] = set()
    labels: dict[str, str] = {}
    for part in ("test", "validation", "train"):
        # Salt with the task and the part: two tasks, or two parts, walk their own streams.
        rng = random.Random(f"{task}:{seed}:{part}")
        attempts = 0
        while len(parts[part]) < wanted[part]:
            attempts += 1
            if attempts > wanted[part] * 50:
                raise SplitError(
                    f"{task}: the {part} part's templates and slot values produce only "
                    f"{len(parts[part])} distinct inputs, fewer than {wanted[part]}"
                )
            rec = make(Draw(task, seed, part, rng))
            raw, label = normalize(rec.raw), normalize(rec.label)
            if raw in inputs or labels.setdefault(label, part) != part:
                continue
            inputs.add(raw)
            parts[part].append(rec)
    split = Split(task, seed, *(tuple(parts[p]) for p in PARTS))
    check_disjoint(split)
    check_held_out(split)
    return split
