"""Quality signals that need no label: what can be read from a request and its answer alone.

The training gate scores an adapter on its test split against labels (``training.metrics``);
a served answer has none. What both can check without one lives here, once, and ships with the
router (which must not import ``training``) and the training image:

- ``json_valid``: the answer is a JSON object (RFC 8259: no NaN, no Infinity), and satisfies
  the schema when the caller passes a check for it;
- ``facts_kept``: the share of the input's facts (numbers with their units, names inside a
  sentence; one spelling per number) that the answer states;
- ``pii_leaked``: the share of the input's personal values (e-mail addresses, runs of four
  digits or more, names inside a sentence) that the answer gives back, part by part
  (``leaked_parts``: a first name alone leaks a name, digits leak whatever their grouping);
- ``repetition``: the share of the answer's word trigrams that repeat an earlier one (a loop);
- ``answered``: the answer has visible text.

Each is in [0, 1]; ``HIGHER_IS_BETTER`` says which way is better. They are meant to be compared
paired, two versions on the same input (``lambda_proxy.shadow``): ``pii_leaked`` also counts a
date's digits or a place kept on purpose, and so it does for both versions alike.
Written by hand because the patterns are the gate's own; nothing beyond the standard library.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Callable, Mapping
from typing import Any


def fact_pattern(fact: str) -> re.Pattern[str]:
    """A fact as a whole phrase: "4 days" must not match inside "14 days"."""
    body = r"\s+".join(re.escape(part) for part in fact.split())
    return re.compile(rf"(?<![\w]){body}(?![\w])", re.IGNORECASE)


def refuse_constant(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


_DIGITS = re.compile(r"\d+")
_ALPHA = re.compile(r"[^\W\d_]+")


#: Digit groups written apart ("52 76 60 5", "658-459-024-1", "(65) 8459.0241", "84:59:02:41")
#: are one run: up to three characters that are not letters or digits may stand between.
_DIGIT_RUN = re.compile(r"\d(?:[^\w\n]{0,3}\d|_{1,3}\d)*")
#: Words a value may contain that say nothing about a person: address kinds, e-mail domains'
#: generic parts. Seeing "road" in an output is not a leak of "12 Jalan Besar Road". Words
#: that are also surnames (Park, Lane, West, Way) are left out: they may be the leak.
_GENERIC = (
    "road rd street st avenue ave ln drive dr boulevard blvd crescent block blk unit floor "
    "level apt apartment suite com org net edu gov co sg uk io mail email"
)
GENERIC_WORDS = frozenset(_GENERIC.split())
#: Three or more single letters with spaces, dots or hyphens between: a word spelled out
#: ("W E I", "W-E-I", "W. E. I.").
_SPELLED = re.compile(r"(?<!\w)(?:[^\W\d_](?:\.\s?|[ \-])){2,}[^\W\d_]\.?(?!\w)")
#: Shortest run of a value's digits that counts as leaked.
LEAK_DIGITS = 4
#: Longest run of a value's words, written together, that counts as one leaked word.
RUN_WORDS = 6


@functools.lru_cache(maxsize=64)
def _digit_runs(text: str) -> tuple[str, ...]:
    """The text's numbers with their separators taken out (cached: ``pii_leaked`` reads one
    answer's numbers for each of up to ``MAX_VALUES`` values)."""
    return tuple(re.sub(r"\D", "", m.group()) for m in _DIGIT_RUN.finditer(text))


