"""Singaporean English (Singlish) -> Standard English.

Parallel templates: each pair has a Singlish form and a Standard English form over the same
slots (people, places, food, times), so the rewrite is exact and exact match is meaningful.
"""

from __future__ import annotations

import random

from training.datasets.common import Record, pick

CARD = (
    "singlish_to_standard: parallel sentence templates, each a Singlish form and its "
    "Standard English rewrite over shared slots (names, places, food, times). Particles "
    "(lah, leh, lor, meh, hor), 'can or not', 'got', 'already', 'alamak' and similar "
    "features are covered."
)

NAMES = (
    "Ah Huat",
    "Mei Ling",
    "Raj",
    "Siti",
    "Kumar",
    "Jia Hui",
    "Ben",
    "Aisha",
    "Wei Jie",
    "Priya",
)
PLACES = (
    "the hawker centre",
    "Jurong",
    "Orchard",
    "the MRT station",
    "the office",
    "Tampines",
    "the kopitiam",
    "Changi",
    "Bugis",
    "the void deck",
)
FOODS = (
    "chicken rice",
    "laksa",
    "char kway teow",
    "roti prata",
    "nasi lemak",
    "kaya toast",
    "satay",
    "bak kut teh",
)
TIMES = ("tomorrow", "tonight", "later", "this weekend", "next week", "on Monday")

# (singlish, standard) with {n} name, {p} place, {f} food, {t} time
PAIRS: tuple[tuple[str, str], ...] = (
    ("{n} go {p} {t} can or not?", "Can {n} go to {p} {t}?"),
    ("Wah, the {f} here damn shiok lah!", "Wow, the {f} here is really delicious!"),
    ("{n} already eat {f} already.", "{n} has already eaten {f}."),
    ("Alamak, I forgot to bring my wallet to {p}!", "Oh no, I forgot to bring my wallet to {p}!"),
    ("You want to makan {f} {t} or not?", "Do you want to eat {f} {t}?"),
    ("{n} so blur one, always lost at {p}.", "{n} is so confused; they always get lost at {p}."),
    (
        "Don't play play ah, {n}, the boss coming {t}.",
        "Don't fool around, {n}; the boss is coming {t}.",
    ),
    ("The queue at {p} very long leh.", "The queue at {p} is very long."),
    ("Got {f} at {p} or not?", "Is there {f} at {p}?"),
    ("{n} say {t} cannot make it lor.", "{n} said they cannot make it {t}."),
    (
        "Why you so kiasu, {n}? Chope seat at {p} so early.",
        "Why are you so anxious, {n}? You reserved a seat at {p} so early.",
    ),
    ("This one {n} sure can one, don't worry.", "{n} can definitely do this; don't worry."),
    ("Meet at {p} {t} hor, don't be late.", "Let's meet at {p} {t}; please don't be late."),
    (
        "{n} very paiseh, never pay for the {f}.",
        "{n} is very embarrassed for not paying for the {f}.",
    ),
    ("Really meh? {n} go {p} {t}?", "Really? Is {n} going to {p} {t}?"),
    (
        "Eh {n}, help me tabao {f} from {p} can?",
        "Hey {n}, could you get takeaway {f} for me from {p}?",
    ),
    (
        "{t} sure jam one, better take MRT to {p}.",
        "There will definitely be traffic {t}; it is better to take the MRT to {p}.",
    ),
    ("I {t} got meeting at {p}, cannot lah.", "I have a meeting at {p} {t}, so I cannot."),
)


def make(rng: random.Random) -> Record:
    singlish, standard = PAIRS[rng.randrange(len(PAIRS))]
    slots = {
        "n": pick(rng, NAMES),
        "p": pick(rng, PLACES),
        "f": pick(rng, FOODS),
        "t": pick(rng, TIMES),
    }
    raw, label = singlish.format(**slots), standard.format(**slots)
    facts = tuple(v for k, v in slots.items() if "{" + k + "}" in standard)
    return Record("singlish_to_standard", raw, label[0].upper() + label[1:], facts=facts)
