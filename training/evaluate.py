"""The publish gate: an adapter against its base and against trivial answers, on the test split.

The adapter is run as it is served (the task instruction as the system turn, the input as the
user turn, the base tokenizer's chat template). Its rivals:

- the base under the same task contract: the instruction plus what the task's output must be
  (the JSON Schema; the placeholder names), with Qwen3's thinking turned off;
- the echo of the input: a rewrite that changes nothing keeps every fact;
- the nearest training label: the label of the training input most like the test input, a
  lookup that a test set made of a template's slot fills would reward;
- the most frequent training label: a classifier that learned only the prior.

The adapter passes when

- it beats the strongest of them (highest mean): the paired bootstrap's 95% interval of
  (adapter - rival) per example lies above zero (``metrics.paired_bootstrap``, resampling
  the records of one template combination, or one near-duplicate group, together), and
- it reaches the task profile's floors (``minimums``) and stays under its ceilings
  (``maximums``) on the test split.

The test split is used here and nowhere else: early stopping and checkpoint choice use the
validation split (``training.train``).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

import torch

from config.tasks import TaskProfile
from training.datasets import Record
from training.metrics import (
    PLACEHOLDER,
    SCORER_VERSION,
    Scores,
    headline,
    paired_bootstrap,
    score,
)

#: Test examples the gate scores (the split holds at least this many).
GATE_EXAMPLES = 64


def contract(
    profile: TaskProfile, schema: dict[str, Any] | None, placeholders: list[str] | None = None
) -> str:
    """The instruction with what the output must be spelled out, for the base: a base that is
    never told the JSON keys or the placeholder names scores near zero by construction.
    ``placeholders``: a redaction task's own (those its training labels use)."""
    from training.datasets.pii import PLACEHOLDERS

    text = profile.instruction
    if profile.metric == "redaction" and placeholders:
        text += (
            " Replace each value with its placeholder: "
            + ", ".join(placeholders)
            + "; keep every other word."
        )
    if schema is not None and headline(profile.metric) == "json_field_f1":
        text += (
            " Answer with one JSON object, and nothing else, that satisfies this JSON "
            f"Schema: {json.dumps(schema, separators=(',', ':'))}"
        )
    if profile.metric == "pii_leak_rate":
        text += (
            " Replace each value with its placeholder: "
            + ", ".join(PLACEHOLDERS.values())
            + "; keep every other word."
        )
    return text


def prompts(profile: TaskProfile, records: list[Record], tokenizer, system: str = "") -> list[str]:
    # enable_thinking=False: Qwen3's template otherwise lets the model think first, inside the
    # answer's token budget; templates without the switch ignore it.
    return [
        tokenizer.apply_chat_template(
            [
                {"role": "system", "content": system or profile.instruction},
                {"role": "user", "content": r.raw},
            ],
            add_generation_prompt=True,
            tokenize=False,
            enable_thinking=False,
        )
        for r in records
    ]


def _grams(text: str, n: int = 3) -> Counter[str]:
    text = " ".join(text.lower().split())
    return Counter(text[i : i + n] for i in range(max(1, len(text) - n + 1)))


def nearest_labels(records: list[Record], train: list[Record]) -> list[str]:
    """For each record, the label of the training record whose input is most alike (cosine
    of character trigram counts): the lookup a memorizing adapter would amount to."""
    index = [(_grams(t.raw), t.label) for t in train]
    norms = [math.sqrt(sum(v * v for v in g.values())) or 1.0 for g, _ in index]
    out = []
    for r in records:
        q = _grams(r.raw)
        qn = math.sqrt(sum(v * v for v in q.values())) or 1.0
        sims = [
            sum(c * g[k] for k, c in q.items() if k in g) / (qn * gn)
            for (g, _), gn in zip(index, norms, strict=True)
        ]
        out.append(index[max(range(len(sims)), key=sims.__getitem__)][1])
    return out


def trivial_outputs(records: list[Record], train: list[Record]) -> dict[str, list[str]]:
    """The answers that need no model: the echo, the nearest training label, and the most
    frequent training label (what a classifier that learned only the prior would say)."""
    rivals = {"echo": [r.raw for r in records]}
    if train:
        rivals["nearest_label"] = nearest_labels(records, train)
        common = Counter(t.label for t in train).most_common(1)[0][0]
        rivals["most_frequent_label"] = [common for _ in records]
    return rivals


@torch.inference_mode()
def generate(model, tokenizer, texts: list[str], max_new_tokens: int, batch: int = 16) -> list[str]:
    tokenizer.padding_side = "left"
    outs: list[str] = []
    # Longest prompts first: rows of one batch then pad little.
    order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
    by_index: dict[int, str] = {}
    for i in range(0, len(order), batch):
        chunk = order[i : i + batch]
        enc = tokenizer(
            [texts[j] for j in chunk], return_tensors="pt", padding=True, add_special_tokens=False
        ).to(model.device)
        gen = model.generate(
            **enc,
            max_new_tokens=max_new_tokens,
            do_sample=False,
            pad_token_id=tokenizer.pad_token_id,
        )
        decoded = tokenizer.batch_decode(
            gen[:, enc["input_ids"].shape[1] :], skip_special_tokens=True
        )
        by_index.update(zip(chunk, decoded, strict=True))
    outs = [by_index[i].strip() for i in range(len(texts))]
    return outs


