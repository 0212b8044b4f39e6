"""Record shape, deterministic generation and the held-out split shared by every task.

Records follow the seed article's shape (category, raw, label, note). A generator is a
function of a ``random.Random``; ``build`` draws until it has ``size`` distinct inputs so the
train and held-out splits can never share an input, then splits by a seeded shuffle.
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


@dataclass(frozen=True)
class Split:
    task: str
    seed: int
    train: tuple[Record, ...]
    held_out: tuple[Record, ...]

    def sha256(self) -> str:
        """Content hash recorded in the adapter manifest (what exactly it was trained on)."""
        payload = json.dumps(
            {
                "train": [asdict(r) for r in self.train],
                "held_out": [asdict(r) for r in self.held_out],
            },
            sort_keys=True,
        )
        return hashlib.sha256(payload.encode()).hexdigest()


Generator = Callable[[random.Random], Record]


def build(
    task: str,
    make: Generator,
    *,
    seed: int = 0,
    size: int = 480,
    held_out_fraction: float = 0.2,
) -> Split:
    # Salt with the task so two tasks with the same seed do not walk the same random stream.
    rng = random.Random(f"{task}:{seed}")
    by_raw: dict[str, Record] = {}
    attempts = 0
    while len(by_raw) < size:
        attempts += 1
        if attempts > size * 50:
            raise RuntimeError(
                f"{task}: templates produce only {len(by_raw)} distinct inputs, fewer than {size}"
            )
        rec = make(rng)
        by_raw.setdefault(rec.raw, rec)
    records = list(by_raw.values())
    rng.shuffle(records)
    n_held = max(1, round(size * held_out_fraction))
    return Split(task, seed, tuple(records[n_held:]), tuple(records[:n_held]))


def pick(rng: random.Random, options: tuple[str, ...] | list[str]) -> str:
    return options[rng.randrange(len(options))]
