"""Inputs the way users type them, for every built-in task: written by hand, produced by no
template, and used by no training or test split.

The generators' test parts hold out templates and slot values, yet a user's note or chat line
still differs from every template: free word order, stray abbreviations, typos, several facts
in one breath. The playground offers these first, the tour sends them, and
``benchmarks/natural.py`` scores the served adapters on them (facts kept, values leaked,
schema-valid records), through the router and through the OpenAI route with only a user turn.

Each record's label is a correct answer, and its facts are what any correct answer keeps.
"""

from __future__ import annotations

import json

from training.datasets.common import Record


def _pii(raw: str, label: str, **values: str) -> Record:
    return Record("pii_redaction", raw, label, note=json.dumps(values, sort_keys=True))


def _sales(raw: str, **fields: object) -> Record:
    label = json.dumps(fields, sort_keys=True, separators=(",", ":"))
    facts = (str(fields["customer"]), str(fields["product"]), str(fields["quantity"]))
    return Record("sales_json", raw, label, facts=facts)


NATURAL: dict[str, tuple[Record, ...]] = {
    "medical_shorthand": (
        Record(
            "medical_shorthand",
            "Pt c/o SOB, r/o PE.",
            "Patient complaining of shortness of breath; rule out pulmonary embolism.",
            facts=("shortness of breath", "rule out", "pulmonary embolism"),
        ),
        Record(
            "medical_shorthand",
            "F 72, brbpr since sat, also HA. vitals ok, will get cbc.",
            "A 72-year-old woman with bright red blood per rectum since Saturday, and a "
            "headache. Vital signs are normal; a complete blood count will be obtained.",
            facts=(
                "72",
                "bright red blood per rectum",
                "Saturday",
                "headache",
                "complete blood count",
            ),
        ),
        Record(
            "medical_shorthand",
            "68M w/ CP radiating to L arm x2h, hx HTN, DM2. ekg + trop stat.",
            "A 68-year-old male with chest pain radiating to the left arm for 2 hours, with a "
            "history of hypertension and type 2 diabetes mellitus. Electrocardiogram and "
            "troponin immediately.",
            facts=(
                "68-year-old",
                "male",
                "chest pain",
                "2 hours",
                "hypertension",
                "type 2 diabetes mellitus",
                "electrocardiogram",
                "troponin",
                "immediately",
            ),
        ),
        Record(
            "medical_shorthand",
            "Exam: NAD, RRR, CTAB. Plan: cont asa po qd, f/u 2wk.",
            "Examination: no acute distress, regular rate and rhythm, clear to auscultation "
            "bilaterally. Plan: continue aspirin by mouth daily, follow up in 2 weeks.",
            facts=(
                "no acute distress",
                "regular rate and rhythm",
                "clear to auscultation bilaterally",
                "continue",
                "aspirin",
                "by mouth",
                "daily",
                "follow up",
                "2 weeks",
            ),
        ),
        Record(
            "medical_shorthand",
            "45 y/o woman, uti sx x4 days, hx ckd. ua + ucx, abx po.",
            "A 45-year-old woman with symptoms of a urinary tract infection for 4 days and a "
            "history of chronic kidney disease. Urinalysis and urine culture, antibiotics by "
            "mouth.",
            facts=(
                "45-year-old",
                "urinary tract infection",
                "4 days",
                "chronic kidney disease",
                "urinalysis",
                "urine culture",
                "antibiotics",
                "by mouth",
            ),
        ),
    ),
    "pii_redaction": (
        _pii(
            "hi, this is Maria Gonzalez, my new number is 0412 555 019 and i moved to "
            "14 Baker St, Brighton",
            "hi, this is [NAME], my new number is [PHONE] and i moved to [ADDRESS]",
            name="Maria Gonzalez",
            phone="0412 555 019",
            address="14 Baker St, Brighton",
        ),
        _pii(
            "Please cancel the order for Tan Wei Ming (S8823145D), email weiming.tan@gmail.com.",
            "Please cancel the order for [NAME] ([ID]), email [EMAIL].",
            name="Tan Wei Ming",
            id="S8823145D",
            email="weiming.tan@gmail.com",
        ),
        _pii(
            "Customer John O'Brien called from (617) 555-0142 about a late refund.",
            "Customer [NAME] called from [PHONE] about a late refund.",
            name="John O'Brien",
            phone="(617) 555-0142",
        ),
        _pii(
            "Send the replacement to Priya Raman, Flat 3B, 22 Jalan Kayu, Singapore 799475.",
            "Send the replacement to [NAME], [ADDRESS].",
            name="Priya Raman",
            address="Flat 3B, 22 Jalan Kayu, Singapore 799475",
        ),
        _pii(
            "my ssn is 123-45-6789 and my email is kate.l@outlook.com, pls update my file",
            "my ssn is [ID] and my email is [EMAIL], pls update my file",
            id="123-45-6789",
            email="kate.l@outlook.com",
        ),
    ),
    "sales_json": (
        _sales(
            "Hi, it's Dana from Harbor Freightways. We'll take 40 ergonomic chairs at $189 "
            "each, and we're signing the order today. Call me Thursday about delivery.",
            customer="Harbor Freightways",
            product="ergonomic chairs",
            quantity=40,
            unit_price=189,
            currency="USD",
            stage="closed_won",
            follow_up=True,
        ),
        _sales(
            "Buyer (Meridian Clinics): we're only collecting quotes right now. How much for 12 "
            "gel warmers?\nSeller: 85 euros per unit.\nBuyer: ok, no need to call back, we'll "
            "email if we're interested.",
            customer="Meridian Clinics",
            product="gel warmers",
            quantity=12,
            unit_price=85,
            currency="EUR",
            stage="prospect",
            follow_up=False,
        ),
        _sales(
            "Rep: just confirming, Kestrel Robotics wants 250 servo motors at S$42.50 apiece?\n"
            "Client: correct, but we need a better discount before we commit.\n"
            "Rep: I'll check with my manager and ring you Monday.",
            customer="Kestrel Robotics",
            product="servo motors",
            quantity=250,
            unit_price=42.5,
            currency="SGD",
            stage="negotiation",
            follow_up=True,
        ),
        _sales(
            "Customer: Sorry, Alder and Finch went with another supplier for the 600 safety "
            "vests.\nAgent: Understood. For the record our quote was USD 7.25 per vest. "
            "Nothing further from our side.",
            customer="Alder and Finch",
            product="safety vests",
            quantity=600,
            unit_price=7.25,
            currency="USD",
            stage="closed_lost",
            follow_up=False,
        ),
    ),
    "sentiment_neutralization": (
        Record(
            "sentiment_neutralization",
            "ARE YOU KIDDING ME?? third time this month my internet has dropped out and your "
            "'support' just hangs up on me. absolute clowns.",
            "My internet has dropped out for the third time this month, and support ended the "
            "call.",
            facts=("internet", "third time this month"),
        ),
        Record(
            "sentiment_neutralization",
            "I ordered a sofa six weeks ago. SIX WEEKS. Still nothing, no email, no tracking, "
            "nothing. Worst experience of my life.",
            "I ordered a sofa six weeks ago and have not received it, an email or tracking "
            "information.",
            facts=("sofa", "six weeks"),
        ),
        Record(
            "sentiment_neutralization",
            "your app charged me twice for the same pizza and now the refund button doesn't "
            "even work. unbelievable.",
            "The app charged me twice for the same pizza, and the refund button does not work.",
            facts=("app", "twice", "pizza", "refund button"),
        ),
        Record(
            "sentiment_neutralization",
            "Honestly the worst hotel I've stayed in: the shower was cold all three nights and "
            "nobody at reception cared!!!",
            "At the hotel, the shower was cold all three nights, and reception did not help.",
            facts=("hotel", "shower", "three nights"),
        ),
    ),
    "style_transfer": (
        Record(
            "style_transfer",
            "hey can u push our 1:1 to thurs? swamped today sry",
            "Could we move our one-to-one meeting to Thursday? I am very busy today; my apologies.",
            facts=("Thursday",),
        ),
        Record(
            "style_transfer",
            "thx for the intro to Nadia, super helpful, will ping her tmrw",
            "Thank you for introducing me to Nadia; it was very helpful. I will contact her "
            "tomorrow.",
            facts=("Nadia", "tomorrow"),
        ),
        Record(
            "style_transfer",
            "cant make the offsite, kid's sick. can someone send notes after?",
            "Unfortunately, I cannot attend the offsite because my child is unwell. Could "
            "someone send me the notes afterwards?",
            facts=("offsite", "notes"),
        ),
        Record(
            "style_transfer",
            "fyi the invoice from Brightline is still unpaid, can finance sort it by fri?",
            "Please note that the invoice from Brightline remains unpaid. Could the finance "
            "team settle it by Friday?",
            facts=("invoice", "Brightline", "Friday"),
        ),
    ),
    "singlish_to_standard": (
        Record(
            "singlish_to_standard",
            "Eh the aircon in my room spoil already, ask the technician come tomorrow can?",
            "The air conditioner in my room is broken; can you ask the technician to come "
            "tomorrow?",
            facts=("room", "technician", "tomorrow"),
        ),
        Record(
            "singlish_to_standard",
            "Wah the bus 190 damn packed today, I stand all the way from Choa Chu Kang sia.",
            "The 190 bus was very crowded today; I had to stand all the way from Choa Chu Kang.",
            facts=("190", "today", "Choa Chu Kang"),
        ),
        Record(
            "singlish_to_standard",
            "Later 7pm meet at Bishan MRT ok? Don't late hor.",
            "Shall we meet at Bishan MRT at 7pm later? Please don't be late.",
            facts=("7pm", "Bishan MRT"),
        ),
        Record(
            "singlish_to_standard",
            "My boss say the report must submit by Friday, if not kena scolding.",
            "My boss said the report must be submitted by Friday, otherwise I will be scolded.",
            facts=("boss", "report", "Friday"),
        ),
    ),
}