def gate(
    profile: TaskProfile,
    adapter: Scores,
    base: Scores,
    *,
    rivals: dict[str, Scores] | None = None,
    groups: list[str] | None = None,
    confidence: float = 0.95,
) -> dict[str, Any]:
    """The verdict from per-example scores: the bootstrap against the strongest rival (the
    base, or a trivial answer in ``rivals``), the floors and the ceilings."""
    every = {"base": base, **(rivals or {})}
    boots = {
        name: paired_bootstrap(
            adapter.per_example, s.per_example, confidence=confidence, groups=groups
        )
        for name, s in every.items()
    }
    strongest = max(every, key=lambda name: every[name].summary["score"])
    boot = boots[strongest]
    failures = []
    if boot["ci_low"] <= 0:
        failures.append(
            f"does not beat the strongest baseline, {strongest}: {confidence:.0%} interval of "
            f"the {profile.metric} difference is [{boot['ci_low']:.4g}, {boot['ci_high']:.4g}]"
        )
    for metric, floor in profile.minimums.items():
        if adapter.summary.get(metric, float("-inf")) < floor:
            failures.append(f"{metric} {adapter.summary.get(metric, 0):.3f} is below {floor}")
    for metric, ceiling in profile.maximums.items():
        if adapter.summary.get(metric, float("inf")) > ceiling:
            failures.append(f"{metric} {adapter.summary.get(metric, 0):.3f} is above {ceiling}")

    def rounded(b: dict[str, float]) -> dict[str, float]:
        return {k: round(v, 4) if isinstance(v, float) else v for k, v in b.items()}

    return {
        "bootstrap": rounded(boot),
        "strongest_baseline": strongest,
        "against": {name: rounded(b) for name, b in boots.items()},
        "beats_base": boots["base"]["ci_low"] > 0,
        "publishable": not failures,
        "failures": failures,
    }


def _outputs_key(base_dir: Path, texts: list[str], tokens: int) -> str:
    manifest = Path(base_dir) / "base_manifest.json"
    ident = manifest.read_text() if manifest.exists() else str(Path(base_dir).resolve())
    payload = json.dumps([ident, texts, tokens])
    return hashlib.sha256(payload.encode()).hexdigest()[:24]


def output_budget(tokenizer, train: list[Record], max_length: int) -> int:
    """New tokens every system may write: twice the longest *training* label, and room for a
    closing brace. Sized from the test labels (as it was: their longest plus 8) it told each
    system how long the right answer is and cut a rambling one off just past it."""
    if not train:
        raise ValueError("the output budget is sized from the training labels; none given")
    longest = max(len(tokenizer(r.label)["input_ids"]) for r in train)
    return min(max_length, 2 * longest + 16)


def compare(
    base_dir: Path,
    adapter_dir: Path,
    profile: TaskProfile,
    records: list[Record],
    *,
    train: list[Record] | tuple[Record, ...],
    schema: dict[str, Any] | None = None,
    limit: int = GATE_EXAMPLES,
    cache_dir: Path | None = None,
    log=print,
) -> dict[str, Any]:
    """Scores of the base, of base+adapter and of the trivial answers on the same test
    records, and the verdict. ``train``: the training records the nearest-label lookup reads;
    ``schema``: the JSON Schema a valid output satisfies. The bootstrap resamples clusters:
    a generated record's templates (the slot fills of one combination of templates are not
    independent evidence), or a team's record's near-duplicate group (``Record.category``).

    The base's outputs depend only on the base, its prompt and the records, so with a
    ``cache_dir`` they are computed once per task and reused by every adapter of it.
    """
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    records = list(records[:limit])
    tok = AutoTokenizer.from_pretrained(base_dir)
    texts = prompts(profile, records, tok)
    used = sorted({p for t in train for p in PLACEHOLDER.findall(t.label)})
    base_texts = prompts(profile, records, tok, contract(profile, schema, used))
    tokens = output_budget(tok, list(train), profile.max_length)
    base = AutoModelForCausalLM.from_pretrained(base_dir).eval()
    cached = None
    if cache_dir is not None:
        key = _outputs_key(base_dir, base_texts, tokens)
        cached = Path(cache_dir) / f"base-{key}.json"
    if cached is not None and cached.exists():
        base_outputs = json.loads(cached.read_text())
    else:
        log(f"evaluating the base on {len(records)} test examples")
        base_outputs = generate(base, tok, base_texts, tokens)
        if cached is not None:
            cached.parent.mkdir(parents=True, exist_ok=True)
            cached.write_text(json.dumps(base_outputs))
    base_scores = score(profile.metric, base_outputs, records, schema=schema)
    rivals = {
        name: score(profile.metric, outs, records, schema=schema)
        for name, outs in trivial_outputs(records, list(train)).items()
    }
    log(f"evaluating the adapter on {len(records)} test examples")
    tuned = PeftModel.from_pretrained(base, adapter_dir).eval()
    outputs = generate(tuned, tok, texts, tokens)
    adapter_scores = score(profile.metric, outputs, records, schema=schema)
    groups = [r.template or r.category for r in records]
    verdict = gate(profile, adapter_scores, base_scores, rivals=rivals, groups=groups)
    return {
        "metric": profile.metric,
        "scorer": SCORER_VERSION,
        "split": "test",
        "examples": len(records),
        "base": {k: round(v, 4) for k, v in base_scores.summary.items()},
        "adapter": {k: round(v, 4) for k, v in adapter_scores.summary.items()},
        "baselines": {
            name: {k: round(v, 4) for k, v in sc.summary.items()} for name, sc in rivals.items()
        },
        **verdict,
        "samples": [
            {"raw": r.raw, "label": r.label, "output": o, "base_output": b}
            for r, o, b in zip(records[:3], outputs[:3], base_outputs[:3], strict=True)
        ],
    }
