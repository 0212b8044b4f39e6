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
            dropout=0.05,
            learning_rate=2e-4,
            epochs=3,
            weight_decay=0.01,
            eval_steps=10,
            early_stopping_patience=5,
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
            dropout=0.05,
            learning_rate=2e-4,
            epochs=3,
            weight_decay=0.01,
            eval_steps=10,
            early_stopping_patience=5,
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
            dropout=0.05,
            learning_rate=2e-4,
            epochs=3,
            weight_decay=0.01,
            eval_steps=10,
            early_stopping_patience=5,
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
            dropout=0.05,
            learning_rate=2e-4,
            epochs=3,
            weight_decay=0.01,
            eval_steps=10,
            early_stopping_patience=5,
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
            dropout=0.05,
            learning_rate=2e-4,
            epochs=3,
            weight_decay=0.01,
            eval_steps=10,
            early_stopping_patience=5,
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
            dropout=0.05,
            learning_rate=2e-4,
            epochs=3,
            weight_decay=0.01,
            eval_steps=10,
            early_stopping_patience=5,
            instruction="Rewrite the informal text in a formal register.",
            minimums={"faithfulness": 0.8},
        ),
    )
}
