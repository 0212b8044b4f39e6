"""The prompt bound (``contracts.tokens``) against the local base's real tokenizer, on the text an
attacker would choose (a tighter rule per character class let a 2,000-token prompt be
charged 10) and on plain English, whose overcharge the docs state."""

from __future__ import annotations

import random
import string
from pathlib import Path

import pytest

from contracts.tokens import chat_tokens_bound, text_tokens_bound

ROOT = Path(__file__).resolve().parents[2]
_RNG = random.Random(7)

HOSTILE = {
    "space+tab": " \t" * 1000,
    "vertical tab+form feed": "\x0b\x0c" * 1000,
    "space+tab+newline": " \t\n" * 600,
    "CRLF": "\r\n" * 1000,
    "tabs": "\t" * 2000,
    "alternating case": "aAaA" * 500,
    "camel noise": "aBcDeFgHiJ" * 200,
    "rare pairs": "qx" * 1000,
    "rare pairs upper": "QX" * 1000,
    "space digit": " 1" * 1000,
    "space short word": " Zq" * 1000,
    "space control": " \x01" * 1000,
    "random letters": "".join(_RNG.choice(string.ascii_letters) for _ in range(2000)),
    "random punctuation": "".join(_RNG.choice(string.punctuation) for _ in range(2000)),
    "digits": "8491027365" * 200,
    "emoji": "😀" * 800,
    "CJK": "中" * 760,
    "combining": "é" * 1100,
}
ENGLISH = (
    "Patient seen by Dr Alvarez on 3 May, BP 140/90, HR 88 bpm, given 5 mg amlodipine. The "
    "patient reported mild headaches over the past two weeks and was advised to return if the "
    "symptoms persist or worsen. "
) * 8


@pytest.fixture(scope="module")
def tokens():
    from transformers import AutoTokenizer

    from training.base import SMOLLM2, build_local

    base = build_local(
        SMOLLM2.model_id, ROOT / ".artifacts" / "base" / "smollm2-local", log=lambda _: None
    )
    tok = AutoTokenizer.from_pretrained(base)
    return lambda text: len(tok(text, add_special_tokens=False)["input_ids"]), tok


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_text_is_charged_at_least_its_real_tokens(tokens, name) -> None:
    count, _ = tokens
    text = HOSTILE[name]
    assert text_tokens_bound(text) >= count(text) > 0


def test_a_chat_bound_covers_the_template_on_hostile_turns(tokens) -> None:
    _, tok = tokens
    turns = [HOSTILE["space+tab"], HOSTILE["rare pairs"], "k"]
    messages = [{"role": "system", "content": turns[0]}] + [
        {"role": "user", "content": t} for t in turns[1:]
    ]
    real = len(tok.apply_chat_template(messages, tokenize=True))
    assert chat_tokens_bound(turns) >= real


def test_plain_english_is_overcharged_as_the_docs_say(tokens) -> None:
    count, _ = tokens
    ratio = text_tokens_bound(ENGLISH) / count(ENGLISH)
    assert 2.5 <= ratio <= 3.1, ratio  # docs/router.md: "about 2.8x"
