"""Sales dialogue -> JSON record that satisfies ``SCHEMA``.

A dialogue is five turns (opening, need, price, stage, follow-up), each drawn from its own pool
of phrasings, between speakers drawn from a pool of labels; the price is written in one of
several number and currency formats. The label is the canonical JSON (sorted keys, no
spaces) of the fields, so exact match is meaningful. Every pool is split between the parts
(``common.Draw``): a test dialogue is phrased, formatted and populated (companies, products)
by pools no training record uses, so no fixed pattern learned from training solves it.
"""

from __future__ import annotations

import json

from training.datasets.common import Draw, Record

CARD = (
    "sales_json: synthetic sales dialogues (opening, need, price, stage, follow-up), each turn "
    "from its own pool of phrasings, between varied speaker labels, with prices in several "
    "number and currency formats; every field of SCHEMA is stated in the dialogue; the label "
    "is the canonical JSON of those fields (sorted keys, compact separators) and validates "
    "against SCHEMA. Phrasings, formats, companies and products of the test part are used by "
    "no training record."
)

STAGES = ("prospect", "negotiation", "closed_won", "closed_lost")
CURRENCIES = ("USD", "SGD", "EUR")

SCHEMA: dict = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "additionalProperties": False,
    "required": ["customer", "product", "quantity", "unit_price", "currency", "stage", "follow_up"],
    "properties": {
        "customer": {"type": "string", "minLength": 1},
        "product": {"type": "string", "minLength": 1},
        "quantity": {"type": "integer", "minimum": 1},
        "unit_price": {"type": "number", "minimum": 0},
        "currency": {"enum": list(CURRENCIES)},
        "stage": {"enum": list(STAGES)},
        "follow_up": {"type": "boolean"},
    },
}

