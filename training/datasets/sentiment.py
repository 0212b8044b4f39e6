"""Sentiment neutralization: emotionally charged text -> the same facts in a neutral tone."""

from __future__ import annotations

import random

from training.datasets.common import Record, pick

CARD = (
    "sentiment_neutralization: parallel templates over shared slots (product, issue, "
    "duration); the charged form uses intensifiers, exclamations and insults, the neutral "
    "form states the same facts plainly."
)

PRODUCTS = (
    "phone",
    "laptop",
    "order",
    "subscription",
    "washing machine",
    "router",
    "headphones",
    "delivery",
    "app",
    "printer",
)
ISSUES = (
    "stopped working",
    "arrived damaged",
    "was charged twice",
    "keeps crashing",
    "is missing parts",
    "was delivered late",
    "overheats",
    "lost my data",
)
DURATIONS = ("two days", "a week", "three weeks", "a month", "five days")

PAIRS = (
    ("This {p} is absolute garbage, it {i} after {d}!!!", "The {p} {i} after {d}."),
    (
        "I am FURIOUS. Your useless {p} {i} and nobody cares!",
        "My {p} {i}, and I have not received help yet.",
    ),
    ("Worst company ever. My {p} {i} within {d}. Pathetic!", "My {p} {i} within {d}."),
    (
        "Seriously?! {d} of waiting and the {p} {i}. Unbelievable incompetence.",
        "After {d} of waiting, the {p} {i}.",
    ),
    ("I'm sick and tired of this {p} — it {i} AGAIN after {d}!", "The {p} {i} again after {d}."),
    (
        "You people are a joke. The {p} {i} and I want my money back NOW!",
        "The {p} {i}, and I would like a refund.",
    ),
    ("Absolutely disgusted: the {p} {i} after only {d}!", "The {p} {i} after {d}."),
)


def make(rng: random.Random) -> Record:
    charged, neutral = PAIRS[rng.randrange(len(PAIRS))]
    slots = {"p": pick(rng, PRODUCTS), "i": pick(rng, ISSUES), "d": pick(rng, DURATIONS)}
    label = neutral.format(**slots)
    facts = tuple(v for k, v in slots.items() if "{" + k + "}" in neutral)
    return Record(
        "sentiment_neutralization",
        charged.format(**slots),
        label[0].upper() + label[1:],
        facts=facts,
    )
