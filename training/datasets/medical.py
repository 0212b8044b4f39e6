"""Medical shorthand expansion: clinical notes in shorthand -> full terminology.

Built on a lexicon of clinical abbreviations (``LEXICON``). A note is a presentation clause and
one to three more (medical history, surgical history, examination, plan), each drawn from its
own pool of phrasings, the terse shorthand and its expansion side by side; the slots draw
abbreviations by category, and the label is the same note with every abbreviation expanded.

The phrasings are split between the parts (``common.Draw``): a test note is phrased in ways no
training note is. The lexicon is the task's vocabulary and every part uses it: an adapter is
meant to learn these abbreviations, and a test of ones it never saw would measure the base's
medicine instead.
"""

from __future__ import annotations

import re
from functools import cache

from training.datasets.common import Draw, Record

CARD = (
    "medical_shorthand: synthetic clinical notes. Each note is a presentation (age, sex, "
    "complaint, duration in hours, days, weeks or months) and one to three more clauses "
    "(history, surgical history, examination, plan), each from its own pool of phrasings; "
    "slots draw from a lexicon of {n} clinical abbreviations grouped by category. The label "
    "expands every abbreviation with the lexicon's expansion; the facts (age, sex, durations "
    "and every expansion) are what a faithful expansion must keep. The test part's phrasings "
    "are used by no training note. No real patient data."
)

