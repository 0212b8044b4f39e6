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
    "Quentin",
    "Rosa",
    "Suresh",
    "Tomas",
    "Umar",
    "Vera",
    "Wen Hui",
    "Xavier",
    "Yusuf",
    "Zara",
    "Amir",
    "Beatrice",
    "Carlos",
    "Deepa",
    "Elena",
    "Faisal",
)
LAST = (
    "Tan",
    "Lim",
    "Wong",
    "Kumar",
    "Rahman",
    "Smith",
    "Garcia",
    "Ng",
    "Lee",
    "Ong",
    "Chua",
    "Fernandez",
    "Nair",
    "Okafor",
    "Petrov",
    "Haddad",
    "Teo",
    "Yeo",
    "Novak",
    "Silva",
)
STREETS = (
    "Orchard Road",
    "Jalan Besar",
    "Bukit Timah Road",
    "Main Street",
    "Clementi Ave 3",
    "Serangoon Road",
    "Elm Street",
    "Holland Drive",
    "Tampines Street 21",
    "River Valley Road",
    "Oak Lane",
    "Sims Avenue",
)
DOMAINS = ("example.com", "mail.test", "corp.example", "inbox.test", "post.example")

# Non-personal slots: they stay in the label, so labels vary beyond the template.
ITEMS = (
    "the invoice",
    "the refund",
    "the parcel",
    "the warranty claim",
    "the contract",
    "the order",
    "the booking",
    "the replacement unit",
    "the membership card",
    "the quotation",
)
DAYS = (
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "next week",
    "tomorrow",
    "this afternoon",
)

TEMPLATES = (
    "Please update the account of {name}; the new email is {email}.",
    "Call {name} back at {phone} about {item}.",
    "{name} moved to {address} and can be reached at {phone}.",
    "Customer {name} with ID {id} asked for a copy of {item}.",
    "Send {item} to {email} and post a copy to {address}.",
    "Verify ID {id} before releasing {item} to {name}.",
    "Hi, I'm {name}, my number is {phone} and my email is {email}.",
    "The delivery for {name} at {address} was delayed until {day}.",
    "{name} (ID {id}) reported a problem with {item}; reply to {email}.",
    "Remind {name} on {day} that {item} is ready.",
    "{name} will collect {item} {day}; their phone is {phone}.",
    "Forward {item} to {email} by {day}, please.",
    "Our records show {name} at {address}.",
    "Escalate {item} for {name}, ID {id}, before {day}.",
    "Text {phone} when {item} ships.",
    "Mr {name} wants {item} sent to {address}.",
    "Can someone email {email} about {item} {day}?",
    "The technician visits {address} on {day} for {name}.",
    "New sign-up: {name}, {email}, {phone}.",
    "{name} called from {phone} to cancel {item}.",
    "Please confirm {item} with {name} at {email}.",
    "ID {id} belongs to {name}, who lives at {address}.",
)


def _values(rng: random.Random) -> dict[str, str]:
    first, last = pick(rng, FIRST), pick(rng, LAST)
    user = f"{first.lower().replace(' ', '')}{pick(rng, ('.', '_', ''))}{last.lower()}"
    unit = f"#{rng.randint(1, 30):02d}-{rng.randint(1, 200):02d}"
    phone = rng.choice(
        (
            f"+65 {rng.randint(8000, 9999)} {rng.randint(1000, 9999)}",
            f"{rng.randint(8000, 9999)}-{rng.randint(1000, 9999)}",
            f"+65-{rng.randint(80000000, 99999999)}",
        )
    )
    return {
        "name": f"{first} {last}",
        "email": f"{user}{rng.randint(1, 99)}@{pick(rng, DOMAINS)}",
        "phone": phone,
        "address": f"{rng.randint(1, 400)} {pick(rng, STREETS)} {unit}",
        "id": f"{pick(rng, 'STFG')}{rng.randint(1000000, 9999999)}{pick(rng, 'ABCDEFGHIZJ')}",
    }


def make(rng: random.Random) -> Record:
    template = pick(rng, TEMPLATES)
    values = _values(rng)
    plain = {"item": pick(rng, ITEMS), "day": pick(rng, DAYS)}
    raw = template.format(**values, **plain)
    label = template.format(**PLACEHOLDERS, **plain)
    label = label[0].upper() + label[1:]
    raw = raw[0].upper() + raw[1:]
    used = {k: v for k, v in values.items() if "{" + k + "}" in template}
    facts = tuple(v for k, v in plain.items() if "{" + k + "}" in template)
    return Record("pii_redaction", raw, label, note=json.dumps(used, sort_keys=True), facts=facts)
