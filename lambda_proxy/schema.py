"""The client request schema: the shared bounds (``contracts.requests``) and the
environment's caps (the router's settings)."""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from contracts.requests import RepetitionPenalty, Temperature, Text, schema_problem


class Message(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: Literal["system", "user", "assistant"]
    content: Text = Field(min_length=1)


class Parameters(BaseModel):
    model_config = ConfigDict(extra="forbid")
    max_new_tokens: int = Field(default=128, ge=1, strict=True)
    temperature: Temperature = 0.0
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    top_k: int = Field(default=0, ge=0, le=1000)
    repetition_penalty: RepetitionPenalty = 1.0

    stop: list[Text] = Field(default_factory=list)
    seed: int | None = Field(default=None, ge=0, lt=2**31)
    do_sample: bool = False
    #: Decode the answer to this JSON Schema (the runtime checks it against the metaschema and
    #: hands it to vLLM's structured outputs); part of the cache key like every parameter.
    json_schema: dict[str, Any] | None = None

    @field_validator("json_schema")
    @classmethod
    def _schema(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        if v is None:
            return v
        try:  # NaN and Infinity are not JSON: nothing downstream must guess what they mean
            text = json.dumps(v, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
            text.encode("utf-8")
        except ValueError as exc:  # UnicodeEncodeError is one: a lone surrogate
            raise ValueError(f"is not a JSON document: {exc}") from None
        if (problem := schema_problem(v)) is not None:
            raise ValueError(problem)
        return v

    @field_validator("max_new_tokens")
    @classmethod
    def _cap(cls, v: int, info: ValidationInfo) -> int:
        cap = (info.context or {}).get("max_new_tokens_cap")
        if cap is not None and v > cap:
            raise ValueError(f"must be at most {cap}")
        return v

    @field_validator("stop")
    @classmethod
    def _stops(cls, v: list[str], info: ValidationInfo) -> list[str]:
        cap = (info.context or {}).get("max_stop_sequences")
        if cap is not None and len(v) > cap:
            raise ValueError(f"at most {cap} stop sequences")
        if any(not s or len(s) > 64 for s in v):
            raise ValueError("stop sequences must be 1 to 64 characters")
        return v

    def within_cap(self, cap: int | None) -> None:
        """The default (128) is bounded by the environment's cap too, not only a given value."""
        if cap is not None and "max_new_tokens" not in self.model_fields_set:
            self.max_new_tokens = min(self.max_new_tokens, cap)

    @property
    def deterministic(self) -> bool:
        return not self.do_sample or self.temperature == 0


class GenerateRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    inputs: Text | None = Field(default=None, min_length=1)
    messages: list[Message] | None = Field(default=None, min_length=1, max_length=64)
    parameters: Parameters = Field(default_factory=Parameters)
    stream: bool = Field(default=False, strict=True)

    @model_validator(mode="after")
    def _one_prompt(self, info: ValidationInfo) -> GenerateRequest:
        if (self.inputs is None) == (self.messages is None):
            raise ValueError("give exactly one of 'inputs' or 'messages'")
        # Also when 'parameters' is absent (its default is built without the context).
        self.parameters.within_cap((info.context or {}).get("max_new_tokens_cap"))
        return self
