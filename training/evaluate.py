"""Adapter vs its base on the held-out split, with the task's metric (greedy, batched)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from config.tasks import TaskProfile
from training.datasets import Record
from training.metrics import score


def prompts(profile: TaskProfile, records: list[Record], tokenizer) -> list[str]:
    return [
        tokenizer.apply_chat_template(
            [
                {"role": "system", "content": profile.instruction},
                {"role": "user", "content": r.raw},
            ],
            add_generation_prompt=True,
            tokenize=False,
        )
        for r in records
    ]


@torch.inference_mode()
def generate(model, tokenizer, texts: list[str], max_new_tokens: int, batch: int = 32) -> list[str]:
    tokenizer.padding_side = "left"
    outs: list[str] = []
    for i in range(0, len(texts), batch):
        enc = tokenizer(texts[i : i + batch], return_tensors="pt", padding=True).to(model.device)
        gen = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False,
                             pad_token_id=tokenizer.pad_token_id)  # fmt: skip
        outs += tokenizer.batch_decode(
            gen[:, enc["input_ids"].shape[1] :], skip_special_tokens=True
        )
    return [o.strip() for o in outs]


def compare(
    base_dir: Path, adapter_dir: Path, profile: TaskProfile, records: list[Record], limit: int = 64
) -> dict[str, Any]:
    """Scores of the base and of base+adapter on the same held-out records."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    records = list(records[:limit])
    tok = AutoTokenizer.from_pretrained(base_dir)
    texts = prompts(profile, records, tok)
    longest = max(len(tok(r.label)["input_ids"]) for r in records)
    base = AutoModelForCausalLM.from_pretrained(base_dir).eval()
    base_scores = score(profile.metric, generate(base, tok, texts, longest + 4), records)
    tuned = PeftModel.from_pretrained(base, adapter_dir).eval()
    outputs = generate(tuned, tok, texts, longest + 4)
    adapter_scores = score(profile.metric, outputs, records)
    return {
        "metric": profile.metric,
        "examples": len(records),
        "base": {k: round(v, 4) for k, v in base_scores.items()},
        "adapter": {k: round(v, 4) for k, v in adapter_scores.items()},
        "beats_base": adapter_scores["score"] > base_scores["score"],
        "samples": [{"raw": r.raw, "label": r.label, "output": o}
                    for r, o in zip(records[:3], outputs[:3], strict=True)],
    }  # fmt: skip
