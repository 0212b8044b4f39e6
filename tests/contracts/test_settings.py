"""Each process's settings survive the trip through its environment, and a bad value is named
by the variable a user would edit."""

from __future__ import annotations

from pathlib import Path

import pytest

from contracts.settings import RouterSettings, RuntimeSettings, SettingsError


def test_what_to_env_writes_from_env_reads_back() -> None:
    runtime = RuntimeSettings(
        max_loras=6,
        max_cpu_loras=12,
        enable_lora=False,
        vram_headroom=0.8,
        request_timeout_s=120.0,
        dtype="bfloat16",
        quantization="fp8",
        base_model_id="Qwen/Qwen3-4B",
        work_dir=Path("/srv/work"),
    )
    assert RuntimeSettings.from_env(runtime.to_env()) == runtime
    exact = RuntimeSettings(request_timeout_s=1234567.0, max_expansion_ratio=float("inf"))
    assert RuntimeSettings.from_env(exact.to_env()) == exact
    router = RouterSettings(
        max_new_tokens_cap=256,
        invoke_deadline_s=25.5,
        cache_ttl_hours=1.5,
        trust_tenant_claim=True,
        quota_tokens_per_minute=9000,
    )
    assert RouterSettings.from_env(router.to_env()) == router


def test_only_what_a_deployment_sets_is_written_and_defaults_live_in_one_place() -> None:
    """A template holds the deployment's choices, not a copy of every default, so a default
    is written once (here) and a process reading an older template gets today's."""
    env = RuntimeSettings(max_loras=2, base_revision=None).to_env()
    assert env == {"OPTION_MAX_LORAS": "2"}
    assert RuntimeSettings.from_env({}).max_queue == RuntimeSettings.default("max_queue")
    # The platform's own variables are read, never written.
    assert RuntimeSettings(model_dir=Path("/m")).to_env() == {}
    assert RuntimeSettings.from_env({"SM_MODEL_DIR": "/m"}).model_dir == Path("/m")
    assert RouterSettings.from_env({"AWS_DEFAULT_REGION": "eu-west-1"}).region == "eu-west-1"


def test_an_empty_variable_means_the_default() -> None:
    assert RuntimeSettings.from_env({"OPTION_MAX_LORAS": "", "BASE_REVISION": ""}) == (
        RuntimeSettings()
    )


@pytest.mark.parametrize(
    ("environ", "named"),
    [
        ({"OPTION_MAX_LORAS": "four"}, "OPTION_MAX_LORAS='four'"),
        ({"OPTION_VRAM_HEADROOM": "1.5"}, "OPTION_VRAM_HEADROOM='1.5'"),
        ({"OPTION_QUANTIZATION": "int3"}, "OPTION_QUANTIZATION='int3'"),
        ({"OPTION_ENABLE_LORA": "maybe"}, "OPTION_ENABLE_LORA='maybe'"),
        ({"OPTION_MAX_LORA_RANK": "1024"}, "OPTION_MAX_LORA_RANK='1024'"),
        ({"OPTION_MAX_LORAS": "8", "OPTION_MAX_CPU_LORAS": "4"}, "OPTION_MAX_CPU_LORAS=4 must"),
    ],
)
def test_a_bad_value_names_its_variable(environ: dict[str, str], named: str) -> None:
    with pytest.raises(SettingsError, match=named.replace("(", r"\(")):
        RuntimeSettings.from_env(environ)


def test_a_bad_router_value_names_its_variable() -> None:
    with pytest.raises(SettingsError, match="MAX_NEW_TOKENS_CAP='0'"):
        RouterSettings.from_env({"MAX_NEW_TOKENS_CAP": "0"})
    with pytest.raises(SettingsError, match="QUOTA_REQUESTS_PER_MINUTE='x'"):
        RouterSettings.from_env({"QUOTA_REQUESTS_PER_MINUTE": "x"})


def test_the_catalog_schema_takes_its_router_defaults_from_the_contract() -> None:
    """max_new_tokens_cap once had its default in four places."""
    from config.schema import RouterConfig, ServingConfig

    for field in (
        "max_new_tokens_cap",
        "max_stop_sequences",
        "max_body_bytes",
        "invoke_deadline_s",
        "stream_deadline_s",
    ):
        assert RouterConfig.model_fields[field].default == RouterSettings.default(field), field
    for field in ("max_cpu_loras", "vram_headroom"):
        assert ServingConfig.model_fields[field].default == RuntimeSettings.default(field), field
    # The batch is the planner's (config.plan: the KV cache's tokens), unless an environment
    # sets it.
    assert ServingConfig.model_fields["max_batch_size"].default is None
