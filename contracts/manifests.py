"""The records that travel with model files: an adapter's ``manifest.json`` and a base's
``base_manifest.json``.

Training writes an adapter's manifest, publish and the local platform read it to decide what may
ship, and the model server reads it from the artifact it registers (the prompt format, the
base it was trained on, every file's sha256). One model for all of them, so a field one side
writes is a field the other reads. Fields the model server needs are checked strictly; the
training record (hyperparameters, dataset, evaluation) stays open, because it is evidence for
people and publish, and the server never acts on it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError

ADAPTER_MANIFEST = "manifest.json"
BASE_MANIFEST = "base_manifest.json"

#: Longest system instruction a manifest may carry (the server prepends it to every prompt).
MAX_SYSTEM_CHARS = 4096


class ManifestError(ValueError):
    """A manifest that does not parse, or a field that breaks its rule, named by its path."""


class _Record(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)
    #: The file a record of this kind is kept in, inside the directory it describes.
    FILE: ClassVar[str] = ""

    @classmethod
    def load(cls, directory: Path) -> Self | None:
        """The record in ``directory``, checked, or None when the directory has none."""
        path = Path(directory) / cls.FILE
        return cls.loads(path.read_bytes(), cls.FILE) if path.is_file() else None

    @classmethod
    def read(cls, directory: Path) -> Self:
        """The record in ``directory``, checked; an error when it has none."""
        record = cls.load(directory)
        if record is None:
            raise ManifestError(f"{Path(directory) / cls.FILE} not found")
        return record

    def dump(self, directory: Path) -> Path:
        path = Path(directory) / self.FILE
        path.write_text(self.dumps() + "\n")
        return path

    @classmethod
    def loads(cls, data: bytes | str, what: str) -> Self:
        """Parse and check ``data``; ``what`` names the file in an error."""
        try:
            raw = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ManifestError(f"{what} is not valid JSON: {exc}") from None
        return cls.parse(raw, what)

    @classmethod
    def parse(cls, raw: Any, what: str) -> Self:
        """Check ``raw`` (parsed JSON); ``what`` names the file in an error."""
        if not isinstance(raw, dict):
            raise ManifestError(f"{what} must be a JSON object")
        try:
            return cls.model_validate(raw)
        except ValidationError as exc:
            problems = [
                f"field {'.'.join(str(p) for p in e['loc'])!r}: {e['msg']}"
                if e["loc"]
                else e["msg"]
                for e in exc.errors(include_url=False)
            ]
            raise ManifestError(f"{what}: " + "; ".join(problems)) from None

    def as_json(self) -> dict[str, Any]:
        """The record as JSON data: the fields it was given (a default is not written)."""
        return self.model_dump(mode="json", exclude_unset=True)

    def dumps(self) -> str:
        return json.dumps(self.as_json(), indent=2, sort_keys=True)


class PromptFormat(_Record):
    """How requests must be shaped for the adapter: what the server applies to ``inputs`` and to
    a ``messages`` request without a system turn."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    format: Literal["chat", "raw"]
    system: str = Field(default="", max_length=MAX_SYSTEM_CHARS)
    input_role: Literal["user"] = "user"

    @property
    def chat(self) -> bool:
        return self.format == "chat"

    def messages(self, text: str) -> list[dict[str, str]]:
        """``text`` as the adapter's training records were shaped: the system turn, then it."""
        return [
            {"role": "system", "content": self.system},
            {"role": self.input_role, "content": text},
        ]


def chat_prompt(prompt: PromptFormat | None) -> PromptFormat | None:
    """The chat shape an adapter was trained on; None: it takes raw text (no ``prompt``, or
    ``format: raw``)."""
    return prompt if prompt is not None and prompt.chat else None


class BaseRef(_Record):
    """The base an adapter was trained on: the compatibility tuple."""

    model_id: str = Field(min_length=1)
    revision: str | None = None
    tokenizer_sha256: str | None = None
    #: The catalog's key for the base (training's record; the server does not need it).
    key: str | None = None
    dtype: str | None = None
    quantization: str | None = None


class TrainingRecord(_Record):
    #: The SageMaker training job that made the archive; publish reads its recorded metrics.
    job_name: str | None = None
    steps: int | None = None
    #: Whether early stopping ended the run, or the step cap (or the epochs) did.
    ended: Literal["early", "cap"] | None = None
    train_loss: float | None = None
    best_eval_loss: float | None = None
    seconds: float | None = None


class AdapterManifest(_Record):
    """An adapter artifact's ``manifest.json``.

    A manifest is optional in an artifact (a plain PEFT directory has none); when present it is
    the compatibility record, so it must name its base.
    """

    base: BaseRef
    name: str | None = None
    version: str | None = None
    task: str | None = None
    prompt: PromptFormat | None = None
    #: The catalog's default output schema: the server decodes to it when a request sent to the
    #: container directly names none.
    json_schema: dict[str, Any] | None = None
    #: Every file of the artifact but the manifest, with its sha256.
    files: dict[str, str] = Field(default_factory=dict)
    hyperparameters: dict[str, Any] = Field(default_factory=dict)
    dataset: dict[str, Any] = Field(default_factory=dict)
    training: TrainingRecord | None = None
    eval: dict[str, Any] | None = None
    FILE: ClassVar[str] = ADAPTER_MANIFEST


class BaseManifest(_Record):
    """What a base directory holds, as its builder recorded it (training/base.py)."""

    model_id: str = Field(min_length=1)
    revision: str | None = None
    tokenizer_sha256: str = Field(pattern="^[0-9a-f]{64}$")
    parameters: int | None = None
    FILE: ClassVar[str] = BASE_MANIFEST


class MergedAdapter(_Record):
    """The adapter a merged model directory holds, as the server reports it in answers."""

    name: str
    version: str
    #: The sha256 of the adapter archive that was merged.
    sha256: str | None = None
    #: The sha256 of its LoRA weights, which answers report (the router binds its cache to it).
    weights_sha256: str | None = None
    prompt: PromptFormat | None = None
    json_schema: dict[str, Any] | None = None


class MergedFiles(_Record):
    #: Every file of the merged directory but the manifest, with its sha256.
    files: dict[str, str]


class MergedManifest(_Record):
    """A merged model directory's ``merged_manifest.json`` (training/merge.py): the base it
    was merged into, the adapter merged, and the files the server checks at start."""

    format: Literal[1] = 1
    merged: MergedFiles
    base: BaseRef
    adapter: MergedAdapter
    FILE: ClassVar[str] = "merged_manifest.json"
