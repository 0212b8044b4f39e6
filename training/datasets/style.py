"""Style transfer: informal register -> formal register over shared slots.

A record is an optional opening, a core message and an optional closing, each an
(informal, formal) pair from its own pool. Every pool is split between the parts
(``common.Draw``): a test message uses templates, people, events, days and items that no
training record uses.
"""

from __future__ import annotations

from training.datasets.common import Draw, Record

CARD = (
    "style_transfer: parallel informal/formal templates (opening, message, closing) over shared "
    "slots (person, event, day, item); the informal side uses contractions, slang and "
    "fragments, the formal side full sentences in a business register. Templates and slot "
    "values of the test part are used by no training record."
)

PEOPLE = (
    "Sam",
    "Priya",
    "the client",
    "our manager",
    "Dr. Lee",
    "the team",
    "Marcus",
    "Aisha",
    "the finance team",
    "our director",
    "Tom",
    "Mei",
    "the vendor",
    "Jordan",
    "Ms. Patel",
    "the legal team",
    "Elena",
    "our intern",
    "Carlos",
    "the board",
)
EVENTS = (
    "the meeting",
    "the quarterly review",
    "the offsite",
    "the client call",
    "the budget meeting",
    "the product launch",
    "the team lunch",
    "the board meeting",
    "the training session",
    "the sprint retrospective",
    "the kickoff call",
    "the town hall",
    "the performance review",
    "the workshop",
)
DAYS = (
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "tomorrow",
    "next Monday",
    "next Friday",
    "the end of the week",
    "the fourteenth",
    "Friday afternoon",
    "the end of the month",
)
ITEMS = (
    "the report",
    "the slide deck",
    "the budget forecast",
    "the contract",
    "the proposal",
    "the invoice",
    "the draft",
    "the spreadsheet",
    "the meeting summary",
    "the project plan",
    "the design mockup",
    "the sales summary",
    "the press release",
    "the agenda",
    "the onboarding guide",
    "the quarterly summary",
    "the code review",
    "the vendor quote",
)
#: (informal, formal) over {p}/{P} person, {e} event, {d} day, {it}/{It} item.
PAIRS = (
    ("hey can u send me {it} by {d}? thx", "Could you please send me {it} by {d}? Thank you."),
    ("{p} is gonna be late for {e} fyi", "Please note that {p} will be arriving late to {e}."),
    ("lemme know if {it} looks ok", "Please let me know whether {it} meets your expectations."),
    ("btw {e} got moved to {d}", "Please be advised that {e} has been rescheduled to {d}."),
    ("idk if {p} saw {it} yet tbh", "I am not certain whether {p} has reviewed {it} yet."),
    ("pls ping {p} abt {e} asap", "Kindly contact {p} regarding {e} at your earliest convenience."),
    ("np, {it} is all done", "That is no trouble at all; {it} has now been completed."),
    (
        "can't make {e} sry, smth came up",
        "Unfortunately, I will be unable to attend {e} owing to an unforeseen commitment.",
    ),
    ("{it} looks kinda rough tbh, needs work", "In my view, {it} requires further revision."),
    ("gonna need {it} before {e}, k?", "I will require {it} prior to {e}."),
    ("{p} says {e} is a go", "{P} has confirmed that {e} will proceed as planned."),
    (
        "any news on {it}? been waiting forever lol",
        "Could you provide an update on {it}? I have been awaiting it for some time.",
    ),
    ("fyi {p} is ooo till {d}", "Please be aware that {p} is out of the office until {d}."),
    ("thx for sending {it} over, v helpful", "Thank you for sending {it}; it was very helpful."),
    ("r we still on for {e}?", "Would you confirm whether {e} is still scheduled?"),
    (
        "{p} wants {it} redone asap smh",
        "{P} has requested that {it} be revised as soon as possible.",
    ),
    ("quick q - who's running {e}?", "May I ask who will be leading {e}?"),
    (
        "gonna push {e} to {d} if that's cool w/ u",
        "I propose that we postpone {e} until {d}, if that is acceptable to you.",
    ),
    ("{it} attached, lmk ur thoughts", "Please find {it} attached; I would welcome your feedback."),
    (
        "sry for the late reply, {p} only just sent me {it}",
        "I apologise for the delayed response; {p} has only recently provided me with {it}.",
    ),
    ("{p} n i r gonna prep {it} for {e}", "{P} and I will prepare {it} in advance of {e}."),
    ("heads up, {e} is cancelled", "I wish to inform you that {e} has been cancelled."),
    (
        "can u loop {p} in on {it}?",
        "Would you kindly include {p} in the correspondence regarding {it}?",
    ),
    (
        "pls dont forget {it} is due by {d}!!",
        "May I remind you that {it} must be submitted by {d}.",
    ),
    ("ok so {p} basically nailed {e}", "{P} delivered an excellent performance at {e}."),
    (
        "im swamped rn, can {it} wait till {d}?",
        "I am currently fully committed; would it be possible to defer {it} until {d}?",
    ),
    (
        "who's got {it}? cant find it anywhere",
        "Does anyone currently have {it}? I have been unable to locate it.",
    ),
    (
        "{p} cant make it to {e}, ill cover",
        "As {p} is unable to attend {e}, I shall attend on their behalf.",
    ),
    (
        "awesome job on {it}, u guys rock",
        "Congratulations to everyone on the excellent work on {it}.",
    ),
    (
        "just checkin, did {p} get back to u re {e}?",
        "I wanted to follow up on whether {p} has responded to you regarding {e}.",
    ),
)
OPENINGS = (
    ("hey team, ", "Dear colleagues, "),
    ("quick one: ", ""),
    ("morning all! ", "Good morning, everyone. "),
    ("hi! ", "Hello, "),
    ("yo, ", "Hello. "),
    ("hiya ", "Dear all, "),
    ("ok so ", ""),
    ("sup all, ", "Greetings, "),
    ("hi guys! ", "Hello all. "),
)
CLOSINGS = (
    (" cheers", " Kind regards."),
    (" ttyl", " I look forward to hearing from you."),
    (" thx!", " Thank you in advance."),
    (" lmk", " Please let me know if you have any questions."),
    (" ta", " Many thanks."),
    (" laters", " Best regards."),
    (" k bye", " Sincerely."),
    (" thx a ton!!", " Thank you very much for your assistance."),
    (" catch u later", " With best wishes."),
)

