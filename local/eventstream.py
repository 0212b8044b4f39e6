"""Encoder for the AWS event-stream framing that InvokeEndpointWithResponseStream answers in.

botocore ships only the decoder (``botocore.eventstream``); nothing in our dependencies writes
the format, so the few lines that do live here. A message is a prelude (total length, headers
length, CRC32 of those eight bytes), string-typed headers, the payload and a CRC32 of everything
before it. ``tests/local/test_endpoint.py`` checks the bytes by reading them back with boto3.
"""

from __future__ import annotations

import json
import zlib

_STRING = 7  # header value type: UTF-8 string with a 2-byte length


def _header(name: str, value: str) -> bytes:
    n, v = name.encode(), value.encode()
    return len(n).to_bytes(1, "big") + n + bytes([_STRING]) + len(v).to_bytes(2, "big") + v


def message(headers: dict[str, str], payload: bytes) -> bytes:
    encoded = b"".join(_header(k, v) for k, v in headers.items())
    total = 12 + len(encoded) + len(payload) + 4
    prelude = total.to_bytes(4, "big") + len(encoded).to_bytes(4, "big")
    body = prelude + zlib.crc32(prelude).to_bytes(4, "big") + encoded + payload
    return body + zlib.crc32(body).to_bytes(4, "big")


def payload_part(data: bytes) -> bytes:
    """One ``PayloadPart`` event: a chunk of the container's response bytes."""
    return message(
        {
            ":event-type": "PayloadPart",
            ":content-type": "application/octet-stream",
            ":message-type": "event",
        },
        data,
    )


def model_stream_error(code: str, text: str) -> bytes:
    """A ``ModelStreamError`` exception event: the container failed mid-stream."""
    return message(
        {
            ":exception-type": "ModelStreamError",
            ":content-type": "application/json",
            ":message-type": "exception",
        },
        json.dumps({"ErrorCode": code, "Message": text}).encode(),
    )