# category -> abbreviation -> expansion
LEXICON: dict[str, dict[str, str]] = {
    "symptom": {
        "sob": "shortness of breath",
        "cp": "chest pain",
        "ha": "headache",
        "n/v": "nausea and vomiting",
        "doe": "dyspnea on exertion",
        "pnd": "paroxysmal nocturnal dyspnea",
        "loc": "loss of consciousness",
        "ams": "altered mental status",
        "brbpr": "bright red blood per rectum",
        "abd pain": "abdominal pain",
        "ble edema": "bilateral lower extremity edema",
        "uop decr": "decreased urine output",
        "fx pain": "fracture pain",
    },
    "condition": {
        "htn": "hypertension",
        "dm2": "type 2 diabetes mellitus",
        "cad": "coronary artery disease",
        "chf": "congestive heart failure",
        "copd": "chronic obstructive pulmonary disease",
        "mi": "myocardial infarction",
        "cva": "cerebrovascular accident",
        "tia": "transient ischemic attack",
        "afib": "atrial fibrillation",
        "dvt": "deep vein thrombosis",
        "pe": "pulmonary embolism",
        "uti": "urinary tract infection",
        "uri": "upper respiratory infection",
        "gerd": "gastroesophageal reflux disease",
        "ckd": "chronic kidney disease",
        "aki": "acute kidney injury",
        "esrd": "end-stage renal disease",
        "ra": "rheumatoid arthritis",
        "oa": "osteoarthritis",
        "ms": "multiple sclerosis",
        "bph": "benign prostatic hyperplasia",
        "hld": "hyperlipidemia",
        "osa": "obstructive sleep apnea",
        "pad": "peripheral artery disease",
        "pvd": "peripheral vascular disease",
        "aaa": "abdominal aortic aneurysm",
        "ibd": "inflammatory bowel disease",
        "ibs": "irritable bowel syndrome",
        "hiv": "human immunodeficiency virus",
        "hcv": "hepatitis C virus",
        "hbv": "hepatitis B virus",
        "tb": "tuberculosis",
        "mrsa": "methicillin-resistant Staphylococcus aureus",
        "cdiff": "Clostridioides difficile",
        "ards": "acute respiratory distress syndrome",
        "pna": "pneumonia",
        "hap": "hospital-acquired pneumonia",
        "ptx": "pneumothorax",
        "dka": "diabetic ketoacidosis",
        "hhs": "hyperosmolar hyperglycemic state",
        "sbo": "small bowel obstruction",
        "gib": "gastrointestinal bleed",
        "ugib": "upper gastrointestinal bleed",
        "lgib": "lower gastrointestinal bleed",
        "vte": "venous thromboembolism",
        "svt": "supraventricular tachycardia",
        "vt": "ventricular tachycardia",
        "vf": "ventricular fibrillation",
        "lvh": "left ventricular hypertrophy",
        "hfref": "heart failure with reduced ejection fraction",
        "hf": "heart failure",
        "cauti": "catheter-associated urinary tract infection",
        "clabsi": "central line-associated bloodstream infection",
        "std": "sexually transmitted disease",
        "sirs": "systemic inflammatory response syndrome",
    },
    "history": {
        "s/p cabg": "status post coronary artery bypass graft",
        "s/p pci": "status post percutaneous coronary intervention",
        "s/p tka": "status post total knee arthroplasty",
        "s/p tha": "status post total hip arthroplasty",
        "s/p orif": "status post open reduction internal fixation",
        "s/p tah": "status post total abdominal hysterectomy",
        "s/p lapchole": "status post laparoscopic cholecystectomy",
        "s/p egd": "status post esophagogastroduodenoscopy",
        "s/p ercp": "status post endoscopic retrograde cholangiopancreatography",
        "s/p lp": "status post lumbar puncture",
        "s/p peg": "status post percutaneous endoscopic gastrostomy",
    },
    "exam": {
        "nad": "no acute distress",
        "aox3": "alert and oriented times three",
        "perrla": "pupils equal, round, and reactive to light and accommodation",
        "eomi": "extraocular movements intact",
        "rrr": "regular rate and rhythm",
        "ctab": "clear to auscultation bilaterally",
        "ntnd": "nontender, nondistended",
        "+bs": "bowel sounds present",
        "jvd": "jugular venous distension",
        "wnl": "within normal limits",
        "nsr": "normal sinus rhythm",
        "pvc": "premature ventricular contraction",
        "vss": "vital signs stable",
        "afvss": "afebrile, vital signs stable",
        "rlq ttp": "right lower quadrant tenderness to palpation",
        "llq ttp": "left lower quadrant tenderness to palpation",
        "ruq ttp": "right upper quadrant tenderness to palpation",
        "luq ttp": "left upper quadrant tenderness to palpation",
        "rle wk": "right lower extremity weakness",
        "lle wk": "left lower extremity weakness",
        "rue wk": "right upper extremity weakness",
        "lue wk": "left upper extremity weakness",
        "gcs 15": "Glasgow Coma Scale 15",
        "full rom": "full range of motion",
    },
    "test": {
        "ekg": "electrocardiogram",
        "echo": "echocardiogram",
        "cxr": "chest x-ray",
        "ct": "computed tomography",
        "mri": "magnetic resonance imaging",
        "us": "ultrasound",
        "cbc": "complete blood count",
        "bmp": "basic metabolic panel",
        "cmp": "comprehensive metabolic panel",
        "lft": "liver function tests",
        "tsh": "thyroid-stimulating hormone",
        "hba1c": "hemoglobin A1c",
        "bun/cr": "blood urea nitrogen and creatinine",
        "abg": "arterial blood gas",
        "ua": "urinalysis",
        "inr": "international normalized ratio",
        "ptt": "partial thromboplastin time",
        "bx": "biopsy",
        "lp": "lumbar puncture",
        "ef": "ejection fraction",
        "bcx": "blood cultures",
        "ucx": "urine culture",
        "trop": "troponin",
        "bnp": "brain natriuretic peptide",
    },
    "drug": {
        "asa": "aspirin",
        "apap": "acetaminophen",
        "nsaid": "nonsteroidal anti-inflammatory drug",
        "abx": "antibiotics",
        "ns": "normal saline",
        "lr": "lactated Ringer's",
        "kcl": "potassium chloride",
        "ntg": "nitroglycerin",
        "ssi": "sliding scale insulin",
        "o2": "oxygen",
        "ivf": "intravenous fluids",
        "tpn": "total parenteral nutrition",
        "pca": "patient-controlled analgesia",
        "hctz": "hydrochlorothiazide",
        "mtx": "methotrexate",
        "ppi": "proton pump inhibitor",
        "acei": "angiotensin-converting enzyme inhibitor",
        "arb": "angiotensin receptor blocker",
        "bb": "beta blocker",
        "lmwh": "low-molecular-weight heparin",
    },
    "route": {
        "po": "by mouth",
        "iv": "intravenously",
        "im": "intramuscularly",
        "sq": "subcutaneously",
        "sl": "sublingually",
        "ivp": "by intravenous push",
        "ivpb": "by intravenous piggyback",
        "inh": "by inhaler",
        "neb": "by nebulizer",
        "pr": "rectally",
        "top": "topically",
        "via ngt": "via nasogastric tube",
        "via gtube": "via gastrostomy tube",
        "via nc": "via nasal cannula",
    },
    "frequency": {
        "qd": "daily",
        "bid": "twice daily",
        "tid": "three times daily",
        "qid": "four times daily",
        "prn": "as needed",
        "hs": "at bedtime",
        "ac": "before meals",
        "pc": "after meals",
        "stat": "immediately",
        "q4h": "every four hours",
        "q6h": "every six hours",
        "q8h": "every eight hours",
        "q12h": "every twelve hours",
        "qhs": "every night at bedtime",
        "qod": "every other day",
        "qam": "every morning",
        "qpm": "every evening",
        "x1": "once",
    },
    "plan": {
        "npo": "nothing by mouth",
        "f/u": "follow up",
        "d/c": "discontinue",
        "r/o": "rule out",
        "dnr": "do not resuscitate",
        "dni": "do not intubate",
        "wbat": "weight bearing as tolerated",
        "nwb": "non-weight bearing",
        "oob": "out of bed",
        "pt eval": "physical therapy evaluation",
        "ot eval": "occupational therapy evaluation",
        "slp eval": "speech-language pathology evaluation",
        "dvt ppx": "deep vein thrombosis prophylaxis",
        "tele": "telemetry monitoring",
        "i/o": "intake and output",
        "dispo snf": "disposition to skilled nursing facility",
        "admit icu": "admit to the intensive care unit",
        "to or": "to the operating room",
        "to pacu": "to the post-anesthesia care unit",
        "cont": "continue",
    },
}


