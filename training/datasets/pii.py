"""PII redaction: names, emails, phone numbers, addresses and ID numbers -> typed placeholders.

Sentences are built from templates with typed slots; the label is the same sentence with
each slot replaced by its placeholder. The record's note lists the values, so that the
evaluation can count leaks (a value that survives into the output, whatever its grouping).

The values come from ``faker`` (pinned: its output is part of the dataset's identity) across
the locales in ``LOCALES``, so names, phone formats, addresses and national ID shapes vary the
way a real ticket queue's do, and a value hashes into one part only (``Draw.fresh``).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from functools import cache
from typing import TYPE_CHECKING

from training.datasets.common import Draw, Record

if TYPE_CHECKING:
    from faker import Faker

CARD = (
    "pii_redaction: synthetic customer-service sentences with typed slots for names, emails, "
    "phone numbers and street addresses in the formats of twelve locales (faker), and ID "
    "numbers shaped as US SSNs, UK NI, French INSEE, Italian codice fiscale, Brazilian CPF, "
    "Dutch BSN, Canadian SIN and Singapore NRIC numbers; none real. "
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

# Non-personal slots: they stay in the label, so labels vary beyond the template.
ITEMS = (
    "the invoice",
    "the refund",
    "the replacement part",
    "the order",
    "the parcel",
    "the subscription renewal",
    "the warranty claim",
    "the credit note",
    "the delivery",
    "the account statement",
    "the booking",
    "the repair quote",
    "the loyalty points",
    "the gift card",
    "the cancellation request",
    "the membership card",
)
#: Days and times that read right in the past and the future ("left Monday", "visit Monday").
DAYS = (
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
    "today",
    "this morning",
    "this afternoon",
    "this evening",
    "at noon",
)

TEMPLATES = (
    "Please update the account of {name}; the new email is {email}.",
    "Ticket: caller {name} ({phone}) disputes {item}.",
    "{name} called {day} asking why {item} has not arrived at {address}.",
    "Hi team, customer {name} wants {item} resent to {email} instead of the old inbox.",
    "CRM note: verified identity using national ID {id} before discussing {item}.",
    "{email} got in touch {day} to complain that {item} was charged twice.",
    (
        "Call log, {day}: spoke with {name}, confirmed delivery address {address}, callback "
        "number {phone}."
    ),
    (
        "Dear {name}, we have received your request regarding {item} and will reply to {email} "
        "within two working days."
    ),
    (
        "Customer requests that all future correspondence go to {address} rather than the "
        "billing address on file."
    ),
    "Refund approved for {name}. Identity checked against {id}.",
    "Chat transcript: 'Hi, my number changed to {phone}, can you update it?'",
    "{phone} rang twice {day} but hung up before the agent could help.",
    "Escalation: {name} (ID {id}) threatens to cancel unless {item} is sorted out {day}.",
    "Agent reminder: send {item} to {name} at {email} and log the outcome.",
    "Can someone check why the courier keeps leaving parcels for {name} at {address}?",
    "Identity verification failed for {id}; the caller could not confirm the phone number {phone}.",
    "Hello, this is {name}. I moved to {address} last month, please change my records.",
    "Internal note: do not contact {name} on {phone} after six in the evening.",
    "{name} <{email}> replied: thanks, {item} looks correct now.",
    "Please merge the duplicate profiles for {name}; one uses {email}, the other {phone}.",
    "Voicemail left {day} by {name}, requesting a call back about {item} on {phone}.",
    "Delivery exception: nobody home at {address}. Customer contact {phone}.",
    (
        "The warranty claim lodged by {name} lists the national ID {id} and the home address "
        "{address}."
    ),
    "Hi, I never received {item}. You can reach me at {email} or {phone}. Regards, {name}",
    "{address} is the shipping destination on file, but {name} says it is outdated.",
    "Complaint summary: customer (ID {id}) unhappy with {item}; follow up {day}.",
    "Subject: email change for {name}. Replace the old one with {email}.",
    "Logged {day}: {name} confirmed the last four digits of their card and asked about {item}.",
    "Our records show {name} living at {address}, with {phone} as the preferred contact.",
    "Spoke to {name} re {item}; promised an update {day} via email to {email}.",
    "Fraud team: the ID number {id} was used to open two accounts, one registered to {email}.",
    "Could you confirm whether {email} is still the right address to send {item} to?",
    "{name} has asked us to remove {phone} from the marketing list.",
    "Account holder {name}, identification {id}, requested closure of the account effective {day}.",
    "Reminder: {name} at {address} is expecting a technician visit {day}.",
    "Incoming chat from {email}: 'Where is {item}? I paid for express shipping.'",
    "Note to billing: {item} should be addressed to {name}, {address}, not to the head office.",
    "Please ring {phone} and ask for {name}; they are waiting on {item}.",
    "The applicant, {name}, submitted ID {id} together with proof of residence showing {address}.",
    "{id} belongs to a customer who called about {item} {day}; details passed to compliance.",
    "Thank you for contacting support, {name}. A confirmation has been sent to {email}.",
    "Order placed by {name}, ship to {address}, contact {phone}, email {email}.",
    "Survey response: {name} rated the service poorly because {item} arrived damaged.",
    "Hey, it's {name} again, still no word on {item}. My mobile is {phone} if that's easier.",
    "Returned mail: the letter sent to {name} at {address} bounced back {day}.",
)

#: Latin-script locales whose names, phone numbers, addresses and ID formats the values take.
LOCALES = (
    "en_US",
    "en_GB",
    "en_IN",
    "en_AU",
    "en_CA",
    "es_ES",
    "fr_FR",
    "de_DE",
    "it_IT",
    "pt_BR",
    "nl_NL",
    "id_ID",
)


@cache
def _faker(locale: str) -> Faker:
    from faker import Faker

    return Faker(locale)


def _fake(rng: random.Random) -> Faker:
    """A locale's faker, seeded from the record's stream: the same split every run."""
    fake = _faker(LOCALES[rng.randrange(len(LOCALES))])
    fake.seed_instance(rng.getrandbits(32))
    return fake


def _nric(rng: random.Random) -> str:
    """A Singapore NRIC/FIN shape (faker has no such provider); the check letter is random."""
    prefix, check = "STFG"[rng.randrange(4)], "ABCDEFGHIZJ"[rng.randrange(11)]
    return f"{prefix}{rng.randint(1000000, 9999999)}{check}"


def _id(rng: random.Random) -> str:
    return _nric(rng) if rng.random() < 0.25 else _fake(rng).ssn()


def _name(rng: random.Random) -> str:
    """A first and last name; faker's nl_NL writes some surnames inverted ("Bourgondië, van")."""
    while True:
        fake = _fake(rng)
        name = f"{fake.first_name()} {fake.last_name()}"
        if "," not in name:
            return name


def _clean(produce: Callable[[random.Random], str]) -> Callable[[random.Random], str]:
    """One line, single spaces: es_ES addresses end in a space, some locales' hold a newline."""
    return lambda rng: " ".join(produce(rng).replace("\n", ", ").split())


PRODUCERS: dict[str, Callable[[random.Random], str]] = {
    "name": _name,
    "email": _clean(lambda rng: _fake(rng).email()),
    "phone": _clean(lambda rng: _fake(rng).phone_number()),
    "address": _clean(lambda rng: _fake(rng).street_address()),
    "id": _clean(_id),
}


def make(draw: Draw) -> Record:
    template = draw.template("template", TEMPLATES)
    values = {
        k: draw.fresh(k, produce) for k, produce in PRODUCERS.items() if "{" + k + "}" in template
    }
    plain = {
        k: draw.value(k, options)
        for k, options in (("item", ITEMS), ("day", DAYS))
        if "{" + k + "}" in template
    }
    raw = template.format(**values, **plain)
    label = template.format(**PLACEHOLDERS, **plain)
    return draw.record(
        raw,
        label,
        note=json.dumps(values, sort_keys=True),
        facts=tuple(plain.values()),
    )
