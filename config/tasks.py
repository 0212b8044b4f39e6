"""Task profiles: the LoRA hyperparameters each native task trains with by default.

The values follow Table 1 of the seed article ("LoRA Multi-Adapter Orchestration"):
domain-heavy medical text needs a high rank and a high alpha; schema enforcement (sales to
JSON) is fine at rank 8 with alpha = 2r; tone/localization sits between 8 and 16. The three
tasks the table leaves out (PII redaction, sentiment neutralization, style transfer) are set
by analogy: redaction is structural like sales, the two rewrites are tonal like localization.

The profiles live in ``config`` (not ``training``) because validation needs them: a catalog
entry that does not override ``rank`` inherits its task's rank, and that effective rank is
what is checked against the base's ``max_lora_rank`` and what the capacity planner sizes.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class Targets(StrEnum):
    """Which linear layers a LoRA adapter wraps (the playground's "Attention vs. FF" switch)."""

    attention = "attention"
    mlp = "mlp"
    all_linear = "all-linear"


#: Qwen3 / Llama-style module names for each target group. PEFT matches them by suffix.
TARGET_MODULES: dict[Targets, tuple[str, ...]] = {
    Targets.attention: ("q_proj", "k_proj", "v_proj", "o_proj"),
    Targets.mlp: ("gate_proj", "up_proj", "down_proj"),
    Targets.all_linear: (
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
        "gate_proj",
        "up_proj",
        "down_proj",
    ),
}


class TaskProfile(BaseModel):
    """Default hyperparameters for one task; a catalog entry may override any field."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    task: str
    description: str
    metric: str = Field(description="held-out metric the evaluation gate compares against the base")
    rank: int = Field(gt=0)
    alpha: int = Field(gt=0)
    targets: Targets
    dropout: float = Field(ge=0.0, lt=1.0)
    learning_rate: float = Field(gt=0.0)
    epochs: float = Field(gt=0.0)
    max_steps: int = Field(default=-1, description="-1 means train by epochs")
    weight_decay: float = Field(ge=0.0)
    eval_steps: int = Field(gt=0)
    early_stopping_patience: int = Field(gt=0)
    batch_size: int = Field(default=16, gt=0)
    max_length: int = Field(default=384, gt=0, description="tokens per training record")
    instruction: str = Field(description="system prompt the task is trained and served with")
    minimums: dict[str, float] = Field(
        default_factory=dict,
        description="test-split floors the adapter must reach to be publishable, by metric",
    )
    maximums: dict[str, float] = Field(
        default_factory=dict, description="test-split ceilings (a leak rate), by metric"
    )


#: The schedule every profile shares (a GPU job's: epochs at 2e-4, early stopping on the
#: validation loss); an environment's training plan adapts it to its hardware.
SCHEDULE: dict[str, Any] = {
    "dropout": 0.05,
    "learning_rate": 2e-4,
    "epochs": 3,
    "weight_decay": 0.01,
    "eval_steps": 10,
    "early_stopping_patience": 5,
}

TASK_PROFILES: dict[str, TaskProfile] = {
    p.task: p
    for p in (
        TaskProfile(
            task="medical_shorthand",
            description="Expand clinical shorthand into full medical terminology.",
            metric="chrf",
            rank=64,
            alpha=128,
            targets=Targets.all_linear,
            **SCHEDULE,
            instruction="Expand the clinical shorthand into full medical terminology.",
            minimums={"faithfulness": 0.9},
        ),
        TaskProfile(
            task="sales_json",
            description="Turn a sales dialogue into a JSON record that satisfies the schema.",
            metric="json_field_f1",
            rank=8,
            alpha=16,
            targets=Targets.all_linear,
            **SCHEDULE,
            instruction="Extract the sales dialogue into JSON.",
            minimums={"json_valid": 0.95, "json_field_f1": 0.7},
        ),
        TaskProfile(
            task="singlish_to_standard",
            description="Rewrite Singaporean English (Singlish) as Standard English.",
            metric="chrf",
            rank=16,
            alpha=32,
            targets=Targets.all_linear,
            **SCHEDULE,
            instruction="Rewrite the Singlish sentence in Standard English.",
            minimums={"faithfulness": 0.8},
        ),
        TaskProfile(
            task="pii_redaction",
            description="Replace names, emails, phones, addresses and IDs with typed placeholders.",
            metric="pii_leak_rate",
            rank=8,
            alpha=16,
            targets=Targets.all_linear,
            **SCHEDULE,
            instruction="Redact every piece of personal information with typed placeholders.",
            minimums={"redaction_score": 0.9},
            maximums={"pii_leak_rate": 0.0},
        ),
        TaskProfile(
            task="sentiment_neutralization",
            description="Rewrite emotionally charged text in a neutral tone.",
            metric="chrf",
            rank=8,
            alpha=16,
            targets=Targets.all_linear,
            **SCHEDULE,
            instruction="Rewrite the text in a neutral tone.",
            minimums={"faithfulness": 0.8},
        ),
        TaskProfile(
            task="style_transfer",
            description="Rewrite informal text in a formal register.",
            metric="chrf",
            rank=16,
            alpha=16,
            targets=Targets.all_linear,
            **SCHEDULE,
            instruction="Rewrite the informal text in a formal register.",
            minimums={"faithfulness": 0.8},
        ),
    )
}


#: The metrics a task defined in the catalog may be gated on (``training.metrics.score``):
#: chrf and exact compare with the label; json_schema checks the output against the entry's
#: JSON Schema, then scores its fields; facts counts the input's facts the output keeps,
#: less the ones it invents or changes; redaction scores placeholders (type and place) and
#: counts any value of the input that survives, whatever its grouping.
CUSTOM_METRICS = ("chrf", "exact", "json_schema", "facts", "redaction")
#: What every metric reports beside its own columns (``METRIC_COLUMNS``).
COMMON_COLUMNS = ("score", "chrf", "exact_match", "faithfulness")
#: The per-example scores ``training.metrics.score`` reports for each metric: what floors and
#: ceilings may name.
METRIC_COLUMNS: dict[str, tuple[str, ...]] = {
    "chrf": COMMON_COLUMNS,
    "exact": COMMON_COLUMNS,
    "facts": (*COMMON_COLUMNS, "facts"),
    "json_schema": (*COMMON_COLUMNS, "json_valid", "json_field_f1"),
    "json_field_f1": (*COMMON_COLUMNS, "json_valid", "json_field_f1"),
    "redaction": (*COMMON_COLUMNS, "pii_leak_rate", "redaction_score"),
    "pii_leak_rate": (*COMMON_COLUMNS, "pii_leak_rate", "redaction_score"),
}
SCORE_COLUMNS = tuple(dict.fromkeys(c for cols in METRIC_COLUMNS.values() for c in cols))
#: Columns on a 0-100 scale; the others are shares in [0, 1].
PERCENT_COLUMNS = ("chrf",)
#: A redaction task's default ceiling: one value that survives is a leak.
REDACTION_MAXIMUMS = {"pii_leak_rate": 0.0}
#: Built-in tasks whose scorer needs nothing but the label, so a file may stand in for their
#: generator (the others read facts or PII values the generator records).
FILE_TASKS = ("sales_json",)

#: The seed article's table, by training-set size: "a high-rank LoRA with a high scaling
#: parameter" for a limited training set (under 100 examples), a lower rank for an expansive
#: one to prevent overfitting; alpha = 2r, the table's standard scale. The middle band is the
#: table's "standard to high" rank 16.
SIZE_RANKS = ((100, 64, 128), (1000, 16, 32))
LARGE_RANK = (8, 16)


def size_rank(records: int | None) -> tuple[int, int]:
    """(rank, alpha) for a dataset of ``records`` examples; an unknown size takes the middle
    band, which the entry can override with ``rank``/``alpha``."""
    if records is None:
        return SIZE_RANKS[1][1:]
    for below, rank, alpha in SIZE_RANKS:
        if records < below:
            return rank, alpha
    return LARGE_RANK


def custom_profile(
    task: str, *, instruction: str, metric: str, description: str, records: int | None
) -> TaskProfile:
    """The profile of a task a catalog entry defines itself: its instruction and metric, the
    size-based rank and alpha, and the built-in profiles' shared schedule."""
    rank, alpha = size_rank(records)
    return TaskProfile(
        task=task,
        description=description or f"custom task {task}",
        metric=metric,
        rank=rank,
        alpha=alpha,
        targets=Targets.all_linear,
        **SCHEDULE,
        instruction=instruction,
        maximums=dict(REDACTION_MAXIMUMS) if metric == "redaction" else {},
    )


#: What ``score`` reports as the headline for each gate metric.
HEADLINES = {
    "pii_leak_rate": "redaction_score",
    "redaction": "redaction_score",
    "exact": "exact_match",
    "json_schema": "json_field_f1",
}


def headline(metric: str) -> str:
    """What ``score`` measures for a task metric (the PII gate scores redaction, not leaks)."""
    return HEADLINES.get(metric, metric)
