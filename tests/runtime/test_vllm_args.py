"""The runtime's options as vLLM's engine arguments."""

from __future__ import annotations

import json

from contracts.settings import RuntimeSettings
from runtime.vllm_args import engine_args


def _model(tmp_path, positions: int):
    (tmp_path / "config.json").write_text(json.dumps({"max_position_embeddings": positions}))
    return tmp_path


def test_the_model_length_never_passes_the_models_own_positions(tmp_path) -> None:
    """vLLM refuses to start when max_model_len exceeds the model's max_position_embeddings:
    the local platform's small Qwen3 (1,024) under the default 2,048 + 1,024 did exactly that,
    so `make up QUICK=1` never got its runtime up."""
    model = _model(tmp_path, 1024)
    assert engine_args(RuntimeSettings(model_dir=model), cuda=False)["max_model_len"] == 1024
    roomy = _model(tmp_path, 40960)
    assert engine_args(RuntimeSettings(model_dir=roomy), cuda=False)["max_model_len"] == 2048 + 1024
    assert (
        engine_args(RuntimeSettings(model_dir=model, max_model_len=512), cuda=False)[
            "max_model_len"
        ]
        == 512
    )


def test_a_merged_models_server_allocates_no_lora(tmp_path) -> None:
    model = _model(tmp_path, 4096)
    with_lora = engine_args(RuntimeSettings(model_dir=model), cuda=False)
    assert with_lora["enable_lora"] is True and with_lora["max_loras"] == 4
    without = engine_args(RuntimeSettings(model_dir=model, enable_lora=False), cuda=False)
    assert without["enable_lora"] is False
    assert not {"max_loras", "max_cpu_loras", "max_lora_rank"} & set(without)


def test_the_queue_is_fair_between_senders_unless_told_otherwise(tmp_path, monkeypatch) -> None:
    """vLLM's default queue is first come, first served, which lets one tenant's flood in
    front of everyone; the runtime asks for its priority queue (runtime.engine
    gives each request its sender's in-flight count as priority)."""
    model = _model(tmp_path, 4096)
    assert engine_args(RuntimeSettings(model_dir=model), cuda=True)["scheduling_policy"] == (
        "priority"
    )
    monkeypatch.setenv("OPTION_SCHEDULING_POLICY", "fcfs")
    monkeypatch.setenv("SM_MODEL_DIR", str(model))
    assert engine_args(RuntimeSettings.from_env(), cuda=True)["scheduling_policy"] == "fcfs"
