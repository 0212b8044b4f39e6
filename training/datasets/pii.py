"""PII redaction: names, emails, phone numbers, addresses and ID numbers -> typed placeholders.

Sentences are built from templates with typed slots; the label is the same sentence with
each slot replaced by its placeholder. ``PII_VALUES`` on the record note lets the evaluation
count leaks (a PII value that survives into the output).
"""

from __future__ import annotations

import json
import random

from training.datasets.common import Record, pick

CARD = (
    "pii_redaction: synthetic customer-service sentences with typed slots for names, emails, "
    "phone numbers, street addresses and national ID numbers (NRIC/FIN-shaped, not real). "
    "The label replaces each value with [NAME], [EMAIL], [PHONE], [ADDRESS] or [ID]; the "
    "note lists the raw values so the evaluation can measure the leak rate."
)

PLACEHOLDERS = {
    "name": "[NAME]",
    "email": "[EMAIL]",
    "phone": "[PHONE]",
    "address": "[ADDRESS]",
    "id": "[ID]",
}
FIRST = (
    "Alice",
    "Bryan",
    "Chen",
    "Divya",
    "Ethan",
    "Farah",
    "Gopal",
    "Hannah",
    "Ivan",
    "Jasmine",
    "Kenji",
    "Lina",
    "Marcus",
    "Nurul",
    "Oscar",
    "Pei Shan",
)
LAST = ("Tan", "Lim", "Wong", "Kumar", "Rahman", "Smith", "Garcia", "Ng", "Lee", "Ong")
STREETS = (
    "Orchard Road",
    "Jalan Besar",
    "Bukit Timah Road",
    "Main Street",
    "Clementi Ave 3",
    "Serangoon Road",
    "Elm Street",
)
DOMAINS = ("example.com", "mail.test", "corp.example", "inbox.test")

TEMPLATES = (
    "Please update the account of {name}; the new email is {email}.",
    "Call {name} back at {phone} about the refund.",
    "{name} moved to {address} and can be reached at {phone}.",
    "Customer {name} with ID {id} asked for a copy of the invoice.",
    "Send the contract to {email} and post a copy to {address}.",
    "Verify ID {id} before releasing the parcel to {name}.",
    "Hi, I'm {name}, my number is {phone} and my email is {email}.",
    "The delivery for {name} at {address} was delayed.",
    "{name} (ID {id}) reported a billing error; reply to {email}.",
)


def _values(rng: random.Random) -> dict[str, str]:
    first, last = pick(rng, FIRST), pick(rng, LAST)
    user = f"{first.lower().replace(' ', '')}.{last.lower()}"
    unit = f"#{rng.randint(1, 30):02d}-{rng.randint(1, 200):02d}"
    return {
        "name": f"{first} {last}",
        "email": f"{user}{rng.randint(1, 99)}@{pick(rng, DOMAINS)}",
        "phone": f"+65 {rng.randint(8000, 9999)} {rng.randint(1000, 9999)}",
        "address": f"{rng.randint(1, 400)} {pick(rng, STREETS)} {unit}",
        "id": f"{pick(rng, 'STFG')}{rng.randint(1000000, 9999999)}{pick(rng, 'ABCDEFGHIZJ')}",
    }


def make(rng: random.Random) -> Record:
    template = pick(rng, TEMPLATES)
    values = _values(rng)
    raw = template.format(**values)
    label = template.format(**PLACEHOLDERS)
    used = {k: v for k, v in values.items() if "{" + k + "}" in template}
    return Record("pii_redaction", raw, label, note=json.dumps(used, sort_keys=True))
