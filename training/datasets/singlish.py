"""Singaporean English (Singlish) -> Standard English.

Parallel templates: each pair has a Singlish form and a Standard English form over the same
slots (people, places, food, times), so the rewrite is exact and exact match is meaningful.
Every pool is split between the parts (``common.Draw``): a test sentence uses templates,
names, places, food and times that no training record uses.
"""

from __future__ import annotations

from training.datasets.common import Draw, Record

CARD = (
    "singlish_to_standard: parallel sentence templates, each a Singlish form and its "
    "Standard English rewrite over shared slots (names, places, food, times). Particles "
    "(lah, leh, lor, meh, hor, sia), 'can or not', 'got', 'already', 'alamak', 'bo jio', "
    "'kena', 'tabao' and similar features are covered. Templates and slot values of the test "
    "part are used by no training record."
)

NAMES = (
    "Ah Seng",
    "Hui Min",
    "Ravi",
    "Aminah",
    "Kok Leong",
    "Li Ting",
    "Ganesh",
    "Hazirah",
    "Boon Keng",
    "Pei Shan",
    "Suresh",
    "Yusof",
    "Geraldine",
    "Ah Kow",
    "Shanti",
    "Irfan",
    "Wen Xuan",
    "Lakshmi",
    "Benjamin",
    "Rosnah",
    "Ah Huat",
    "Mei Ling",
    "Raj",
    "Siti",
    "Kumar",
    "Jia Hui",
    "Ah Beng",
    "Wei Jie",
    "Farah",
    "Priya",
    "Hafiz",
    "Xin Yi",
    "Muthu",
    "Nurul",
    "Jun Wei",
    "Ah Lian",
    "Devi",
    "Zul",
    "Kelvin",
    "Shu Fen",
)
PLACES = (
    "Pasir Ris",
    "Serangoon",
    "Bishan",
    "Hougang",
    "Woodlands",
    "Punggol",
    "Bukit Batok",
    "the hawker centre",
    "Holland Village",
    "Tiong Bahru",
    "the wet market",
    "Geylang",
    "Tampines Mall",
    "Jurong Point",
    "Bugis",
    "Orchard",
    "the void deck",
    "Changi Airport",
    "the kopitiam downstairs",
    "Toa Payoh",
    "Ang Mo Kio",
    "the MRT station",
    "Sentosa",
    "Chinatown",
    "Little India",
    "the library",
    "Bedok",
    "Clementi",
    "the community centre",
    "East Coast Park",
    "Yishun",
    "Marina Bay Sands",
)
FOODS = (
    "wanton mee",
    "ban mian",
    "popiah",
    "rojak",
    "ayam penyet",
    "fishball noodles",
    "duck rice",
    "thunder tea rice",
    "lor mee",
    "economic rice",
    "min jiang kueh",
    "nasi padang",
    "chicken rice",
    "laksa",
    "char kway teow",
    "nasi lemak",
    "roti prata",
    "bak chor mee",
    "chilli crab",
    "satay",
    "kaya toast",
    "mee goreng",
    "hokkien mee",
    "fish soup",
    "carrot cake",
    "mee siam",
    "prawn mee",
    "chwee kueh",
)
TIMES = (
    "on Sunday",
    "tomorrow night",
    "next month",
    "this evening",
    "on Thursday",
    "after lunch",
    "this Saturday",
    "next Friday",
    "tomorrow",
    "tonight",
    "on Monday",
    "this weekend",
    "later",
    "on Saturday",
    "next week",
    "after work",
    "this afternoon",
    "on Friday night",
    "tomorrow morning",
    "later tonight",
)

