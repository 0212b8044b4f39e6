"""Sentiment neutralization: emotionally charged text -> the same facts in a neutral tone.

A record is an optional charged opener (dropped on the neutral side), a core complaint over
the product, issue and duration slots, and an optional demand with its neutral request. Every
pool is split between the parts (``common.Draw``): a test complaint is phrased by templates and
about products, issues and durations that no training record uses.
"""

from __future__ import annotations

from training.datasets.common import Draw, Record

CARD = (
    "sentiment_neutralization: a charged opener, a core complaint and a demand, each from its "
    "own pool of templates, over shared slots (product, issue, duration); the neutral side "
    "drops the opener and states the same facts and request plainly. Templates and slot "
    "values of the test part are used by no training record."
)

OPENERS = (
    "I am FURIOUS.",
    "Unbelievable!",
    "This is absolutely RIDICULOUS!",
    "What a total disaster!",
    "I have NEVER been so disappointed in my life.",
    "Seriously, what is WRONG with you people!",
    "Worst company EVER!",
    "I'm sick and tired of this.",
    "Absolutely disgraceful!",
    "You have got to be kidding me!",
    "Honestly, I am beyond livid.",
    "Shame on you!",
)
#: (charged, neutral) over {p} product, {i} issue, {d} duration.
CORES = (
    (
        "My {p} {i} after only {d}. ONLY {d}!!! What kind of junk are you people selling?",
        "The {p} {i} after {d}.",
    ),
    (
        "Brilliant job, really. Mine {i} {d} after I paid for this {p}. Just brilliant.",
        "My {p} {i} {d} after purchase.",
    ),
    (
        "Roughly {d} ago this pathetic {p} of yours {i}, and NOBODY seems to care!",
        "About {d} ago, the {p} {i}.",
    ),
    (
        "Are you KIDDING me? The {p} I own {i}. Seriously, how is that even possible?!",
        "I am writing because my {p} {i}.",
    ),
    (
        "I paid good money for this {p} {d} ago and guess what? It {i}. Wonderful.",
        "I purchased this {p} {d} ago, but it {i}.",
    ),
    (
        "Of COURSE the {p} I ordered {i}. Why would anything from you clowns ever work?",
        "Unfortunately, the {p} I ordered {i}.",
    ),
    (
        "Not even {d} after delivery and your worthless {p} {i}!!!",
        "Within {d} of delivery, the {p} {i}.",
    ),
    (
        "Congratulations, geniuses: yet another {p} that {i}. Absolutely TERRIBLE quality control.",
        "I would like to report that the {p} {i}.",
    ),
    (
        "That {p} from my last order {i} -- what a complete and utter joke.",
        "The {p} from my recent order {i}.",
    ),
    ("Barely {d} of normal use and our {p} {i}. HOW?!", "After {d} of normal use, our {p} {i}."),
    (
        (
            "Wow, just wow. Your precious {p} {i}, and apparently that's totally fine with your "
            "company?!"
        ),
        "I have noticed that my {p} {i}.",
    ),
    (
        "I've put up with this ridiculous {p} for {d}, and NOW it {i}. UNREAL.",
        "I have had the {p} for {d}; it {i}.",
    ),
    (
        "This {p} {i} practically the moment I set it up. Thanks for NOTHING.",
        "This {p} {i} shortly after it was set up.",
    ),
    (
        "It's been {d} since your so-called premium {p} {i} and I'm STILL waiting!!",
        "It has been {d} since the {p} {i}.",
    ),
    (
        "Great, just great. The {p} you shipped me {i}. Do you even test this stuff?",
        "The {p} that was delivered to me {i}.",
    ),
    (
        "Hello?? Is ANYONE there? Somehow this {p} {i} and support keeps ignoring me!",
        "I am contacting support because this {p} {i}.",
    ),
    (
        "For the record, my {p} {i} within {d}. Within {d}! Pathetic.",
        "For your records, my {p} {i} within {d}.",
    ),
    (
        "And the REPLACEMENT {p}? That one {i} too. Unbelievable incompetence.",
        "The replacement {p} {i} as well.",
    ),
    (
        "Do you people even care that our {p} {i}? Because it sure doesn't look like it.",
        "Please note that our {p} {i}.",
    ),
    (
        "Earlier this month your useless {p} {i}, and I am DONE being patient.",
        "Earlier this month, the {p} {i}.",
    ),
)
#: (charged, neutral) demands; some complaints close without one.
CLOSERS = (
    ("I want my money back NOW!", "I would like a refund."),
    ("Fix it or I'm leaving a one-star review!!", "Please fix the problem."),
    ("Send me a replacement IMMEDIATELY!", "Please send a replacement."),
    ("I expect a full refund, and I expect it TODAY.", "I am requesting a full refund."),
    ("Never buying from you again!", "I will not be ordering from this company again."),
    (
        "Someone call me back or I'm going straight to my bank!",
        "Please contact me to resolve this.",
    ),
    ("Don't you DARE ignore this email.", "I look forward to your reply."),
    ("My lawyer will be hearing about this!", "I may pursue this further if it is not resolved."),
    ("Sort it out, for heaven's sake!", "Please look into this."),
    ("I demand to speak to a manager!", "I would like to speak with a manager."),
)
PRODUCTS = (
    "phone",
    "laptop",
    "washing machine",
    "smart watch",
    "coffee maker",
    "vacuum cleaner",
    "blender",
    "printer",
    "tablet",
    "microwave",
    "air fryer",
    "television",
    "router",
    "electric kettle",
    "hair dryer",
    "dishwasher",
    "headset",
    "toaster",
    "space heater",
    "fridge",
    "camera",
    "desk lamp",
    "rice cooker",
    "game console",
)
ISSUES = (
    "stopped working",
    "arrived damaged",
    "never turned on",
    "broke",
    "started leaking",
    "kept shutting off",
    "arrived with missing parts",
    "made a loud rattling noise",
    "fell apart",
    "stopped responding",
    "arrived scratched",
    "overheated",
    "failed completely",
    "turned out to be the wrong model",
    "gave off a burning smell",
    "kept showing an error",
    "lost power repeatedly",
    "cracked down the side",
)
DURATIONS = (
    "two days",
    "a week",
    "three weeks",
    "ten days",
    "a month",
    "five days",
    "two weeks",
    "a few days",
    "four days",
    "six weeks",
)


def make(draw: Draw) -> Record:
    opener = draw.template("opener", OPENERS) if draw.rng.random() < 0.6 else ""
    charged, neutral = draw.template("core", CORES)
    demand, request = draw.template("closer", CLOSERS) if draw.rng.random() < 0.8 else ("", "")
    slots = {
        "p": draw.value("product", PRODUCTS),
        "i": draw.value("issue", ISSUES),
        "d": draw.value("duration", DURATIONS),
    }
    raw = " ".join(x for x in (opener, charged.format(**slots), demand) if x)
    label = " ".join(x for x in (neutral.format(**slots), request) if x)
    facts = tuple(v for k, v in slots.items() if "{" + k + "}" in neutral)
    return draw.record(raw, label[0].upper() + label[1:], facts=facts)