#: Formal messages that read lower-case after a formal greeting ("Dear all, please ...").
_LOWER_AFTER_GREETING = ("Please", "Could", "Would", "Thank", "Unfortunately", "May", "Kindly")


def make(draw: Draw) -> Record:
    informal, formal = draw.template("message", PAIRS)
    oi, of = draw.template("opening", OPENINGS) if draw.rng.random() < 0.7 else ("", "")
    ci, cf = draw.template("closing", CLOSINGS) if draw.rng.random() < 0.7 else ("", "")
    if of.endswith(", ") and formal.startswith(_LOWER_AFTER_GREETING):
        formal = formal[0].lower() + formal[1:]
    elif of.endswith(", ") and formal.startswith(("{P}", "{It}")):
        formal = "{" + formal[1].lower() + formal[2:]  # "Dear all, the client has ..."
    informal, formal = oi + informal + ci, of + formal + cf
    p, it = draw.value("person", PEOPLE), draw.value("item", ITEMS)
    slots = {
        "p": p,
        "P": p[0].upper() + p[1:],
        "e": draw.value("event", EVENTS),
        "d": draw.value("day", DAYS),
        "it": it,
        "It": it[0].upper() + it[1:],
    }
    # The facts as the formal side states them (a capitalized slot counts as its own form).
    facts = tuple(dict.fromkeys(slots[k] for k in slots if "{" + k + "}" in formal))
    return draw.record(informal.format(**slots), formal.format(**slots), facts=facts)