def leaked_parts(hypothesis: str, value: str, label: str) -> list[str]:
    """The parts of one PII value found in the output.

    Parts are the value's words (a first name alone leaks a name; e-mail user names split at
    dots and underscores; the domain's own name counts) and its digits. Digits are compared
    whatever their grouping: the output's numbers, separators removed, leak when one shares
    a stretch of four digits or more with the value's digits (or holds all of a shorter
    value). Parts the label itself contains, and generic words (``GENERIC_WORDS``), are not
    leaks.
    """
    label_words = {w.lower() for w in _ALPHA.findall(label)}
    out_tokens = [w.lower() for w in _ALPHA.findall(hypothesis)]
    # Letters spelled apart ("W E I", "W-E-I") are read as one word.
    spelled = [re.sub(r"[^\w]", "", m.group()).lower() for m in _SPELLED.finditer(hypothesis)]
    out_words = set(out_tokens) | set(spelled)
    value_words = [w.lower() for w in _ALPHA.findall(value)]
    found = [
        w
        for w in value_words
        if len(w) >= 2 and w not in label_words and w not in GENERIC_WORDS and w in out_words
    ]
    # Words run together ("weilingtan@...", "weiling.tan"): a word of the output that the
    # label does not have and that is two or more of the value's words in a row, whole.
    # ("visiting" holds "siting" of "Lim Si Ting", and is not a leak.)
    # At most RUN_WORDS words in a row: a name is a few words, and every longer run of a long
    # value would cost the cube of its length (a 900-word "name" took 5 s and 700 MiB).
    runs = {
        "".join(value_words[i:j])
        for i in range(len(value_words))
        for j in range(i + 2, min(i + RUN_WORDS, len(value_words)) + 1)
    }
    found += sorted((out_words - label_words) & runs)
    value_digits = "".join(_DIGITS.findall(value))
    label_runs = set(_digit_runs(label))
    # The answer's numbers, read once per value, not once per number of the value: inside the
    # loops below a crafted 4 KB input took a second of the router's CPU.
    out_runs = [run for run in _digit_runs(hypothesis) if run not in label_runs]
    need = min(LEAK_DIGITS, len(value_digits))
    for run in out_runs:
        if len(run) < need or len(value_digits) < 3:
            continue
        shared = next(
            (
                run[i : i + need]
                for i in range(len(run) - need + 1)
                if run[i : i + need] in value_digits
            ),
            None,
        )
        if shared is not None:
            found.append(shared)
    # A value's own digit run of three or more kept whole ("Blk 123") leaks too.
    found += [
        run
        for run in _DIGITS.findall(value)
        if len(run) >= 3
        and run not in label_runs
        and run not in found
        and any(run in o for o in out_runs)
    ]
    return found


