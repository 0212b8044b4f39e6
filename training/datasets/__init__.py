"""Deterministic task datasets (no downloads): one generator module per native task."""

from __future__ import annotations

from types import ModuleType

from training.datasets import medical, pii, sales, sentiment, singlish, style
from training.datasets.common import PARTS, Record, Split, SplitError, build, check_disjoint

GENERATORS: dict[str, ModuleType] = {
    "medical_shorthand": medical,
    "sales_json": sales,
    "singlish_to_standard": singlish,
    "pii_redaction": pii,
    "sentiment_neutralization": sentiment,
    "style_transfer": style,
}

DEFAULT_SIZE = 600


def load(task: str, seed: int = 0, size: int = DEFAULT_SIZE) -> Split:
    """The train / validation / test split of one task, identical for the same (task, seed,
    size); inputs and labels never cross parts (``common.check_disjoint``)."""
    try:
        module = GENERATORS[task]
    except KeyError:
        raise KeyError(
            f"no dataset generator for task {task!r} (known: {sorted(GENERATORS)})"
        ) from None
    return build(task, module.make, seed=seed, size=size)


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
    "load",
]
