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

from config.dataset_files import DatasetSplitError, Row, partition
from training.datasets.common import PARTS, Record, Split, SplitError


def split_rows(task: str, rows: list[Row], seed: int = 0) -> Split:
    """The split of a dataset file (``config.dataset_files.partition``: its own, or by
    near-duplicate groups) as records; each keeps its group as ``category``."""
    try:
        groups, parts = partition(rows, task, seed)
    except DatasetSplitError as exc:
        raise SplitError(f"{task}: {exc}") from exc
    records = [
        Record(category=f"group-{g}", raw=r.input, label=r.output)
        for g, r in zip(groups, rows, strict=True)
    ]
    return Split(task, seed, *(tuple(records[i] for i in parts[p]) for p in PARTS))