COMPANIES = (
    "Lion City Foods",
    "Orchid Labs",
    "Merlion Logistics",
    "Tanjong Pagar Trading",
    "Bukit Timah Textiles",
    "Raffles Bay Consulting",
    "Jurong Steelworks",
    "Sakura Design Studio",
    "Golden Lotus Catering",
    "Kampong Fresh Produce",
    "Harbourfront Media",
    "Straits Engineering",
    "Marina Crest Energy",
    "Jade Dragon Imports",
    "Seoul Bridge Electronics",
    "Bangkok Spice Trading",
    "Manila Bay Shipping",
    "Hanoi Silkworks",
    "Kowloon Print House",
    "Northwind Analytics",
    "Bluefin Robotics",
    "Maple Leaf Dental",
    "Cedar Ridge Builders",
    "Silver Birch Software",
    "Redwood Clinics",
    "Pinnacle Peak Fitness",
    "Blue Heron Hotels",
    "Copperfield Legal",
    "Ironbark Mining",
    "Sunrise Bakery Group",
    "Evergreen Pharmacy",
    "Nimbus Cloud Services",
    "Peranakan Home Decor",
    "Kaya Toast Cafe",
    "Sentosa Leisure Group",
    "Chinatown Herbal Co",
)
PRODUCTS = (
    "laptops",
    "office chairs",
    "barcode scanners",
    "cloud credits",
    "standing desks",
    "laser printers",
    "monitors",
    "wireless headsets",
    "tablets",
    "safety helmets",
    "conference phones",
    "ergonomic keyboards",
    "projectors",
    "network switches",
    "security cameras",
    "delivery vans",
    "software licenses",
    "cleaning kits",
    "coffee machines",
    "water dispensers",
    "filing cabinets",
    "point-of-sale terminals",
    "solar panels",
    "first aid kits",
    "whiteboards",
    "label printers",
    "docking stations",
    "desk lamps",
    "external hard drives",
    "storage racks",
)
#: (rep, customer) speaker labels.
SPEAKERS = (
    ("Rep", "Customer"),
    ("Sales", "Buyer"),
    ("Agent", "Client"),
    ("Maya (sales)", "Daniel"),
    ("Wei Ling", "Arjun"),
    ("Account Manager", "Procurement"),
    ("Priya", "Tom"),
    ("Vendor", "Purchaser"),
)
#: Turns over {rep}, {cust} and the fields they state.
OPENINGS = (
    "{rep}: Hello, this is the sales desk. Am I speaking with {customer}? {cust}: Yes, speaking.",
    "{cust}: Hi, I'm calling on behalf of {customer}.",
    (
        "{rep}: Good morning, thanks for reaching out to us. Which company are you with? "
        "{cust}: {customer}."
    ),
    "{cust}: Hey there, it's the purchasing team from {customer}.",
    (
        "{rep}: Thanks for taking my call today. I understand you handle procurement at "
        "{customer}? {cust}: That's me."
    ),
    "{cust}: Hello, my manager at {customer} asked me to get in touch with your team.",
    (
        "{rep}: Welcome back! It's great to hear from {customer} again. {cust}: Likewise, good "
        "to talk."
    ),
    "{cust}: Good afternoon. I represent {customer} and we found your catalogue online.",
    (
        "{rep}: Hi, I'm following up on the enquiry {customer} submitted through our website. "
        "{cust}: Yes, that was us."
    ),
    "{cust}: Hi, this is the office administrator over at {customer}.",
    (
        "{rep}: Before we start, could you confirm the name of your organisation? {cust}: Sure, "
        "it's {customer}."
    ),
    "{cust}: Morning! {customer} is looking to place an order with you.",
)
NEEDS = (
    "{cust}: We need {quantity} {product}.",
    "{rep}: So that's {quantity} {product} for you, correct? {cust}: That's right.",
    "{cust}: We're after roughly {quantity} {product} for the new office.",
    "{rep}: How many units are you looking at? {cust}: About {quantity} {product}.",
    "{cust}: Our team would like to order {quantity} {product} this quarter.",
    "{rep}: What can I help you with today? {cust}: I'd like a quote on {quantity} {product}.",
    "{cust}: The requirement is {quantity} {product}, all delivered to one site.",
    "{rep}: Just to confirm the volume: {quantity} {product}? {cust}: Yes, exactly.",
    "{cust}: We are expanding and will be needing {quantity} {product} in total.",
    "{rep}: Let me note that down, {quantity} {product}. {cust}: Correct.",
    "{cust}: Could you supply {quantity} {product} to us?",
    (
        "{rep}: You mentioned wanting {quantity} {product}, is that still the plan? {cust}: "
        "Yes, it is."
    ),
)
PRICES = (
    "{rep}: Those are {price} each.",
    "{cust}: What's the unit price? {rep}: {price} per unit.",
    "{rep}: For that model we charge {price} apiece.",
    "{cust}: How much does a single one cost? {rep}: It comes to {price} per item.",
    "{rep}: Our list rate is {price} for each unit.",
    "{cust}: Remind me of the per-unit cost again? {rep}: Sure, {price}.",
    "{rep}: Pricing works out at {price} a piece, before tax.",
    "{cust}: So each one would be {price}? {rep}: Correct, that's the price of one unit.",
    "{rep}: I can quote you {price} per unit on those.",
    (
        "{cust}: Your website lists them at {price} each, is that current? {rep}: Yes, that's "
        "still the unit price."
    ),
    "{rep}: Every individual unit is billed at {price}.",
    "{cust}: And what would one unit set us back? {rep}: {price}, individually priced.",
)
STAGE_LINES: dict[str, tuple[str, ...]] = {
    "prospect": (
        "{cust}: We're just exploring options at this stage, nothing decided yet.",
        "{cust}: Honestly, we're only gathering quotes from a few suppliers for now.",
        (
            "{rep}: So you're still in the early research phase? {cust}: Yes, just comparing "
            "what's out there."
        ),
        "{cust}: This is a preliminary enquiry; we haven't committed to buying anything.",
        "{cust}: I'm putting together a shortlist of vendors to present to my boss next month.",
        (
            "{rep}: No pressure at all, feel free to take the information and think it over. "
            "{cust}: Thanks, we're only browsing right now."
        ),
    ),
    "negotiation": (
        "{cust}: We're close to a decision, but we need to agree on the payment terms first.",
        "{cust}: If you can offer a better discount, I think we can make this work.",
        (
            "{rep}: It sounds like we're nearly there; what would it take to finalize? {cust}: "
            "A little flexibility on price and delivery."
        ),
        (
            "{cust}: We like the proposal, though legal still wants to revise a couple of "
            "clauses before we commit."
        ),
        (
            "{rep}: I can check with my manager about a volume discount. {cust}: Please do, "
            "that's the last sticking point."
        ),
        "{cust}: We're keen to move ahead once we settle the warranty terms and the discount.",
    ),
    "closed_won": (
        "{cust}: Great, we'll go ahead. I'm signing the agreement today.",
        "{cust}: Our purchase order is on its way to you this afternoon.",
        "{rep}: So we have a deal? {cust}: Yes, consider it done.",
        "{cust}: Management has approved the purchase, so we're placing the order now.",
        (
            "{rep}: Thanks for signing, the order is confirmed on our side. {cust}: Wonderful, "
            "looking forward to delivery."
        ),
        "{cust}: You've won our business; the PO has been issued.",
    ),
    "closed_lost": (
        "{cust}: Sorry, we've decided to go with another vendor.",
        "{cust}: Unfortunately our budget was cut, so we won't be proceeding.",
        (
            "{rep}: Is there anything we could change to win you back? {cust}: I'm afraid not, "
            "the decision is final and we're not moving forward."
        ),
        "{cust}: We chose a competitor who offered a lower price, so we'll pass this time.",
        "{cust}: The project has been cancelled internally, so we no longer need the order.",
        (
            "{rep}: I understand you've gone with a different supplier. {cust}: Yes, that's "
            "correct, we're taking our business elsewhere."
        ),
    ),
}
FOLLOW_UP = (
    "{rep}: I'll give you a call next week to check in.",
    "{rep}: I'll send the contract on Thursday and call you afterwards to go through it.",
    "{rep}: Let me schedule a follow-up meeting for Monday morning. {cust}: Sounds good.",
    "{rep}: I'll email a revised quote tomorrow and ring you on Friday to discuss.",
    "{cust}: Can you get back to me? {rep}: Absolutely, I'll follow up by the end of the week.",
    "{rep}: I've put a reminder in my calendar to reach out to you again in two weeks.",
    "{rep}: Expect a call from me after your board meeting so we can pick this up again.",
    "{rep}: I'll touch base with you next Tuesday once you've reviewed the samples.",
)
NO_FOLLOW_UP = (
    "{rep}: Understood, there's nothing further needed from our side.",
    "{cust}: No need to follow up, we'll reach out if anything changes. {rep}: Noted.",
    "{rep}: Thanks for your time; I won't be contacting you again about this.",
    "{rep}: That wraps everything up, no more calls required.",
    "{cust}: Please don't schedule any more meetings. {rep}: Of course, I'll close the file.",
    "{rep}: I'll mark this as complete; no follow-up is planned.",
    "{cust}: We're all set, there's nothing left to discuss. {rep}: Great, then we're done here.",
    "{rep}: No further action is required on either side, so I'll leave it there.",
)

