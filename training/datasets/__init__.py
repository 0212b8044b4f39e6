"""Deterministic task datasets (no downloads): one generator module per native task."""

from __future__ import annotations

import functools
import hashlib
import os
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

from config.dataset_files import file_sha256, read_rows
from config.loader import dataset_rows
from config.schema import AdapterEntry
from training.datasets import medical, pii, sales, sentiment, singlish, style, user
from training.datasets.common import (
    PARTS,
    Record,
    Split,
    SplitError,
    build,
    check_disjoint,
    straddling_groups,
)

GENERATORS: dict[str, ModuleType] = {
    "medical_shorthand": medical,
    "sales_json": sales,
    "singlish_to_standard": singlish,
    "pii_redaction": pii,
    "sentiment_neutralization": sentiment,
    "style_transfer": style,
}

DEFAULT_SIZE = 600
#: Where s3:// datasets are downloaded to outside a training job.
DATASET_CACHE = Path(__file__).resolve().parents[2] / ".artifacts" / "datasets"


#: One build at a time: the PII generator reseeds process-wide faker instances on every
#: draw, so two threads building at once (the gateway's catalog view runs in threads) would
#: interleave their draws and cache a split no other run reproduces.
_BUILDING = threading.Lock()


def load(task: str, seed: int = 0, size: int = DEFAULT_SIZE) -> Split:
    """The train / validation / test split of one task, identical for the same (task, seed,
    size): templates, slot values, inputs and labels never cross parts (``common.build``).
    Cached: a split is immutable, and building one with its checks takes a second or two."""
    with _BUILDING:
        return _load(task, seed, size)


@functools.cache
def _load(task: str, seed: int, size: int) -> Split:
    try:
        module = GENERATORS[task]
    except KeyError:
        raise KeyError(
            f"no dataset generator for task {task!r} (known: {sorted(GENERATORS)})"
        ) from None
    return build(task, module.make, seed=seed, size=size)


def fetch(uri: str, cache: Path = DATASET_CACHE) -> Path:
    """An s3:// dataset as a local file: the training job's ``dataset`` channel when SageMaker
    mounted one (training.launch passes the object), else downloaded with the caller's
    credentials into ``cache``."""
    name = uri.rsplit("/", 1)[1]
    channel = os.environ.get("SM_CHANNEL_DATASET")
    if channel and (Path(channel) / name).is_file():
        return Path(channel) / name
    import boto3

    bucket, key = uri.removeprefix("s3://").split("/", 1)
    dest = cache / hashlib.sha256(uri.encode()).hexdigest()[:16] / name
    dest.parent.mkdir(parents=True, exist_ok=True)
    boto3.client("s3").download_file(bucket, key, str(dest))
    return dest


def for_entry(
    entry: AdapterEntry, catalog_dir: Path, size: int = DEFAULT_SIZE
) -> tuple[Split, dict[str, Any]]:
    """The split an entry trains and is gated on, and its identity for the manifest: a file's
    path and sha256, or a generator's name, seed and size."""
    source = entry.dataset_file
    if source is None:
        generator = entry.dataset or entry.task
        identity = {
            "source": "generator",
            "generator": generator,
            "seed": entry.dataset_seed,
            "size": size,
        }
        return load(generator, entry.dataset_seed, size), identity
    if source.startswith("s3://"):
        path = fetch(source)
        rows = read_rows(path, instruction=entry.profile().instruction)
    else:
        path, rows = dataset_rows(entry, catalog_dir)
    split = user.split_rows(entry.task, rows, entry.dataset_seed)
    identity = {
        "source": "file",
        "path": source,
        "file_sha256": file_sha256(path),
        "records": len(rows),
        "seed": entry.dataset_seed,
    }
    return split, identity


def card(task: str) -> str:
    module = GENERATORS[task]
    text: str = module.CARD
    return text.format(n=medical.lexicon_size()) if task == "medical_shorthand" else text


def corpus(seed: int = 0, size: int = DEFAULT_SIZE) -> list[str]:
    """The training inputs and outputs of every task: what the local Qwen3 base's tokenizer
    and pre-training see. Only the train parts: a test label in pre-training text would let
    the base (and every adapter on it) recite the gate's answers."""
    texts: list[str] = []
    for task in GENERATORS:
        for rec in load(task, seed, size).train:
            texts.extend((rec.raw, rec.label))
    return texts


__all__ = [
    "GENERATORS",
    "PARTS",
    "Record",
    "Split",
    "SplitError",
    "card",
    "check_disjoint",
    "corpus",
    "for_entry",
    "load",
    "straddling_groups",
]