@cache
def expansions() -> frozenset[str]:
    """Every expansion the lexicon knows: what an answer may state only when the note's own
    abbreviations explain it (``training.metrics.faithfulness``)."""
    return frozenset(full.lower() for kind in LEXICON.values() for full in kind.values())


def lexicon_size() -> int:
    return sum(len(v) for v in LEXICON.values())


#: (shorthand, expansion) pairs. Index i of a one-term pool (PRESENTATION_ONE, PMH_ONE) is
#: phrased like index i of its two-term pool, so both are held out together.
PRESENTATION = (
    (
        "pt {age}yo {sx} c/o {s1} and {s2} x{n}{u}.",
        "Patient is a {age}-year-old {sex} complaining of {s1} and {s2} for {dur}.",
    ),
    ("{age}{sx}, {s1} + {s2} x {n}{u}.", "This {age}-year-old {sex} has {s1} plus {s2} for {dur}."),
    (
        "{age} y/o {sx} presents w/ {s1} + {s2}, onset {n}{u} ago.",
        "{age}-year-old {sex} presenting with {s1} and {s2}, with onset {dur} ago.",
    ),
    (
        "{age}yo {sx} p/w {s1} & {s2} over past {n}{u}.",
        "Our {age}-year-old {sex} patient presented with {s1} and {s2} over the past {dur}.",
    ),
    (
        "cc: {s1} and {s2}, {n}{u} duration; {age}yo {sx}.",
        "Chief complaint: {s1} and {s2} of {dur} duration; {age}-year-old {sex}.",
    ),
    (
        "{age}yo {sx}, {s1} w/ assoc {s2}, dur {n}{u}.",
        "Seen today: {age}-year-old {sex} who has {s1} with associated {s2}, duration {dur}.",
    ),
    (
        "hpi: {age} y/o {sx}, {s1} and {s2} for past {n}{u}.",
        (
            "History of present illness: {age}-year-old {sex} experiencing {s1} and {s2} for "
            "the past {dur}."
        ),
    ),
    (
        "{age}yo {sx} reports {s1}, also {s2}, started {n}{u} ago.",
        "The {age}-year-old {sex} reports {s1} and also {s2}, which started {dur} ago.",
    ),
    (
        "{age}{sx}; complaints: {s1}/{s2}; duration ~{n}{u}.",
        "Patient: {age}-year-old {sex}; complaints: {s1} and {s2}; duration approximately {dur}.",
    ),
    (
        "{age} y/o {sx} new pt, {n}{u} of {s1} and {s2}.",
        "{age}-year-old {sex}, new patient, with {dur} of {s1} and {s2}.",
    ),
)
PRESENTATION_ONE = (
    (
        "pt {age}yo {sx} c/o {s1} x{n}{u}.",
        "Patient is a {age}-year-old {sex} complaining of {s1} for {dur}.",
    ),
    ("{age}{sx} w/ {s1} x {n}{u}.", "This {age}-year-old {sex} has {s1} for {dur}."),
    (
        "{age} y/o {sx} presents w/ {s1}, onset {n}{u} ago.",
        "{age}-year-old {sex} presenting with {s1}, with onset {dur} ago.",
    ),
    (
        "{age}yo {sx} p/w {s1} over past {n}{u}.",
        "Our {age}-year-old {sex} patient presented with {s1} over the past {dur}.",
    ),
    (
        "cc: {s1}, {n}{u} duration; {age}yo {sx}.",
        "Chief complaint: {s1} of {dur} duration; {age}-year-old {sex}.",
    ),
    (
        "{age}yo {sx}, isolated {s1}, dur {n}{u}.",
        "Seen today: {age}-year-old {sex} who has isolated {s1}, duration {dur}.",
    ),
    (
        "hpi: {age} y/o {sx}, {s1} for past {n}{u}.",
        "History of present illness: {age}-year-old {sex} experiencing {s1} for the past {dur}.",
    ),
    (
        "{age}yo {sx} reports {s1}, started {n}{u} ago.",
        "The {age}-year-old {sex} reports {s1}, which started {dur} ago.",
    ),
    (
        "{age}{sx}; complaint: {s1}; duration ~{n}{u}.",
        "Patient: {age}-year-old {sex}; complaint: {s1}; duration approximately {dur}.",
    ),
    (
        "{age} y/o {sx} new pt, {n}{u} of {s1}.",
        "{age}-year-old {sex}, new patient, with {dur} of {s1}.",
    ),
)
PMH = (
    ("pmh {c1}, {c2}.", "Past medical history of {c1} and {c2}."),
    ("hx of {c1}/{c2}.", "History of {c1} as well as {c2}."),
    ("known {c1}, {c2}.", "Known to have {c1} and {c2}."),
    ("bg of {c1} & {c2}.", "Background of {c1} and {c2}."),
    ("{c1}, {c2} noted in pmh.", "{c1} and {c2} are noted in the past medical history."),
    ("comorbs: {c1}, {c2}.", "Comorbidities include {c1} and {c2}."),
    ("pmhx: {c1}; {c2}.", "Past medical history: {c1}; {c2}."),
    ("hx significant for {c1} and {c2}.", "The history is significant for {c1} and {c2}."),
)
PMH_ONE = (
    ("pmh {c1}.", "Past medical history of {c1}."),
    ("hx of {c1}.", "History of {c1}."),
    ("known {c1}.", "Known to have {c1}."),
    ("bg {c1}.", "Background of {c1}."),
    ("{c1} noted in pmh.", "{c1} is noted in the past medical history."),
    ("comorb: {c1}.", "Comorbidity: {c1}."),
)
PSH = (
    ("psh {h}.", "Past surgical history: {h}."),
    ("{h} in past.", "Previously {h}."),
    ("surg hx: {h}.", "Surgical history: {h}."),
    ("psh significant for {h}.", "Past surgical history is significant for {h}."),
    ("prev surg: {h}.", "Previous surgery: {h}."),
    ("{h}, no other psh.", "{h}, with no other past surgical history."),
)
EXAM = (
    ("exam {e1}, {e2}.", "On examination, {e1}, {e2}."),
    ("PE: {e1}; {e2}.", "Physical examination: {e1}; {e2}."),
    ("o/e {e1} and {e2}.", "On examination, {e1} and {e2}."),
    ("exam notable for {e1}, {e2}.", "Examination was notable for {e1} and {e2}."),
    ("{e1} on exam, also {e2}.", "{e1} on examination, and also {e2}."),
    ("exam findings: {e1}; {e2}.", "Examination findings: {e1}; {e2}."),
    ("pe remarkable for {e1} + {e2}.", "Physical exam was remarkable for {e1} plus {e2}."),
    ("o/e: {e1}; additionally {e2}.", "On examination: {e1}; additionally, {e2}."),
)
PLAN = (
    ("plan {t}, {dr} {r} {fq}, f/u {w}wk.", "Plan: {t}, {dr} {r} {fq}, follow up in {fu}."),
    (
        "{t} ordered; start {dr} {r} {fq}; rtc {w}wk.",
        "{t} ordered; start {dr} {r} {fq}; return to clinic in {fu}.",
    ),
    (
        "will obtain {t}. rx {dr} {r} {fq}. review {w}wk.",
        "Will obtain {t}. Prescribed {dr} {r} {fq}. Review in {fu}.",
    ),
    (
        "order {t} + begin {dr} {r} {fq}, then f/u after {w}wk.",
        "Order {t} and begin {dr} {r} {fq}, then follow up after {fu}.",
    ),
    (
        "tx {dr} {r} {fq}; ix {t}; f/u appt {w}wk.",
        "Treatment with {dr} {r} {fq}; investigations: {t}; follow-up appointment in {fu}.",
    ),
    (
        "{t} requested, {dr} {r} {fq} commenced, to be seen in {w}wk.",
        (
            "{t} has been requested, {dr} {r} {fq} commenced, and the patient will be seen "
            "again in {fu}."
        ),
    ),
    (
        "cont {dr} {r} {fq} pending {t} results, recheck {w}wk.",
        "Continue {dr} {r} {fq} pending {t} results; recheck in {fu}.",
    ),
    (
        "d/w pt: {t} today, {dr} {r} {fq} to start, next f/u {w}wk.",
        "Discussed with patient: {t} today, {dr} {r} {fq} to start, next follow-up visit in {fu}.",
    ),
)