#: How a currency is written: (symbol, code, words).
MONEY = {
    "USD": ("US$", "USD", "US dollars"),
    "SGD": ("S$", "SGD", "Singapore dollars"),
    "EUR": ("€", "EUR", "euros"),
}
#: Price formats: how the amount and its currency are written, and whether cents are given
#: (without cents the price is a whole number, so the label equals what is said).
PRICE_FORMATS = (
    ("{symbol}{amount:,.2f}", True),
    ("{code} {amount:,.2f}", True),
    ("{amount:.2f} {code}", True),
    ("{amount:,.0f} {words}", False),
    ("{symbol}{amount:.0f}", False),
    ("{code}{amount:,.2f}", True),
    ("{amount:,.2f} {words}", True),
    ("{code} {amount:.0f}", False),
)
#: Quantity formats: digits, with a thousands separator, "N units of", "a total of N"...
QUANTITY_FORMATS = (
    "{q}",
    "{q:,}",
    "{q} units of",
    "a total of {q}",
    "{q} pieces of",
    "{q:,} units of",
)


def make(draw: Draw) -> Record:
    rng = draw.rng
    whole = draw.template("price-format", PRICE_FORMATS)
    price_format, cents = whole
    currency = CURRENCIES[rng.randrange(len(CURRENCIES))]
    fields = {
        "customer": draw.value("company", COMPANIES),
        "product": draw.value("product", PRODUCTS),
        "quantity": rng.choice((rng.randint(2, 60), rng.randint(2, 500), rng.randint(500, 5000))),
        # A price said without cents is a whole number in the label too (1711, not 1711.0).
        "unit_price": round(rng.uniform(5, 2500), 2) if cents else rng.randint(5, 2500),
        "currency": currency,
        "stage": STAGES[rng.randrange(len(STAGES))],
    }
    # A lost deal is not followed up ("I'll send the contract" would contradict it).
    fields["follow_up"] = fields["stage"] != "closed_lost" and rng.random() < 0.5
    symbol, code, words = MONEY[currency]
    price = price_format.format(amount=fields["unit_price"], symbol=symbol, code=code, words=words)
    quantity = draw.template("quantity-format", QUANTITY_FORMATS).format(q=fields["quantity"])
    rep, cust = draw.template("speakers", SPEAKERS)
    turns = (
        draw.template("opening", OPENINGS),
        draw.template("need", NEEDS),
        draw.template("price", PRICES),
        draw.template(f"stage-{fields['stage']}", STAGE_LINES[str(fields["stage"])]),
        draw.template("follow-up", FOLLOW_UP)
        if fields["follow_up"]
        else draw.template("no-follow-up", NO_FOLLOW_UP),
    )
    values = {
        "rep": rep,
        "cust": cust,
        "customer": fields["customer"],
        "quantity": quantity,
        "product": fields["product"],
        "price": price,
    }
    draw.slots.extend((rep, cust, quantity, price))
    raw = "\n".join(turn.format(**values) for turn in turns)
    label = json.dumps(fields, sort_keys=True, separators=(",", ":"))
    facts = (fields["customer"], fields["product"], str(fields["quantity"]), currency)
    return draw.record(raw, label, note=f"stage={fields['stage']}", facts=facts)
