"""The settings each process of a deployment runs with.

infra writes them into the template (the model's container environment, the router function's
environment) and the local platform into its own processes' environments: both call these
functions, so the local platform runs the configuration it stands in for. What must differ
locally (paths on this machine, the CPU build's KV cache, connections) it sets on top, and
tests/local/test_environments.py names each such field.
"""

from __future__ import annotations

from config.loader import Deployment
from config.plan import plan
from contracts.settings import RouterSettings, RuntimeSettings

#: Options a merged model's server leaves out: it preallocates no LoRA slots.
LORA_OPTIONS = frozenset({"max_loras", "max_cpu_loras", "max_lora_rank"})


#: What the container does before vLLM starts waiting for its engine (imports of the API
#: process and of the spawned engine, the doctor), taken off SageMaker's start-up budget.
ENGINE_WAIT_MARGIN_S = 120


def engine_ready_timeout_s(startup_timeout_s: int) -> int:
    """vLLM's own limit on the engine's start, derived from the component's start-up
    health-check timeout. Left at vLLM's 600 s, a cold start that compiles and captures CUDA
    graphs for longer ends the process before SageMaker's 900 s are spent, and every retry
    does the same."""
    return max(60, startup_timeout_s - ENGINE_WAIT_MARGIN_S)


def runtime_settings(dep: Deployment) -> RuntimeSettings:
    """The base model server: device slots from the capacity planner, the base's identity."""
    s, base = dep.env.serving, dep.base
    capacity = plan(dep)
    return RuntimeSettings.checked(
        max_loras=capacity.max_loras,
        max_cpu_loras=s.max_cpu_loras,
        max_lora_rank=base.max_lora_rank,
        enable_lora=True,
        vram_headroom=s.vram_headroom,
        max_batch_size=capacity.max_num_seqs,
        dtype=base.dtype,
        quantization=base.quantization,
        request_timeout_s=dep.env.router.generation_timeout_s,
        base_model_id=base.model_id,
        base_revision=base.revision,
        base_tokenizer_sha256=base.tokenizer_sha256,
        engine_ready_timeout_s=engine_ready_timeout_s(s.startup_timeout_s),
    )


def merged_runtime_settings(dep: Deployment) -> RuntimeSettings:
    """A merged model's server (``runtime.merged``): the base's options without LoRA."""
    base = runtime_settings(dep)
    kept = base.model_dump(include=base.model_fields_set - LORA_OPTIONS)
    return RuntimeSettings.checked(**kept | {"enable_lora": False})


def router_settings(dep: Deployment) -> RouterSettings:
    """The router's limits (its connections are the stack's to give: Redis, the endpoint)."""
    r = dep.env.router
    return RouterSettings.checked(
        max_new_tokens_cap=r.max_new_tokens_cap,
        max_stop_sequences=r.max_stop_sequences,
        max_body_bytes=r.max_body_bytes,
        invoke_deadline_s=r.invoke_deadline_s,
        stream_deadline_s=r.stream_deadline_s,
        cache_ttl_hours=dep.env.cache.ttl_hours,
        quota_requests_per_minute=r.quota.requests_per_minute,
        quota_tokens_per_minute=r.quota.tokens_per_minute,
    )
