"""Medical shorthand expansion: clinical notes in shorthand -> full terminology.

Built on a lexicon of clinical abbreviations (``LEXICON``). A note is assembled from clause
templates whose slots draw abbreviations by category; the label is the same note with every
abbreviation expanded, so input and output stay aligned token for token.
"""

from __future__ import annotations

import random
import re

from training.datasets.common import Record, pick

CARD = (
    "medical_shorthand: synthetic clinical notes. Each note is a presentation (age, sex, "
    "complaint, duration in hours, days, weeks or months) and one to three more clauses "
    "(history, surgical history, examination, plan); slots draw from a lexicon of "
    "{n} clinical abbreviations grouped by category. The label expands every abbreviation "
    "with the lexicon's expansion; the facts (age, sex, durations and every expansion) are "
    "what a faithful expansion must keep. No real patient data."
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


def lexicon_size() -> int:
    return sum(len(v) for v in LEXICON.values())


def _pair(rng: random.Random, category: str) -> tuple[str, str]:
    abbr = pick(rng, tuple(LEXICON[category]))
    return abbr, LEXICON[category][abbr]


_UNITS = (("d", "day"), ("wk", "week"), ("mo", "month"), ("h", "hour"))


def _count(n: int, unit: str) -> str:
    return f"{n} {unit}" if n == 1 else f"{n} {unit}s"


def make(rng: random.Random) -> Record:
    """A note of two to four clauses; its facts are the age, the sex, every duration and the
    expansion of every abbreviation."""
    age = rng.randint(18, 94)
    sex_abbr, sex = pick(rng, (("m", "male"), ("f", "female")))
    s1, s2 = _pair(rng, "symptom"), _pair(rng, "symptom")
    unit_abbr, unit = _UNITS[rng.choices(range(len(_UNITS)), weights=(6, 3, 2, 1))[0]]
    n = rng.randint(1, 14 if unit_abbr == "d" else 6 if unit_abbr != "h" else 12)
    duration = _count(n, unit)
    facts = [f"{age}-year-old", sex, duration]
    complaint = (
        (f"c/o {s1[0]} and {s2[0]}", f"complaining of {s1[1]} and {s2[1]}")
        if s1 != s2 and rng.random() < 0.6
        else (f"c/o {s1[0]}", f"complaining of {s1[1]}")
    )
    clauses = [
        (
            f"pt {age}yo {sex_abbr} {complaint[0]} x{n}{unit_abbr}.",
            f"Patient is a {age}-year-old {sex} {complaint[1]} for {duration}.",
        )
    ]
    extra = rng.sample(("pmh", "psh", "exam", "plan"), k=rng.choice((1, 1, 2, 3)))
    for kind in ("pmh", "psh", "exam", "plan"):
        if kind not in extra:
            continue
        if kind == "pmh":
            c1, c2 = _pair(rng, "condition"), _pair(rng, "condition")
            clauses.append(
                (f"pmh {c1[0]}, {c2[0]}.", f"Past medical history of {c1[1]} and {c2[1]}.")
                if c1 != c2
                else (f"pmh {c1[0]}.", f"Past medical history of {c1[1]}.")
            )
        elif kind == "psh":
            h = _pair(rng, "history")
            clauses.append((f"psh {h[0]}.", f"Past surgical history: {h[1]}."))
        elif kind == "exam":
            e1, e2 = _pair(rng, "exam"), _pair(rng, "exam")
            clauses.append((f"exam {e1[0]}, {e2[0]}.", f"On examination, {e1[1]}, {e2[1]}."))
        else:
            t = _pair(rng, "test")
            d, r, f = _pair(rng, "drug"), _pair(rng, "route"), _pair(rng, "frequency")
            weeks = rng.randint(1, 6)
            follow = _count(weeks, "week")
            facts.append(follow)
            clauses.append(
                (
                    f"plan {t[0]}, {d[0]} {r[0]} {f[0]}, f/u {weeks}wk.",
                    f"Plan: {t[1]}, {d[1]} {r[1]} {f[1]}, follow up in {follow}.",
                )
            )
    label = " ".join(c[1] for c in clauses)
    # Every abbreviation's expansion from the lexicon is a fact too: a note whose diagnosis,
    # drug or test is swapped for another of the same kind keeps its ages and durations.
    terms = [
        full
        for kind in LEXICON.values()
        for full in kind.values()
        if re.search(rf"(?<!\w){re.escape(full)}(?!\w)", label)
    ]
    return Record(
        category="medical_shorthand",
        raw=" ".join(c[0] for c in clauses),
        label=label,
        note=f"{len(clauses)} clauses",
        facts=tuple(dict.fromkeys([*facts, *terms])),
    )
