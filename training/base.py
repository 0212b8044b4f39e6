"""Builds the local stand-in base model: Qwen3 architecture, made and trained on this machine.

No weights can be downloaded here, so the tests and the local platform serve a small model of
the real base's architecture, saved with ``save_pretrained`` and loaded back only through
``AutoModelForCausalLM`` / ``AutoTokenizer`` exactly as Qwen3-4B is. Its tokenizer is a
byte-level BPE trained with ``tokenizers`` on the project's own task text, with a ChatML chat
template like Qwen's. Everything is a function of the preset and the seed.

``python -m training.base --preset local --out .artifacts/base/qwen3-local``
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from config.compat import tokenizer_sha256

CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}"
)
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
#: Bumped whenever the recipe below changes what it builds (the catalog's ``revision``).
RECIPE_REVISION = "recipe-1"


@dataclass(frozen=True)
class Preset:
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    pretrain_steps: int
    max_position_embeddings: int = 1024


PRESETS: dict[str, Preset] = {
    # Unit tests: builds in about a second, untrained.
    "tiny": Preset(64, 128, 2, 4, 2, 16, 1024, pretrain_steps=0),
    # The local platform's base (catalog entry qwen3-local): briefly pre-trained on task text.
    "local": Preset(128, 384, 4, 4, 2, 32, 4096, pretrain_steps=300),
    # Serving benchmarks: 20-40 M parameters, weights random (speed does not depend on them).
    "bench": Preset(512, 1536, 8, 8, 4, 64, 4096, pretrain_steps=0),
}


def train_tokenizer(texts: list[str], vocab_size: int):  # -> PreTrainedTokenizerFast
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",  # noqa: S106 - a token, not a password
        pad_token="<|endoftext|>",  # noqa: S106
        additional_special_tokens=["<|im_start|>"],
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.padding_side = "left"
    return fast


def build_base(out: Path | str, preset: str = "tiny", seed: int = 0, log=print) -> Path:
    """Build (or reuse, when the same recipe is already there) the base in ``out``."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from training.datasets import corpus

    out = Path(out)
    p = PRESETS[preset]
    manifest_path = out / "base_manifest.json"
    wanted = {"recipe": RECIPE_REVISION, "preset": preset, "seed": seed, **asdict(p)}
    if manifest_path.exists():
        have = json.loads(manifest_path.read_text())
        if {k: have.get(k) for k in wanted} == wanted:
            log(f"base {preset}: reusing {out}")
            return out

    t0 = time.perf_counter()
    texts = corpus(seed=seed)
    tokenizer = train_tokenizer(texts, p.vocab_size)
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=p.hidden_size,
        intermediate_size=p.intermediate_size,
        num_hidden_layers=p.num_hidden_layers,
        num_attention_heads=p.num_attention_heads,
        num_key_value_heads=p.num_key_value_heads,
        head_dim=p.head_dim,
        max_position_embeddings=p.max_position_embeddings,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    losses = (
        _pretrain(model, tokenizer, texts, p.pretrain_steps, seed, log) if p.pretrain_steps else []
    )

    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    n_params = sum(t.numel() for t in model.parameters())
    manifest = {
        **wanted,
        "model_id": f"local/qwen3-{preset}",
        "revision": RECIPE_REVISION,
        "model_type": "qwen3",
        "parameters": n_params,
        "tokenizer_sha256": tokenizer_sha256(out),
        "pretrain_final_loss": losses[-1] if losses else None,
        "build_seconds": round(time.perf_counter() - t0, 2),
    }
    manifest_path.write_text(json.dumps(manifest, indent=2) + "\n")
    log(f"base {preset}: {n_params:,} parameters built in {manifest['build_seconds']} s -> {out}")
    return out


def _pretrain(model, tokenizer, texts: list[str], steps: int, seed: int, log) -> list[float]:
    """Plain causal-LM pre-training on the task text (inputs and outputs as separate texts).

    The model learns the language of the tasks, not the mappings: adapters still have to learn
    each task, and the evaluation gate still compares them against this base.
    """
    import torch

    gen = torch.Generator().manual_seed(seed)
    enc = tokenizer(texts, add_special_tokens=False)["input_ids"]
    eos = tokenizer.eos_token_id
    stream = [t for ids in enc for t in (*ids, eos)]
    block = 64
    n_blocks = len(stream) // block
    data = torch.tensor(stream[: n_blocks * block]).view(n_blocks, block)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / 20) * 0.5 * (1 + math.cos(math.pi * s / steps))
    )
    model.train()
    losses: list[float] = []
    for step in range(steps):
        idx = torch.randint(0, n_blocks, (32,), generator=gen)
        batch = data[idx]
        loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad()
        losses.append(loss.item())
        if step % 50 == 0 or step == steps - 1:
            log(f"  pre-train step {step + 1}/{steps} loss {losses[-1]:.3f}")
    model.eval()
    return losses


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m training.base", description=__doc__)
    ap.add_argument("--preset", choices=sorted(PRESETS), default="local")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    build_base(args.out, args.preset, args.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
