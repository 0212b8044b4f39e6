"""How many tokens a prompt may take, without the base's tokenizer.

The router charges a request's prompt against the tenant's token quota before the model sees
it, and the router ships no tokenizer (the Lambda zip stays small, and one router serves one
base whose tokenizer lives in the container). The estimate must therefore not be one a tenant
can beat by choosing its text: UTF-8 bytes / 4, the rule of thumb for English, undercounted
digits (Qwen and SmolLM2 give each digit a token of its own), emoji, CJK and combining marks
by up to 4x (measured with the SmolLM2 tokenizer).

So each class of characters is charged at or above what a byte-level BPE tokenizer (Qwen's,
SmolLM2's, Llama 3's) can spend on it, on any text:

- a character outside ASCII: its UTF-8 bytes (a byte-level BPE never spends more than one token
  per byte; SentencePiece's byte fallback neither);
- an ASCII letter, digit, punctuation mark, symbol or control character: one each. Letters
  cannot be charged less: a run of rare pairs (``"qx" * 1000``) is one token per letter with
  SmolLM2's tokenizer, and so is a run whose case alternates;
- whitespace: one per character, except a single space before an ASCII letter, which these
  tokenizers' pre-tokenizers join to the letter (``" q"`` is one token, so a word with its
  space costs at most its letters).

Plain English is charged about 2.8x its real count (SmolLM2), hostile text at or above it (the tests
check both against SmolLM2's tokenizer). A chat turn also costs its template (role markers and
separators, ``MESSAGE_OVERHEAD``), and a request the adapter's own system instruction
(``Route.prompt_overhead``, computed from the catalog).
"""

from __future__ import annotations

import re

#: Tokens a chat template spends around each message: ChatML's ``<|im_start|>``, the role, a
#: newline, ``<|im_end|>`` and a newline; Llama 3's header tokens likewise (5 to 7). Measured
#: with SmolLM2's template: 64 one-character messages made 441 prompt tokens,
#: about 6.9 per message.
MESSAGE_OVERHEAD = 8

#: A single space joined to the ASCII letter after it (free), or any other character.
_FREE_SPACE = re.compile(r"(?<! ) (?=[A-Za-z])")


def text_tokens_bound(text: str) -> int:
    """An upper bound of ``text``'s tokens under a byte-level BPE tokenizer (see above)."""
    free = len(_FREE_SPACE.findall(text))
    return len(text.encode("utf-8", "surrogatepass")) - free


def chat_tokens_bound(contents: list[str]) -> int:
    """An upper bound of a chat's tokens: each message's text and its template."""
    return sum(text_tokens_bound(c) + MESSAGE_OVERHEAD for c in contents)
