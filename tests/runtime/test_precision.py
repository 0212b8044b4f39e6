"""Exactness in the production dtype: on a bfloat16 base the engine's greedy outputs equal a
plain PEFT model's (which keeps LoRA weights and arithmetic in float32) with the same
attention implementation. Alone with either; in mixed concurrent batches (rows joining and
leaving, padded to each other) with eager attention, whose bfloat16 results do not depend on
the padding (PyTorch's SDPA kernels change the last bit with the key length)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer

from runtime.engine import Engine
from runtime.request import GenParams, GenRequest
from runtime.settings import Settings

PROMPTS = ["pt 45yo m c/o sob and cp", "Rep: Hello, this is the sales desk.",
           "Alamak, I forgot my wallet lah", "This phone is absolute garbage!!!"]  # fmt: skip
NEW = 12


@pytest.fixture(scope="module")
def attention(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def reference(
    tiny_base: Path, adapters: dict[str, Path], attention: str
) -> dict[tuple[str | None, str], str]:
    tok = AutoTokenizer.from_pretrained(tiny_base)
    out: dict[tuple[str | None, str], str] = {}
    for name in [None, *adapters]:
        model = AutoModelForCausalLM.from_pretrained(
            tiny_base, dtype=torch.bfloat16, attn_implementation=attention
        )
        if name is not None:
            model = PeftModel.from_pretrained(model, adapters[name])
            lora = [p for n, p in model.named_parameters() if "lora_" in n]
            assert lora and all(p.dtype == torch.float32 for p in lora), "PEFT's own choice"
        for prompt in PROMPTS:
            ids = tok(prompt, return_tensors="pt")
            gen = model.generate(**ids, max_new_tokens=NEW, min_new_tokens=NEW, do_sample=False)
            out[(name, prompt)] = tok.decode(gen[0, ids["input_ids"].shape[1] :],
                                             skip_special_tokens=True)  # fmt: skip
    return out


@pytest.fixture(scope="module")
def engine(tiny_base: Path, adapters: dict[str, Path], attention: str,
           tmp_path_factory: pytest.TempPathFactory):  # fmt: skip
    e = Engine(Settings(model_dir=tiny_base, dtype="bfloat16", attention=attention, max_loras=4,
                        work_dir=tmp_path_factory.mktemp("work")))  # fmt: skip
    e.start()
    assert e.model.dtype == torch.bfloat16
    for name, path in adapters.items():
        e.cache.register(e.cache.validate(name, path), pin=False)
    yield e
    e.stop()


def _ask(engine: Engine, adapter: str | None, prompt: str) -> str:
    req = GenRequest(adapter=adapter, input_ids=engine.encode(prompt, None),
                     params=GenParams(max_new_tokens=NEW, min_new_tokens=NEW))  # fmt: skip
    return engine.wait(engine.submit(req), timeout=60)["generated_text"]


@pytest.mark.parametrize("attention", ["sdpa", "eager"], indirect=True, scope="module")
def test_bf16_single_requests_match_peft(engine, adapters, reference) -> None:
    for name in [None, *adapters]:
        for prompt in PROMPTS:
            assert _ask(engine, name, prompt) == reference[(name, prompt)], (name, prompt)


@pytest.mark.parametrize("attention", ["eager"], indirect=True, scope="module")
def test_bf16_mixed_batches_match_peft(engine, adapters, reference) -> None:
    jobs = [(([None, *adapters])[i % 5], PROMPTS[(i // 5) % len(PROMPTS)]) for i in range(40)]
    with ThreadPoolExecutor(max_workers=40) as pool:
        answers = list(pool.map(lambda job: _ask(engine, *job), jobs))
    for job, answer in zip(jobs, answers, strict=True):
        assert answer == reference[job], job
