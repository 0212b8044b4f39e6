"""The publish gate: adapter vs its base on the test split, with the task's metric.

Both are run greedily, batched, on the same prompts (the task instruction as the system turn,
the input as the user turn, in the base tokenizer's chat template). The adapter passes when

- it beats the base: the paired bootstrap's 95% interval of (adapter - base) per example lies
  above zero (``metrics.paired_bootstrap``), and
- it reaches the task profile's floors (``minimums``) and stays under its ceilings
  (``maximums``) on the test split.

The test split is used here and nowhere else: early stopping and checkpoint choice use the
validation split (``training.train``).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import torch

from config.tasks import TaskProfile
from training.datasets import Record
from training.metrics import Scores, paired_bootstrap, score

#: Test examples the gate scores (the split holds at least this many).
GATE_EXAMPLES = 64


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
def generate(model, tokenizer, texts: list[str], max_new_tokens: int, batch: int = 16) -> list[str]:
    tokenizer.padding_side = "left"
    outs: list[str] = []
    # Longest prompts first: rows of one batch then pad little.
    order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
    by_index: dict[int, str] = {}
    for i in range(0, len(order), batch):
        chunk = order[i : i + batch]
        enc = tokenizer([texts[j] for j in chunk], return_tensors="pt", padding=True,
                        add_special_tokens=False).to(model.device)  # fmt: skip
        gen = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False,
                             pad_token_id=tokenizer.pad_token_id)  # fmt: skip
        decoded = tokenizer.batch_decode(
            gen[:, enc["input_ids"].shape[1] :], skip_special_tokens=True
        )
        by_index.update(zip(chunk, decoded, strict=True))
    outs = [by_index[i].strip() for i in range(len(texts))]
    return outs


def gate(
    profile: TaskProfile, adapter: Scores, base: Scores, *, confidence: float = 0.95
) -> dict[str, Any]:
    """The verdict from per-example scores: the bootstrap, the floors and the ceilings."""
    boot = paired_bootstrap(adapter.per_example, base.per_example, confidence=confidence)
    failures = []
    if boot["ci_low"] <= 0:
        failures.append(
            f"does not beat the base: {confidence:.0%} interval of the {profile.metric} "
            f"difference is [{boot['ci_low']:.4g}, {boot['ci_high']:.4g}]"
        )
    for metric, floor in profile.minimums.items():
        if adapter.summary.get(metric, float("-inf")) < floor:
            failures.append(f"{metric} {adapter.summary.get(metric, 0):.3f} is below {floor}")
    for metric, ceiling in profile.maximums.items():
        if adapter.summary.get(metric, float("inf")) > ceiling:
            failures.append(f"{metric} {adapter.summary.get(metric, 0):.3f} is above {ceiling}")
    return {
        "bootstrap": {k: round(v, 4) if isinstance(v, float) else v for k, v in boot.items()},
        "beats_base": boot["ci_low"] > 0,
        "publishable": not failures,
        "failures": failures,
    }


def _outputs_key(base_dir: Path, profile: TaskProfile, records: list[Record], tokens: int) -> str:
    manifest = Path(base_dir) / "base_manifest.json"
    ident = manifest.read_text() if manifest.exists() else str(Path(base_dir).resolve())
    payload = json.dumps([ident, profile.instruction, [r.raw for r in records], tokens])
    return hashlib.sha256(payload.encode()).hexdigest()[:24]


def compare(
    base_dir: Path,
    adapter_dir: Path,
    profile: TaskProfile,
    records: list[Record],
    *,
    limit: int = GATE_EXAMPLES,
    cache_dir: Path | None = None,
    log=print,
) -> dict[str, Any]:
    """Scores of the base and of base+adapter on the same test records, and the verdict.

    The base's outputs depend only on the base, the instruction and the records, so with a
    ``cache_dir`` they are computed once per task and reused by every adapter of it.
    """
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    records = list(records[:limit])
    tok = AutoTokenizer.from_pretrained(base_dir)
    texts = prompts(profile, records, tok)
    longest = max(len(tok(r.label)["input_ids"]) for r in records)
    tokens = longest + 8
    base = AutoModelForCausalLM.from_pretrained(base_dir).eval()
    cached = None
    if cache_dir is not None:
        cached = Path(cache_dir) / f"base-{_outputs_key(base_dir, profile, records, tokens)}.json"
    if cached is not None and cached.exists():
        base_outputs = json.loads(cached.read_text())
    else:
        log(f"evaluating the base on {len(records)} test examples")
        base_outputs = generate(base, tok, texts, tokens)
        if cached is not None:
            cached.parent.mkdir(parents=True, exist_ok=True)
            cached.write_text(json.dumps(base_outputs))
    base_scores = score(profile.metric, base_outputs, records)
    log(f"evaluating the adapter on {len(records)} test examples")
    tuned = PeftModel.from_pretrained(base, adapter_dir).eval()
    outputs = generate(tuned, tok, texts, tokens)
    adapter_scores = score(profile.metric, outputs, records)
    verdict = gate(profile, adapter_scores, base_scores)
    return {
        "metric": profile.metric,
        "split": "test",
        "examples": len(records),
        "base": {k: round(v, 4) for k, v in base_scores.summary.items()},
        "adapter": {k: round(v, 4) for k, v in adapter_scores.summary.items()},
        **verdict,
        "samples": [{"raw": r.raw, "label": r.label, "output": o, "base_output": b}
                    for r, o, b in zip(records[:3], outputs[:3], base_outputs[:3], strict=True)],
    }  # fmt: skip
