"""The bounds a generation request is held to, by the router and by the model server alike.

The router refuses what the server would refuse, before a quota is charged or a SageMaker call
made; both take the bounds from here, so neither can drift from the other. Each part keeps its
own request model: the router's is the public API (stricter caps, greedy by default), the
server's the container contract SageMaker and vLLM's routes speak.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import AfterValidator, Field

#: Sampling bounds: a temperature is 0 (greedy) or at least MIN_TEMPERATURE; a repetition penalty
#: lies within REPETITION_PENALTY. Outside them logits overflow to inf/nan (5e-324 divides them
#: into infinity).
MIN_TEMPERATURE = 1e-2
REPETITION_PENALTY = (0.1, 10.0)
#: The largest JSON schema a request may carry, in bytes of its compact JSON text (the server's
#: own limit is OPTION_MAX_SCHEMA_BYTES, whose default this is).
MAX_SCHEMA_BYTES = 64 * 1024
#: Deepest nesting of objects and arrays a schema may have: the grammar vLLM compiles from it
#: grows with it.
MAX_SCHEMA_DEPTH = 32


def _temperature(v: float) -> float:
    if 0 < v < MIN_TEMPERATURE:
        raise ValueError(f"must be 0 (greedy) or at least {MIN_TEMPERATURE:g}")
    return v


def _encodable(v: str) -> str:
    """JSON may carry a lone surrogate (``"\\ud800"``), which no UTF-8 encoder takes: refused
    where the request is read, instead of failing a cache key or a payload later."""
    try:
        v.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("is not valid Unicode text (a lone surrogate)") from None
    return v


#: A temperature within the bounds (the default differs: the router's is greedy).
Temperature = Annotated[float, Field(ge=0.0, le=2.0), AfterValidator(_temperature)]
RepetitionPenalty = Annotated[float, Field(ge=REPETITION_PENALTY[0], le=REPETITION_PENALTY[1])]
#: Text that encodes as UTF-8.
Text = Annotated[str, AfterValidator(_encodable)]


def schema_depth(node: Any, level: int = 0) -> int:
    """How deep objects and arrays nest in ``node`` (counting stops past MAX_SCHEMA_DEPTH)."""
    if level > MAX_SCHEMA_DEPTH:
        return level
    if isinstance(node, dict):
        return max((schema_depth(v, level + 1) for v in node.values()), default=level)
    if isinstance(node, list):
        return max((schema_depth(v, level + 1) for v in node), default=level)
    return level


def schema_problem(schema: Any, max_bytes: int = MAX_SCHEMA_BYTES) -> str | None:
    """Why ``schema`` is outside the bounds (not an object, too large, too deep), or None.
    Whether it is a valid JSON Schema is the server's check (``jsonschema``)."""
    if not isinstance(schema, dict):
        return "must be a JSON object (a JSON Schema)"
    size = len(json.dumps(schema, separators=(",", ":")).encode())
    if size > max_bytes:
        return f"is {size} bytes, over the limit of {max_bytes}"
    if schema_depth(schema) > MAX_SCHEMA_DEPTH:
        return f"nests deeper than {MAX_SCHEMA_DEPTH} levels"
    return None