_UNITS = (("d", "day"), ("wk", "week"), ("mo", "month"), ("h", "hour"))


def _count(n: int, unit: str) -> str:
    return f"{n} {unit}" if n == 1 else f"{n} {unit}s"


def _term(draw: Draw, category: str) -> tuple[str, str]:
    abbr = draw.shared(tuple(LEXICON[category]))
    draw.slots.append(LEXICON[category][abbr])
    return abbr, LEXICON[category][abbr]


def _clause(
    draw: Draw, pool: str, pairs: tuple[tuple[str, str], ...], **slots: tuple[str, str]
) -> tuple[str, str]:
    raw, full = draw.template(pool, pairs)
    return (
        raw.format(**{k: v[0] for k, v in slots.items()}),
        full.format(**{k: v[1] for k, v in slots.items()}),
    )


def make(draw: Draw) -> Record:
    """A note of two to four clauses; its facts are the age, the sex, every duration and the
    expansion of every abbreviation."""
    rng = draw.rng
    age = rng.randint(18, 94)
    sx, sex = (("m", "male"), ("f", "female"))[rng.randrange(2)]
    s1, s2 = _term(draw, "symptom"), _term(draw, "symptom")
    unit_abbr, unit = _UNITS[rng.choices(range(len(_UNITS)), weights=(6, 3, 2, 1))[0]]
    n = rng.randint(1, 14 if unit_abbr == "d" else 6 if unit_abbr != "h" else 12)
    duration = _count(n, unit)
    facts = [f"{age}-year-old", sex, duration]
    style = draw.template("presentation", range(len(PRESENTATION)))
    raw, full = (PRESENTATION if s1 != s2 and rng.random() < 0.6 else PRESENTATION_ONE)[style]
    if "{age}{sx}" in raw:
        sx = sx.upper()  # "45M"
    common = {"age": str(age), "n": str(n), "u": unit_abbr, "sx": sx, "sex": sex, "dur": duration}
    clauses = [
        (
            raw.format(**common, s1=s1[0], s2=s2[0]),
            full.format(**common, s1=s1[1], s2=s2[1]),
        )
    ]
    extra = rng.sample(("pmh", "psh", "exam", "plan"), k=rng.choice((1, 1, 2, 3)))
    for kind in ("pmh", "psh", "exam", "plan"):
        if kind not in extra:
            continue
        if kind == "pmh":
            # PMH_ONE[i] is phrased like PMH[i]: one held-out phrasing, either count.
            style = draw.template("pmh", range(len(PMH)))
            c1, c2 = _term(draw, "condition"), _term(draw, "condition")
            if style < len(PMH_ONE) and (c1 == c2 or rng.random() < 0.3):
                raw, full = PMH_ONE[style]
                clauses.append((raw.format(c1=c1[0]), full.format(c1=c1[1])))
            else:
                while c2 == c1:
                    c2 = _term(draw, "condition")
                raw, full = PMH[style]
                clauses.append((raw.format(c1=c1[0], c2=c2[0]), full.format(c1=c1[1], c2=c2[1])))
        elif kind == "psh":
            clauses.append(_clause(draw, "psh", PSH, h=_term(draw, "history")))
        elif kind == "exam":
            e1 = e2 = _term(draw, "exam")
            while e2 == e1:
                e2 = _term(draw, "exam")
            clauses.append(_clause(draw, "exam", EXAM, e1=e1, e2=e2))
        else:
            weeks = rng.randint(1, 6)
            follow = _count(weeks, "week")
            facts.append(follow)
            clauses.append(
                _clause(
                    draw,
                    "plan",
                    PLAN,
                    t=_term(draw, "test"),
                    dr=_term(draw, "drug"),
                    r=_term(draw, "route"),
                    fq=_term(draw, "frequency"),
                    w=(str(weeks), ""),
                    fu=("", follow),
                )
            )
    label = " ".join(c[1][0].upper() + c[1][1:] for c in clauses)
    # Every abbreviation's expansion from the lexicon is a fact too: a note whose diagnosis,
    # drug or test is swapped for another of the same kind keeps its ages and durations.
    terms = [
        full
        for kind in LEXICON.values()
        for full in kind.values()
        # A clause opens with a capital: "Premature ventricular contraction on exam".
        if re.search(rf"(?<!\w){re.escape(full)}(?!\w)", label, re.IGNORECASE)
    ]
    return draw.record(
        " ".join(c[0] for c in clauses),
        label,
        note=f"{len(clauses)} clauses",
        facts=tuple(dict.fromkeys([*facts, *terms])),
    )
