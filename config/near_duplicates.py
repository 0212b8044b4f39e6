"""What counts as "the same text, other slot values": the grouping every split keeps whole.

Two records are one group when their inputs or (text) outputs are equal once digits,
capitalized words (names, places), punctuation and the record's own slot values (where a
generator knows them) are masked, or when they share ``SHINGLE_WORDS`` masked words in a row
(a template, or a core sentence with other slot values). A run of words that a fifth of the
records or more repeat (a greeting, a signature) is boilerplate and joins nothing.

A team's file is split along these groups (``training.datasets.user``), and a split given in
the file is checked with them (``dataset_files.split_leaks``); a built-in generator's split
holds out whole templates and slot values, and ``training.datasets.common.build`` checks it
with the same grouping, so every split is held to one definition. No library does this: datasketch
and text-dedup find near-duplicate *documents* by MinHash, where a template filled with other
slot values shares too few shingles to be caught at a threshold that spares unrelated records.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Sequence

#: The share of records a masked sentence may appear in before it counts as boilerplate.
BOILERPLATE_SHARE = 0.2
#: Masked words in a row that, shared, tie two records into one group.
SHINGLE_WORDS = 6
#: Unmasked words a whole text, or a run of words, needs before it ties records together.
KEY_WORDS = 3
_MASKS = frozenset({"n", "0", "s"})

# A capitalized word after a lower-case word or a separator, or one that opens a line and is
# followed by a comma or a colon ("Sarah, the parcel..."): a name or a place, in any script
# ("Łukasz", "Zoë"), and in capitals when two words or more ("JOHN SMITH"). A capitalized
# word that opens a sentence ("Please", "The") is not masked. (Python's re has no \p{Lu}, so
# _names checks the case.)
_WORD = re.compile(r"[^\W\d_]+")


def _names(text: str) -> str:
    """The text with every name replaced by ``N`` (what ``mask`` does with names)."""
    words = list(_WORD.finditer(text))

    def spaced(k: int) -> bool:  # word k follows word k - 1 after one space
        return k > 0 and text[words[k - 1].end() : words[k].start()] == " "

    def capitals(k: int) -> bool:
        return 0 <= k < len(words) and len(words[k].group()) > 1 and words[k].group().isupper()

    out, last, masked_before = [], 0, False
    for k, m in enumerate(words):
        word, gap = m.group(), text[last : m.start()]
        prev = words[k - 1].group() if k else ""
        opens_line = m.start() == 0 or text[m.start() - 1] == "\n"
        after = (gap == " " and (masked_before or prev[-1:].islower())) or (
            gap.endswith(" ") and gap.strip() in (",", ";", ":")
        )
        listed = opens_line and text[m.end() : m.end() + 1] in (",", ":")
        capitalized = len(word) > 1 and word[0].isupper() and not word[1:].isupper()
        # Capitals are a name only as two words or more ("ask JOHN SMITH"): one word in
        # capitals is an acronym or emphasis ("via DHL", "I am NOT happy").
        in_run = capitals(k) and (
            (capitals(k + 1) and spaced(k + 1)) or (masked_before and capitals(k - 1))
        )
        masked = (after or listed) and (capitalized or in_run)
        out += [gap, "N" if masked else word]
        last, masked_before = m.end(), masked
    return "".join(out) + text[last:]


_DIGITS = re.compile(r"\d+")
_REPEATED = re.compile(r"\b(0|n)(?: \1\b)+")
_SENTENCES = re.compile(r"(?<=[.!?])\s+|\n+")


def _unslot(text: str, slots: Sequence[str]) -> str:
    """The text with each of its slot values (longest first) replaced by one placeholder."""
    for value in sorted({s for s in slots if s.strip()}, key=len, reverse=True):
        text = re.sub(rf"(?<!\w){re.escape(value)}(?!\w)", " S ", text, flags=re.IGNORECASE)
    return text


def mask(text: str, slots: Sequence[str] = ()) -> str:
    """A text with what varies between slot fills removed: the given slot values, digits,
    names, case and punctuation."""
    text = _names(_unslot(text, slots))
    text = _DIGITS.sub("0", text)
    text = " ".join(re.sub(r"[^\w]+", " ", text.lower()).split())
    # A number written in groups ("+65 8123 4567") or a name of several words is one value.
    return _REPEATED.sub(r"\1", text)


def _key(text: str, slots: Sequence[str]) -> str | None:
    """A whole masked text as a key, when enough of it is left to mean something: a title-case
    subject line or a date conversion masks to almost nothing ("subject n", "convert 0 to n"),
    and equal leftovers do not make two records one."""
    masked = mask(text, slots)
    kept = [w for w in masked.split() if w not in _MASKS]
    return masked if len(kept) >= KEY_WORDS else None


def _shingles(text: str, slots: Sequence[str]) -> set[str]:
    """Every run of ``SHINGLE_WORDS`` masked words, sentence by sentence (slot values are
    masked first: a value may hold a sentence break, as "Apt. 36" does)."""
    out: set[str] = set()
    for sentence in _SENTENCES.split(_unslot(text, slots)):
        words = mask(sentence).split()
        for i in range(len(words) - SHINGLE_WORDS + 1):
            run = words[i : i + SHINGLE_WORDS]
            # A run that is mostly placeholders ("n at n de n 0": an address format) says
            # little about the text around the values.
            if sum(w not in _MASKS for w in run) >= KEY_WORDS:
                out.add(" ".join(run))
    return out


def _structured(output: str) -> bool:
    """A JSON output: its values come from a small set by design (a category, a flag), so two
    records with one output are not near-duplicates; their inputs decide. So do short text
    outputs (a class label): only an output of ``SHINGLE_WORDS`` words or more is a text."""
    try:
        return isinstance(json.loads(output), dict | list)
    except ValueError:
        return False


def near_duplicate_groups(
    pairs: Sequence[tuple[str, str]],
    slots: Sequence[Sequence[str]] | None = None,
    *,
    boilerplate: bool = True,
) -> list[int]:
    """A group id per (input, output) pair; pairs that are near-duplicates share one.
    ``slots``: per pair, the slot values its generator filled in, masked like names.
    ``boilerplate=False``: a run of words joins records however many share it (a generator's
    templates have no signatures; a phrase they share is a shared template)."""
    parent = list(range(len(pairs)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    keys: list[set[str]] = []
    for n, (text, output) in enumerate(pairs):
        values = slots[n] if slots is not None else ()
        # The input itself, case and spacing aside, always: equal inputs are one group.
        ks = {"raw:" + " ".join(text.lower().split())} | {"s:" + s for s in _shingles(text, values)}
        if (key := _key(text, values)) is not None:
            ks.add("in:" + key)
        if not _structured(output) and len(mask(output).split()) >= SHINGLE_WORDS:
            ks |= {"s:" + s for s in _shingles(output, values)}
            if (key := _key(output, values)) is not None:
                ks.add("out:" + key)
        keys.append(ks)
    counts = Counter(k for ks in keys for k in ks)
    limit = max(2, int(BOILERPLATE_SHARE * len(pairs))) if boilerplate else len(pairs)
    first: dict[str, int] = {}
    for i, ks in enumerate(keys):
        for k in ks:
            if not k.startswith(("in:", "raw:")) and counts[k] > limit:
                continue
            if k in first:
                parent[find(i)] = find(first[k])
            else:
                first[k] = i
    roots: dict[int, int] = {}
    return [roots.setdefault(find(i), len(roots)) for i in range(len(pairs))]