def _triage(raw: str, category: str, urgency: str, order_id: str | None) -> Record:
    label = json.dumps(
        {"category": category, "urgency": urgency, "order_id": order_id},
        sort_keys=True,
        separators=(",", ":"),
    )
    return Record("support_triage", raw, label, facts=(order_id,) if order_id else ())


#: The shipped example's inputs, by its dataset file (``examples/support-triage.jsonl``, a task
#: its entry defines): e-mails typed the way customers write them, none of them in the file.
#: Keyed by the file, not the task name: another entry's ``support_triage`` is another task.
EXAMPLE_NATURAL: dict[str, tuple[Record, ...]] = {
    "examples/support-triage.jsonl": (
        _triage(
            "hiya, my card got charged twice for the same thing?? order 77-QX-104. pls sort",
            "billing",
            "normal",
            "77-QX-104",
        ),
        _triage(
            "my parcel hasnt moved in 6 days, stuck at the depot. order #5518203. i need it "
            "for a funeral on saturday, please help",
            "shipping",
            "high",
            "5518203",
        ),
        _triage(
            "can't log in, the reset email never arrives (checked spam). no rush, just "
            "letting u know",
            "account",
            "low",
            None,
        ),
        _triage(
            "android app keeps closing itself whenever i try to check out. reinstalled twice, "
            "same thing",
            "technical",
            "normal",
            None,
        ),
        _triage(
            "want to send back the jacket from order KL-3390, wrong colour. how do i get a label",
            "returns",
            "normal",
            "KL-3390",
        ),
    ),
}


def natural(task: str, dataset: str | None = None) -> tuple[Record, ...]:
    """The natural inputs of a built-in task, or of the shipped example's dataset file
    (``dataset``: the entry's); none for another task an entry defines."""
    return NATURAL.get(task) or EXAMPLE_NATURAL.get(dataset or "", ())
