"""The schema vLLM decodes to: a length-bounded string cannot carry raw control characters
(xgrammar 0.2.8 compiles one to ``[^"\\\\\\r\\n]{min,max}``), and the caller's schema is what
answers are validated against."""

from __future__ import annotations

import json

import xgrammar as xgr

from runtime.schemas import for_decoding

RECORD = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name", "note"],
    "properties": {
        "name": {"type": "string", "maxLength": 8},
        "note": {"type": ["string", "null"], "minLength": 2},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 4}},
        "code": {"type": "string", "pattern": "^[A-Z]{3}$", "maxLength": 3},
        "type": {"enum": ["a", "b"], "default": {"type": "string", "maxLength": 1}},
    },
}


def _accepts(schema: dict, text: str) -> bool:
    grammar = xgr.Grammar.from_json_schema(
        json.dumps(schema), any_whitespace=False, separators=(",", ":")
    )
    return xgr.testing._is_grammar_accept_string(grammar, text)


def test_bounded_strings_refuse_raw_control_characters_and_keep_their_bounds() -> None:
    raw = '{"name":"ab\x1ecd","note":"ok"}'
    assert _accepts(RECORD, raw), "xgrammar's own bounded string lets it through"
    decoding = for_decoding(RECORD)
    assert not _accepts(decoding, raw)
    assert _accepts(decoding, '{"name":"abcd","note":"ok"}')
    assert not _accepts(decoding, '{"name":"abcdefghi","note":"ok"}')  # maxLength 8
    assert not _accepts(decoding, '{"name":"a","note":"o"}')  # minLength 2
    assert json.loads('{"name":"abcd","note":"ok"}')


def test_the_callers_schema_and_data_keywords_are_left_alone() -> None:
    before = json.dumps(RECORD, sort_keys=True)
    decoding = for_decoding(RECORD)
    assert json.dumps(RECORD, sort_keys=True) == before
    props = decoding["properties"]
    assert props["tags"]["items"]["pattern"] == "^[^\\x00-\\x1f]{0,4}$"
    assert "maxLength" not in props["name"] and props["note"]["pattern"].endswith("{2,}$")
    assert props["code"] == RECORD["properties"]["code"]  # its own pattern decides
    assert props["type"]["default"] == {"type": "string", "maxLength": 1}  # data, not schema