# (singlish, standard) with {n} name, {p} place, {f} food, {t} time
PAIRS: tuple[tuple[str, str], ...] = (
    (
        "{n} say {t} want to eat {f} at {p}, you come or not?",
        "{n} said they want to eat {f} at {p} {t}; are you coming?",
    ),
    (
        "Aiyah {n}, the {f} at {p} sold out already lor.",
        "{n}, the {f} at {p} has already sold out.",
    ),
    (
        "{t} I belanja you {f}, don't say I never treat ah.",
        "I will treat you to {f} {t}; don't say I never treat you.",
    ),
    ("Wah {n} so atas, {t} go {p} for dinner.", "{n} is so fancy, going to {p} for dinner {t}."),
    (
        "Ownself check lah, {n}, the {f} got egg or not.",
        "{n}, please check for yourself whether the {f} has egg in it.",
    ),
    ("Walao, {p} the {f} cost so much now ah?", "Wow, does the {f} at {p} cost that much now?"),
    ("{n} lobang got cheap {f} near {p} one.", "{n} knows a place near {p} with cheap {f}."),
    (
        "Confirm {t} {p} got crowd one, go early can.",
        "There will definitely be a crowd at {p} {t}, so we should go early.",
    ),
    ("Eh {n}, you still owe me money for the {f} leh.", "{n}, you still owe me money for the {f}."),
    (
        "Sibei sian, {t} still need to go {p} for work.",
        "It is very tiring that I still need to go to {p} for work {t}.",
    ),
    (
        "{n} shiok already, got the last packet of {f}.",
        "{n} is delighted to have gotten the last packet of {f}.",
    ),
    (
        "Then how? {n} never book table at {p} {t}.",
        "What now? {n} did not book a table at {p} for {t}.",
    ),
    (
        "I tell you ah, {f} from {p} best one, no need argue.",
        "Believe me, the {f} from {p} is the best; there is no need to argue.",
    ),
    (
        "{t} {n} want to jalan jalan around {p}, you follow?",
        "{n} wants to take a stroll around {p} {t}; will you join?",
    ),
    ("Eh {n}, {t} go makan {f} at {p} can or not?", "{n}, can we go and eat {f} at {p} {t}?"),
    ("Alamak, I forgot to bring wallet to {p} lah!", "Oh no, I forgot to bring my wallet to {p}!"),
    ("Wah, this {f} damn shiok sia!", "Wow, this {f} is really delicious!"),
    ("Paiseh ah {n}, I late already.", "Sorry, {n}, I am running late."),
    ("{n} go {p} bo jio me one!", "{n} went to {p} without inviting me!"),
    ("Go {p} early early, chope seat first lah.", "Go to {p} early and reserve a seat first."),
    (
        "Auntie, one {f} tabao, no chilli hor.",
        "Excuse me, one {f} to take away, without chilli, please.",
    ),
    ("{t} got rain or not ah?", "Will it rain {t}?"),
    (
        "The queue for {f} at {p} so long, jialat!",
        "The queue for {f} at {p} is very long; it is terrible.",
    ),
    (
        "Don't so kiasu lah, {n}, got enough for everyone one.",
        "Do not be so anxious about missing out, {n}; there is enough for everyone.",
    ),
    ("{n} very blur one, always never listen.", "{n} is often confused and never pays attention."),
    (
        "Steady lah {n}, you settle everything already!",
        "Well done, {n}, you have taken care of everything!",
    ),
    ("Die die must try the {f} at {p}!", "You absolutely must try the {f} at {p}!"),
    (
        "Wah lau, MRT to {p} break down again, sian.",
        "The train to {p} has broken down again; how frustrating.",
    ),
    (
        "Just agak agak put the salt in the {f} can already.",
        "Just add the salt to the {f} by estimation; that is fine.",
    ),
    ("I kena scolded by my boss at {p} just now sia.", "My boss scolded me at {p} just now."),
    ("{n}, on or not? {t} makan {f}.", "{n}, are you in? Let's eat {f} {t}."),
    ("Aiyo {n}, why you siam me like that?", "{n}, why are you avoiding me like that?"),
    ("You sure or not {n}? Cannot be lah.", "Are you sure, {n}? That cannot be right."),
    ("{n} say {t} cannot come liao.", "{n} said that they cannot come {t}."),
    (
        "Where got so expensive? {f} here cheap cheap only.",
        "It is not that expensive; the {f} here is quite cheap.",
    ),
    ("Got people sitting here at {p} or not?", "Is anyone sitting here at {p}?"),
    (
        "Later we meet at {p} lor, easier for everybody.",
        "Let us meet at {p} later, since that is easier for everyone.",
    ),
    (
        "The {f} here not bad leh, but {p} one nicer.",
        "The {f} here is pretty good, but the one at {p} tastes better.",
    ),
    (
        "Why {n} so like that? Say already never do.",
        "Why did {n} behave like that? They said they would do it but did not.",
    ),
    ("Really meh? I thought {n} go {p} already.", "Really? I thought {n} had already gone to {p}."),
    (
        "Can help me tabao {f} or not? Paiseh hor.",
        "Could you buy {f} for me to take away? Sorry for the trouble.",
    ),
    (
        "This one confirm plus chop lah, {t} sure can finish.",
        "This is certain; it will definitely be finished {t}.",
    ),
    ("Eh, don't play play ah, {n}.", "{n}, please take this seriously."),
    ("So hot today, I want go {p} lepak.", "It is very hot today; I want to go and relax at {p}."),
    ("Confirm on ah, {t} we go eat {f} at {p}!", "It is confirmed: we will have {f} at {p} {t}!"),
    ("Cannot tahan the crowd at {p} sia.", "I cannot stand the crowd at {p}."),
    (
        "My phone spoil already, {t} how to call you?",
        "My phone is broken, so how can I call you {t}?",
    ),
    (
        "{n} so kaypoh, always ask other people business.",
        "{n} is very nosy and always asks about other people's business.",
    ),
    (
        "Wait ah, I go ask {n} first then tell you.",
        "Please wait; I will ask {n} first and then let you know.",
    ),
    ("Act blur also got limit lah, {n}.", "{n}, there is a limit to pretending not to know."),
)


def make(draw: Draw) -> Record:
    singlish, standard = draw.template("pair", PAIRS)
    slots = {
        "n": draw.value("name", NAMES),
        "p": draw.value("place", PLACES),
        "f": draw.value("food", FOODS),
        "t": draw.value("time", TIMES),
    }
    raw, label = singlish.format(**slots), standard.format(**slots)
    facts = tuple(v for k, v in slots.items() if "{" + k + "}" in standard)
    return draw.record(raw[0].upper() + raw[1:], label[0].upper() + label[1:], facts=facts)
