"""A generation request as the server hands it to the engine, and what comes back.

The server validates the body and tokenizes; the engine turns a ``GenRequest`` into vLLM's
``SamplingParams`` and a LoRA request, runs it, and fills ``text``, ``finish_reason``, the
token counts and the timings, or raises ``EngineError`` with the HTTP status to answer.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from runtime.registry import AdapterRecord


class EngineError(Exception):
    """A request failed; ``status`` is the HTTP status the server answers with."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class GenParams:
    max_new_tokens: int = 128
    min_new_tokens: int = 0
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    repetition_penalty: float = 1.0
    stop: tuple[str, ...] = ()
    seed: int | None = None
    do_sample: bool = False
    #: Decode constrained to this JSON schema (vLLM's structured outputs).
    json_schema: dict[str, Any] | None = None
    #: Answer with the generated token ids too (``token_ids``): text alone cannot show
    #: tokens whose bytes are not yet valid UTF-8, which the detokenizer holds back.
    details: bool = False

    @property
    def greedy(self) -> bool:
        return not self.do_sample or self.temperature == 0


@dataclass(eq=False)
class GenRequest:
    adapter: str | None
    input_ids: list[int]
    params: GenParams
    arrival: float = field(default_factory=time.perf_counter)
    #: Filled by the engine.
    record: AdapterRecord | None = None
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    finish_reason: str | None = None
    timings: dict[str, float] = field(default_factory=dict)
    #: Counted in the engine's admitted requests and its adapter's in-flight count.
    admitted: bool = False
    #: What a base request reports serving: a merged adapter's identity (``runtime.merged``).
    artifact: dict[str, Any] | None = None
    #: Streamed (vLLM sends each step's new text) or not (vLLM sends the finished answer once,
    #: as ``vllm serve`` asks for non-streaming requests: no wake-up per step).
    stream: bool = False
    #: Who sent it (``contracts.fairness``): the engine's fair queue counts in-flight requests
    #: per key, and the count at admission is this request's priority in vLLM's queue.
    fair_key: str = "anonymous"
    priority: int = 0

    def result(self) -> dict[str, Any]:
        return {
            "generated_text": self.text,
            "adapter": self.adapter,
            "adapter_version": self.record.version if self.record else None,
            # What the container actually served: the artifact's manifest name and version and
            # its weights' sha256 (None for the base model).
            "artifact": self.record.identity if self.record else self.artifact,
            "finish_reason": self.finish_reason,
            "usage": {"input_tokens": len(self.input_ids), "output_tokens": self.output_tokens},
            "timings_ms": {k: round(v, 3) for k, v in self.timings.items()},
            **({"token_ids": self.token_ids} if self.params.details else {}),
        }

    @property
    def output_tokens(self) -> int:
        return len(self.token_ids)
