"""Deterministic task datasets (no downloads): one generator module per native task."""

from __future__ import annotations

from types import ModuleType

from training.datasets import medical, pii, sales, sentiment, singlish, style
from training.datasets.common import Record, Split, build

GENERATORS: dict[str, ModuleType] = {
    "medical_shorthand": medical,
    "sales_json": sales,
    "singlish_to_standard": singlish,
    "pii_redaction": pii,
    "sentiment_neutralization": sentiment,
    "style_transfer": style,
}

DEFAULT_SIZE = 480


def load(task: str, seed: int = 0, size: int = DEFAULT_SIZE) -> Split:
    """The train / held-out split of one task, identical for the same (task, seed, size)."""
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
    """Every input and output of every task: what the local base's tokenizer is trained on."""
    texts: list[str] = []
    for task in GENERATORS:
        split = load(task, seed, size)
        for rec in (*split.train, *split.held_out):
            texts.extend((rec.raw, rec.label))
    return texts


__all__ = ["GENERATORS", "Record", "Split", "card", "corpus", "load"]
