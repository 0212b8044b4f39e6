"""Whose request it is, as the router tells the model server: the key its fair queue orders by.

One tenant's flood must not queue a quiet tenant's request behind it. vLLM's engine queue is
first come, first served unless it runs with ``scheduling_policy="priority"``; then it admits
waiting requests by (priority, arrival). The runtime gives each request the number of requests
its sender already has in the server as its priority, so a sender with none in flight goes
first (``runtime.engine.Engine.admit``). The router names the sender in InvokeEndpoint's
``CustomAttributes``, which SageMaker forwards verbatim to the container as the
``X-Amzn-SageMaker-Custom-Attributes`` header (botocore's sagemaker-runtime model: at most 1,024
visible US-ASCII characters). Only the router's role may invoke the endpoint, so the container
trusts it; a request without it (an operator's smoke test) shares one anonymous key.

The key is a digest of the tenant (or the caller's ARN), not the name: the container's logs
need no caller identity, and an ARN may be longer than the header allows.
"""

from __future__ import annotations

import hashlib

HEADER = "x-amzn-sagemaker-custom-attributes"
#: Who a shadow mirror is: one sender for every mirror, so a mirror never lowers its caller's
#: own next request's priority. The runtime starts mirrors after every caller's request and never
#: gives them an overflow slot (``runtime.fair_gate``): a mirror takes no caller's share.
MIRROR = "shadow-mirror"
#: The attribute's name inside ``CustomAttributes`` (``key=value`` pairs, ``;``-separated).
ATTRIBUTE = "fair-key"
ANONYMOUS = "anonymous"


def fair_key(who: str) -> str:
    """The sender's key: 16 hex digits of its sha256 (ASCII, fixed length)."""
    return hashlib.sha256(who.encode()).hexdigest()[:16]


#: The mirrors' key, as the runtime sees it.
MIRROR_KEY = fair_key(MIRROR)


def overflow_slots(batch: int) -> int:
    """Sequences past the planned batch that vLLM may run, so a sender with nothing running
    starts at once while the batch is full (``runtime.fair_gate``): a quarter of the batch, at
    least two (two quiet tenants often send at the same moment; a third waits for the next
    slot, and goes first). vLLM's ``max_num_seqs`` is the batch plus these."""
    return max(2, batch // 4)


def custom_attributes(who: str) -> str:
    """The ``CustomAttributes`` value the router sends for this sender."""
    return f"{ATTRIBUTE}={fair_key(who)}"


def key_of(header: str | None) -> str:
    """The sender's key from the header's value, or ``ANONYMOUS`` when it names none."""
    for part in (header or "").split(";"):
        name, _, value = part.strip().partition("=")
        if name == ATTRIBUTE and value and len(value) <= 64 and value.isascii():
            return value
    return ANONYMOUS