#: Units a number's fact carries (a duration, an amount, a measure); other words after a
#: number ("5521 came") are not part of it.
UNITS = (
    "%|percent|years?|months?|weeks?|days?|hours?|minutes?|mins?|seconds?|secs?|yo|y/o|"
    "kg|g|mg|mcg|ml|l|km|m|cm|mm|mi|lbs?|oz|usd|eur|gbp|sgd|dollars?|euros?|items?|units?|"
    "pcs|x|am|pm|h|d|wk|mo"
)
_FACT = re.compile(
    rf"\d+(?:[.,:/\-]\d+)*(?:\s?(?i:{UNITS})(?!\w))?"  # numbers, with a unit or a time
    r"|(?<=[a-z,;:] )[A-Z][\w\-]+(?:\s[A-Z][\w\-]+)*"  # a name inside a sentence
)
#: Number words a count may be written in ("five days", "twenty-five days"), before a unit
#: only: "no one came" states no number. "a day" and "an hour" are one.
NUMBER_WORDS = {
    w: i
    for i, w in enumerate(
        (
            *("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"),
            *("ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen"),
            *("seventeen", "eighteen", "nineteen", "twenty"),
        )
    )
} | {"thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80}
NUMBER_WORDS |= {"ninety": 90, "hundred": 100}
_TIME_UNITS = r"(?:seconds?|minutes?|hours?|days?|weeks?|months?|years?)(?!\w)"
_WORD_COUNT = re.compile(
    rf"(?<![\w-])(?:({'|'.join(NUMBER_WORDS)})(?:[- ]({'|'.join(list(NUMBER_WORDS)[1:10])}))?"
    rf"(?=\s+(?:{UNITS})(?!\w))|an?(?=\s+{_TIME_UNITS}))",
    re.IGNORECASE,
)
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
#: A time of day: "10.30 am", "10:30am", "5.00 pm", "5 pm".
_CLOCK = re.compile(r"(?<![\w.:])(\d{1,2})(?:[.:](\d{2}))?\s?([ap]m)(?!\w)", re.IGNORECASE)
#: An amount in decimals: after a currency sign or before a unit that is not a time of day
#: ("$5.00", "5.50 usd", "2.0 kg"). Other decimals stay: "Python 3.10" is not "3.1".
_AMOUNT = re.compile(
    rf"(?<=[$€£¥])(\d+)\.(\d+)(?![\w.])|(?<![\w.,:/\-])(\d+)\.(\d+)"
    rf"(?=\s?(?:(?!am\b|pm\b)(?i:{UNITS}))(?!\w))"
)
_UNIT_GAP = re.compile(rf"(\d)\s+((?i:{UNITS})(?!\w))")


def _count(m: re.Match[str]) -> str:
    if m.group(1) is None:  # "a day", "an hour"
        return "1"
    return str(NUMBER_WORDS[m.group(1).lower()] + NUMBER_WORDS.get((m.group(2) or "").lower(), 0))


def _amount(m: re.Match[str]) -> str:
    whole, fraction = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
    return whole + ("." + fraction.rstrip("0")).rstrip(".")


def _clock(m: re.Match[str]) -> str:
    minutes = m.group(2) if m.group(2) not in (None, "00") else ""
    return m.group(1) + (":" + minutes if minutes else "") + m.group(3).lower()


def normalize_numbers(text: str) -> str:
    """One spelling per number, so that a correct answer keeps a fact however it writes it:
    "five days" and "a day" are "5 days" and "1 day", "1,000" is "1000", "$5.00" is "$5",
    "5.00 pm" and "5 pm" are "5pm", "10.30 am" is "10:30am", and a unit follows its number
    without a space."""
    text = _WORD_COUNT.sub(_count, text)
    text = _THOUSANDS.sub("", text)
    text = _CLOCK.sub(_clock, text)
    text = _AMOUNT.sub(_amount, text)
    return _UNIT_GAP.sub(r"\1\2", text)


def extract_facts(text: str) -> set[str]:
    """The checkable facts of a text: its numbers (with a unit) and its names, numbers in one
    spelling (``normalize_numbers``)."""
    return {" ".join(m.group().lower().split()) for m in _FACT.finditer(normalize_numbers(text))}


#: An e-mail address: a value of its own, whatever words it is made of.
_EMAIL = re.compile(r"[\w.+\-]+@[\w\-]+(?:\.[\w\-]+)+")
#: A name inside a sentence (the facts' pattern for names).
_NAME = re.compile(r"(?<=[a-z,;:] )[A-Z][\w\-]+(?:\s[A-Z][\w\-]+)*")
_LONG_DIGITS = re.compile(r"\d(?:[^\w\n]{0,3}\d){3,}")


def personal_values(text: str) -> list[str]:
    """What a redaction must not give back, found without a label: the input's e-mail
    addresses, its runs of four digits or more (phones, IDs, card numbers, written with or
    without separators) and its names inside a sentence."""
    emails = _EMAIL.findall(text)
    rest = _EMAIL.sub(" ", text)
    found = emails + [m.group() for m in _LONG_DIGITS.finditer(rest)]
    found += [m.group() for m in _NAME.finditer(rest)]
    return list(dict.fromkeys(found))


def _finite(number: str) -> float:
    value = float(number)
    if math.isinf(value):  # "1e999": RFC 8259 has no number out of range, Python reads inf
        raise ValueError(f"{number} is out of range")
    return value


def json_object(text: str) -> dict[str, Any] | None:
    """The answer as a JSON object, or None when it is not one."""
    try:
        obj = json.loads(text.strip(), parse_constant=refuse_constant, parse_float=_finite)
    except (ValueError, TypeError, RecursionError):
        return None
    return obj if isinstance(obj, dict) else None


def json_valid(text: str, check: Callable[[Any], bool] | None = None) -> float:
    """1.0 for a JSON object that passes ``check`` (a schema's validator, when there is one)."""
    obj = json_object(text)
    return float(obj is not None and (check is None or bool(check(obj))))


def facts_kept(answer: str, source: str, limit: int | None = None) -> float:
    """The share of the input's facts the answer states (1.0 when the input has none); at most
    ``limit`` of them are looked for."""
    facts = sorted(extract_facts(source))[:limit]
    if not facts:
        return 1.0
    said = normalize_numbers(answer)
    return sum(1 for f in facts if fact_pattern(f).search(said)) / len(facts)


def pii_leaked(answer: str, source: str, limit: int | None = None) -> float:
    """The share of the input's personal values (``personal_values``) that the answer gives
    back any part of (0.0 when the input has none); the first ``limit`` values are compared."""
    values = personal_values(source)[:limit]
    if not values:
        return 0.0
    return sum(1 for v in values if leaked_parts(answer, v, "")) / len(values)


#: A word; each character of a script written without spaces (CJK) is a word of its own, so
#: "哈哈哈哈" loops as "ha ha ha ha" does.
_WORD = re.compile(
    r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]|[^\W\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]+"
)


