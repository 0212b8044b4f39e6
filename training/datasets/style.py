"""Style transfer: informal register -> formal register over shared slots."""

from __future__ import annotations

import random

from training.datasets.common import Record, pick

CARD = (
    "style_transfer: parallel informal/formal templates over shared slots (person, event, "
    "day, item); the informal side uses contractions, slang and fragments, the formal side "
    "full sentences in a business register."
)

PEOPLE = ("Sam", "the team", "Dr. Lee", "our manager", "Maria", "the client", "Tom", "the board")
EVENTS = ("the meeting", "the review", "the launch", "the workshop", "the call", "the audit")
DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "tomorrow")
ITEMS = ("the report", "the slides", "the budget", "the draft", "the invoice", "the contract")

PAIRS = (
    (
        "hey, can u send me {it} before {d}? thx",
        "Could you please send me {it} before {d}? Thank you.",
    ),
    ("gonna be late for {e}, sorry!!", "I apologize, but I will be late for {e}."),
    ("{p} wants {it} asap, ok?", "{P} has requested {it} as soon as possible."),
    ("can't make {e} on {d}, my bad", "Unfortunately, I am unable to attend {e} on {d}."),
    (
        "yo, {it} looks kinda off, wanna fix it?",
        "{It} appears to contain errors; would you be able to correct it?",
    ),
    ("lemme know if {p} is cool with {it}", "Please let me know whether {p} approves of {it}."),
    ("{e}'s moved to {d}, fyi", "Please note that {e} has been moved to {d}."),
    ("thx for {it}, super helpful!", "Thank you for {it}; it was very helpful."),
    ("gotta push {e} to {d}, that ok?", "Would it be acceptable to reschedule {e} to {d}?"),
)


OPENINGS = (
    ("", ""),
    ("hi all, ", "Dear all, "),
    ("quick one: ", ""),
    ("ok so ", ""),
    ("hey team, ", "Dear colleagues, "),
)
CLOSINGS = (
    ("", ""),
    (" cheers", " Kind regards."),
    (" ttyl", " I look forward to hearing from you."),
)

_LOWER_AFTER_GREETING = ("Please", "Could", "Would", "Thank", "Unfortunately")


def make(rng: random.Random) -> Record:
    informal, formal = PAIRS[rng.randrange(len(PAIRS))]
    (oi, of), (ci, cf) = (
        OPENINGS[rng.randrange(len(OPENINGS))],
        CLOSINGS[rng.randrange(len(CLOSINGS))],
    )
    if of and formal.startswith(_LOWER_AFTER_GREETING):
        formal = formal[0].lower() + formal[1:]
    informal, formal = oi + informal + ci, of + formal + cf
    p, it = pick(rng, PEOPLE), pick(rng, ITEMS)
    slots = {
        "p": p,
        "P": p[0].upper() + p[1:],
        "e": pick(rng, EVENTS),
        "d": pick(rng, DAYS),
        "it": it,
        "It": it[0].upper() + it[1:],
    }
    # The facts as the formal side states them (a capitalized slot counts as its own form).
    facts = tuple(dict.fromkeys(slots[k] for k in slots if "{" + k + "}" in formal))
    return Record("style_transfer", informal.format(**slots), formal.format(**slots), facts=facts)
