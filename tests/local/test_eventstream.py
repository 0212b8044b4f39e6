"""The event-stream frames the local endpoint writes are what botocore reads."""

from __future__ import annotations

import json

from botocore.eventstream import EventStreamBuffer

from local import eventstream


def _decode(data: bytes) -> list:
    buf = EventStreamBuffer()
    buf.add_data(data)
    return list(buf)


def test_payload_parts_round_trip_through_botocores_decoder() -> None:
    chunks = [b'{"token": "he"}\n', b'{"token": "llo"}\n', "ünïcode ✓".encode()]
    messages = _decode(b"".join(eventstream.payload_part(c) for c in chunks))
    assert [m.payload for m in messages] == chunks
    assert {m.headers[":event-type"] for m in messages} == {"PayloadPart"}
    assert {m.headers[":message-type"] for m in messages} == {"event"}


def test_a_stream_error_is_an_exception_message_with_code_and_text() -> None:
    (m,) = _decode(eventstream.model_stream_error("ModelStreamError", "container died"))
    assert m.headers[":message-type"] == "exception"
    assert m.headers[":exception-type"] == "ModelStreamError"
    assert json.loads(m.payload) == {"ErrorCode": "ModelStreamError", "Message": "container died"}
