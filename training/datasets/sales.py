"""Sales dialogue -> JSON record that satisfies ``SCHEMA``.

A dialogue is assembled from rep/customer turn templates carrying the fields; the label is
the canonical JSON (sorted keys, no spaces) of those fields, so exact match is meaningful.
"""

from __future__ import annotations

import json
import random

from training.datasets.common import Record, pick

CARD = (
    "sales_json: synthetic two-party sales dialogues (rep and customer) built from turn "
    "templates; every field of SCHEMA is stated in the dialogue; the label is the canonical "
    "JSON of those fields (sorted keys, compact separators) and validates against SCHEMA."
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
    "Acme Corp",
    "Lion City Foods",
    "Northwind",
    "Blue Harbor",
    "Orchid Labs",
    "Tanjong Logistics",
    "Kopi Works",
    "Summit Retail",
    "Marina Health",
    "Delta Print",
    "Raffles Textiles",
    "Evergreen Farms",
    "Pioneer Steel",
    "Jade Pharma",
    "Vista Hotels",
)
PRODUCTS = (
    "laptops",
    "office chairs",
    "printer toner",
    "software licenses",
    "delivery vans",
    "coffee machines",
    "safety helmets",
    "monitors",
    "standing desks",
    "cloud credits",
    "barcode scanners",
    "air purifiers",
)

_STAGE_LINES = {
    "prospect": "Customer: We're just exploring options for now.",
    "negotiation": "Customer: We're close, but we need to agree on terms.",
    "closed_won": "Customer: Great, we'll sign the order today.",
    "closed_lost": "Customer: Sorry, we've decided to go with another vendor.",
}


def make(rng: random.Random) -> Record:
    fields = {
        "customer": pick(rng, COMPANIES),
        "product": pick(rng, PRODUCTS),
        "quantity": rng.randint(1, 500),
        "unit_price": round(rng.uniform(5, 2500), 2),
        "currency": pick(rng, CURRENCIES),
        "stage": pick(rng, STAGES),
        "follow_up": rng.random() < 0.5,
    }
    follow = (
        "Rep: I'll call you next week to follow up."
        if fields["follow_up"]
        else "Rep: No follow-up needed, thanks for your time."
    )
    raw = " ".join(
        [
            f"Rep: Hello, this is the sales desk. Am I speaking with {fields['customer']}?",
            f"Customer: Yes. We need {fields['quantity']} {fields['product']}.",
            f"Rep: Those are {fields['unit_price']:.2f} {fields['currency']} each.",
            _STAGE_LINES[fields["stage"]],
            follow,
        ]
    )
    label = json.dumps(fields, sort_keys=True, separators=(",", ":"))
    facts = (fields["customer"], fields["product"], str(fields["quantity"]), fields["currency"])
    return Record("sales_json", raw, label, note=f"stage={fields['stage']}", facts=facts)
