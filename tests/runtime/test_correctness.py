"""Greedy outputs through the server (vLLM's CPU build, float32) equal a plain PEFT model with
only that adapter, alone and under 32 concurrent mixed requests with fewer device and host
slots than adapters. The adapters are foreign to the project: made with plain PEFT, attention
only, MLP only, all linear layers, mixed ranks (``rank_pattern``) and rank 64."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer

PROMPTS = [
    "pt 45yo m c/o sob and cp",
    "Rep: Hello, this is the sales desk.",
    "Alamak, I forgot my wallet lah",
    "This phone is absolute garbage!!!",
]
NEW = 10


@pytest.fixture(scope="module")
def reference(
    tiny_base: Path, adapters: dict[str, Path]
) -> dict[tuple[str | None, str], list[int]]:
    """Each adapter's greedy token ids from plain PEFT. Tokens, not text: on an untrained base
    many tokens are partial UTF-8 bytes, which vLLM's detokenizer rightly holds back."""
    tok = AutoTokenizer.from_pretrained(tiny_base)
    out: dict[tuple[str | None, str], str] = {}
    for name in [None, *adapters]:
        model = AutoModelForCausalLM.from_pretrained(tiny_base)
        if name is not None:
            model = PeftModel.from_pretrained(model, adapters[name])
        for prompt in PROMPTS:
            ids = tok(prompt, return_tensors="pt")
            gen = model.generate(**ids, max_new_tokens=NEW, do_sample=False)
            out[(name, prompt)] = gen[0, ids["input_ids"].shape[1] :].tolist()
    return out


@pytest.fixture(scope="module")
def registered(server, adapters) -> list[str]:
    for name, path in adapters.items():
        r = server.client.post("/adapters", json={"name": name, "src": str(path), "preload": False})
        assert r.status_code == 200, r.text
    return list(adapters)


def _ask(server, adapter: str | None, prompt: str) -> list[int]:
    r = server.invoke(adapter, inputs=prompt, parameters={"max_new_tokens": NEW, "details": True})
    assert r.status_code == 200, r.text
    return r.json()["token_ids"]


def test_each_adapter_alone_matches_plain_peft(server, registered, reference) -> None:
    assert len(registered) >= 3
    for name in [None, *registered]:
        for prompt in PROMPTS:
            assert _ask(server, name, prompt) == reference[(name, prompt)], (name, prompt)


def test_32_concurrent_mixed_requests_with_evictions_match_plain_peft(
    server, registered, reference
) -> None:
    before = _evictions(server)
    jobs = [(([None, *registered])[i % 5], PROMPTS[(i // 5) % len(PROMPTS)]) for i in range(32)]
    with ThreadPoolExecutor(max_workers=32) as pool:
        answers = list(pool.map(lambda job: _ask(server, *job), jobs))
    for job, answer in zip(jobs, answers, strict=True):
        assert answer == reference[job], job
    # 6 adapters over 2 host slots (OPTION_MAX_CPU_LORAS=2): vLLM evicted and reloaded, and
    # the registry saw it (it polls vLLM's list every two seconds).
    deadline = time.monotonic() + 10
    while _evictions(server) <= before and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _evictions(server) > before
    events = server.client.get("/trace", params={"limit": 1000}).json()["events"]
    assert any(e["event"] == "adapter_evict" and e["target"] == "disk" for e in events)


def _evictions(server) -> float:
    total = 0.0
    for line in server.client.get("/metrics").text.splitlines():
        if line.startswith('lora_adapter_cache_events_total{event="eviction",tier="host"}'):
            total += float(line.rsplit(" ", 1)[1])
    return total