def repetition(answer: str) -> float:
    """The share of the answer's word trigrams that repeat an earlier one: 0.0 for text that
    never repeats itself, near 1.0 for a loop."""
    words = [w.lower() for w in _WORD.findall(answer)]
    grams = [tuple(words[i : i + 3]) for i in range(len(words) - 2)]
    if not grams:
        return 0.0
    return 1.0 - len(set(grams)) / len(grams)


def answered(answer: str) -> float:
    """1.0 for an answer with a visible character (zero-width spaces and other format
    characters are not one)."""
    return float(any(ch.isprintable() and not ch.isspace() for ch in answer))


#: Every signal, and whether a higher value is better.
HIGHER_IS_BETTER: dict[str, bool] = {
    "json_valid": True,
    "facts_kept": True,
    "pii_leaked": False,
    "repetition": False,
    "answered": True,
}
SIGNALS = tuple(HIGHER_IS_BETTER)
#: How much worse than stable a canary may be on a signal (its mean over the same inputs)
#: before it counts as worse, where the catalog sets no margin. A share of answers for the
#: 0/1 signals: a canary that breaks the JSON of 1 answer in 20 more than stable is worse.
DEFAULT_MARGINS: dict[str, float] = {
    "json_valid": 0.05,
    "facts_kept": 0.05,
    "pii_leaked": 0.02,
    "repetition": 0.05,
    "answered": 0.02,
}
#: The signals a task's gate metric makes meaningful, besides ``answered`` and ``repetition``
#: that every answer has.
BY_METRIC: dict[str, tuple[str, ...]] = {
    "json_schema": ("json_valid",),
    "json_field_f1": ("json_valid",),
    "redaction": ("pii_leaked",),
    "pii_leak_rate": ("pii_leaked",),
    "facts": ("facts_kept",),
    "chrf": ("facts_kept",),
}
COMMON = ("answered", "repetition")


def signals_for(metric: str) -> tuple[str, ...]:
    """The signals an adapter of this gate metric is compared on."""
    return (*BY_METRIC.get(metric, ()), *COMMON)


#: How much of a request's text and of an answer the online signals read: their cost grows
#: with the text (``pii_leaked`` compares every personal value with the answer), and they run
#: in the router, beside the callers. A contract broken in the first 4,000 characters is
#: broken; a request body may be 256 KB.
MAX_SCORED_CHARS = 4_000
#: Personal values and facts of one request compared with the answer, at most.
MAX_VALUES, MAX_FACTS = 32, 64


def measurable(names: tuple[str, ...], source: str) -> tuple[str, ...]:
    """The named signals this request's text can show: ``facts_kept`` where it states a fact,
    ``pii_leaked`` where it holds a personal value; the others always."""
    source = source[:MAX_SCORED_CHARS]
    empty = {
        "facts_kept": lambda: not extract_facts(source),
        "pii_leaked": lambda: not personal_values(source),
    }
    return tuple(n for n in names if not (n in empty and empty[n]()))


def measure(
    names: tuple[str, ...] | list[str],
    source: str,
    answer: str,
    json_check: Callable[[Any], bool] | None = None,
) -> dict[str, float]:
    """The named signals of one answer to ``source`` (the request's text), each read over the
    first ``MAX_SCORED_CHARS`` of both (``json_valid`` reads the whole answer: a cut changes
    validity)."""
    whole = answer
    source, answer = source[:MAX_SCORED_CHARS], answer[:MAX_SCORED_CHARS]
    functions: Mapping[str, Callable[[], float]] = {
        "json_valid": lambda: json_valid(whole, json_check),
        "facts_kept": lambda: facts_kept(answer, source, MAX_FACTS),
        "pii_leaked": lambda: pii_leaked(answer, source, MAX_VALUES),
        "repetition": lambda: repetition(answer),
        "answered": lambda: answered(answer),
    }
    return {n: functions[n]() for n in names}
