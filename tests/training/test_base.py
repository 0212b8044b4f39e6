"""The local base loads, generates and takes a LoRA adapter exactly as the real base would."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import AutoModelForCausalLM, AutoTokenizer

from config import load_catalog
from config.compat import tokenizer_sha256
from training.base import PRESETS, build_base


def test_loads_with_auto_classes_and_generates(tiny_base: Path) -> None:
    tok = AutoTokenizer.from_pretrained(tiny_base)
    model = AutoModelForCausalLM.from_pretrained(tiny_base)
    assert model.config.model_type == "qwen3"
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": "pt c/o sob"}], add_generation_prompt=True, tokenize=False
    )
    assert prompt.startswith("<|im_start|>user\npt c/o sob<|im_end|>")
    assert prompt.endswith("<|im_start|>assistant\n")
    inputs = tok(prompt, return_tensors="pt")
    out = model.generate(**inputs, max_new_tokens=5, do_sample=False)
    assert out.shape[1] == inputs["input_ids"].shape[1] + 5


def test_tokenizer_round_trips_task_text(tiny_base: Path) -> None:
    tok = AutoTokenizer.from_pretrained(tiny_base)
    text = "pt 67yo f c/o sob x3d. plan cxr, asa po qd, f/u 2wk. Emoji-free ✓"
    assert tok.decode(tok(text)["input_ids"]) == text


def test_accepts_a_peft_lora_adapter(tiny_base: Path, tmp_path: Path) -> None:
    model = AutoModelForCausalLM.from_pretrained(tiny_base)
    cfg = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"])
    peft_model = get_peft_model(model, cfg)
    for name, p in peft_model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.5)  # make the adapter change the output
    peft_model.save_pretrained(tmp_path / "adapter")
    assert json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())["r"] == 4

    base = AutoModelForCausalLM.from_pretrained(tiny_base)
    ids = torch.tensor([[5, 6, 7, 8]])
    plain = base(ids).logits
    loaded = PeftModel.from_pretrained(base, tmp_path / "adapter")
    assert not torch.allclose(loaded(ids).logits, plain)


def test_build_is_deterministic_and_cached(tiny_base: Path, tmp_path: Path) -> None:
    again = build_base(tmp_path / "again", preset="tiny", seed=0, log=lambda _: None)
    assert tokenizer_sha256(again) == tokenizer_sha256(tiny_base)
    a = AutoModelForCausalLM.from_pretrained(tiny_base).state_dict()
    b = AutoModelForCausalLM.from_pretrained(again).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    messages: list[str] = []
    build_base(again, preset="tiny", seed=0, log=messages.append)
    assert messages == [f"base tiny: reusing {again}"]


@pytest.mark.parametrize("preset", ["local"])
def test_catalog_architecture_matches_the_builder(preset: str) -> None:
    """The catalog's compatibility tuple for the local base describes what the builder makes."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    arch = load_catalog().base_models["qwen3-local"].architecture
    p = PRESETS[preset]
    assert (arch.hidden_size, arch.intermediate_size, arch.num_hidden_layers) == (
        p.hidden_size,
        p.intermediate_size,
        p.num_hidden_layers,
    )
    assert (arch.num_attention_heads, arch.num_key_value_heads, arch.head_dim) == (
        p.num_attention_heads,
        p.num_key_value_heads,
        p.head_dim,
    )
    with torch.device("meta"):
        model = Qwen3ForCausalLM(
            Qwen3Config(
                vocab_size=arch.vocab_size,
                hidden_size=arch.hidden_size,
                intermediate_size=arch.intermediate_size,
                num_hidden_layers=arch.num_hidden_layers,
                num_attention_heads=arch.num_attention_heads,
                num_key_value_heads=arch.num_key_value_heads,
                head_dim=arch.head_dim,
                tie_word_embeddings=True,
            )
        )
    assert sum(t.numel() for t in model.parameters()) == arch.parameters
