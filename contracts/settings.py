"""Each process's settings, with the environment variable each is read from and its default.

Infra writes a process's environment into the template at synth; the local platform writes the
same environment for its own processes; the process reads it back at start. All three go through
the models here, so a field's name, type and default are written once, and a value that one side
writes the other can read. (``config.processes`` builds both models from a resolved deployment.)

Pydantic's own settings package reads an environment too, but it reads, never writes, and the
point of this module is the round trip; the mapping below is the few lines that takes.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from contracts.requests import MAX_SCHEMA_BYTES
from contracts.routing import RoutingTable


@dataclass(frozen=True)
class Env:
    """The environment variable a field is read from, and written to by ``to_env``."""

    name: str
    #: Names read when ``name`` is unset (the Lambda runtime sets AWS_REGION, boto3 reads both).
    fallbacks: tuple[str, ...] = ()
    #: Set by the platform the process runs on (SageMaker, Lambda), never written by ours.
    platform: bool = False


class SettingsError(ValueError):
    """A setting that does not parse or breaks a rule, named as the environment spells it."""


class EnvSettings(BaseModel):
    """A process's settings: fields annotated with ``Env`` travel through its environment."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    @classmethod
    def variables(cls) -> dict[str, Env]:
        """Field name to its environment variable, in declaration order."""
        return {
            name: meta
            for name, info in cls.model_fields.items()
            for meta in info.metadata
            if isinstance(meta, Env)
        }

    @classmethod
    def default(cls, field: str) -> Any:
        """A field's default, for the catalog schema's fields of the same setting."""
        return cls.model_fields[field].get_default(call_default_factory=True)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **given: Any) -> Self:
        """The settings a process starts with; an unset or empty variable takes the default.

        Values arrive as text and pydantic's lax mode parses them ("4" is 4, "false" is False).
        ``given`` wins over the environment (a command-line flag, a routing table file).
        """
        environ = os.environ if environ is None else environ
        values = dict(given)
        for field, env in cls.variables().items():
            if field in values:
                continue
            raw = next(
                (environ[n] for n in (env.name, *env.fallbacks) if environ.get(n, "") != ""), None
            )
            if raw is not None:
                values[field] = raw
        return cls.checked(**values)

    @classmethod
    def checked(cls, **values: Any) -> Self:
        """``cls(**values)``, with each problem named by its environment variable."""
        try:
            return cls(**values)
        except ValidationError as exc:
            names = cls.variables()
            problems = []
            for error in exc.errors(include_url=False):
                msg = error["msg"].removeprefix("Value error, ")
                if error["loc"] and error["loc"][0] in names:
                    field = str(error["loc"][0])
                    problems.append(f"{names[field].name}={values.get(field)!r}: {msg}")
                else:
                    problems.append(msg)
            raise SettingsError(f"{cls.__name__}: " + "; ".join(problems)) from None

    def replaced(self, **changes: Any) -> Self:
        """These settings with ``changes``, checked again; explicitly set fields stay set."""
        return self.checked(**self.model_dump(include=self.model_fields_set) | changes)

    def to_env(self) -> dict[str, str]:
        """The environment that ``from_env`` reads back as these settings.

        Only fields set explicitly are written: a default stays in this module, not copied into
        every template, so a process reading an older template still gets today's defaults.
        """
        out: dict[str, str] = {}
        for field, env in self.variables().items():
            value = getattr(self, field)
            if env.platform or field not in self.model_fields_set or value is None:
                continue
            out[env.name] = _text(value)
        return out


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        # Exact both ways: "120" for a whole number, repr's shortest round-trip text otherwise
        # (``:g`` would write 1234567.0 as 1.23457e+06).
        return str(int(value)) if value.is_integer() else repr(value)
    return str(value)


#: The ranks vLLM's LoRA config accepts as ``max_lora_rank`` (``vllm.config.lora.MaxLoRARanks``);
#: an OPTION_MAX_LORA_RANK between two of them preallocates at the next one up, while the
#: runtime still refuses adapters above the option itself.
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


def slot_rank(max_lora_rank: int) -> int:
    """The rank vLLM preallocates each device slot at, for a ``max_lora_rank`` option."""
    return next(r for r in VLLM_LORA_RANKS if r >= max_lora_rank)


Dtype = Annotated[str, Field(pattern="^(auto|bfloat16|float16|float32)$")]


class RuntimeSettings(EnvSettings):
    """The model server's options (LMI-style ``OPTION_*`` names).

    Each option keeps the meaning it had before vLLM became the engine; runtime/vllm_args.py
    turns them into vLLM's engine arguments, and the README's "Engine options" table lists the
    same mapping.
    """

    model_dir: Annotated[Path, Env("SM_MODEL_DIR", platform=True)] = Path("/opt/ml/model")
    #: Adapters in one batch: vLLM's ``max_loras``, preallocated on the device at max rank.
    max_loras: Annotated[int, Env("OPTION_MAX_LORAS"), Field(ge=1)] = 4
    #: Adapters vLLM keeps loaded in host memory: ``max_cpu_loras`` (at least ``max_loras``).
    max_cpu_loras: Annotated[int, Env("OPTION_MAX_CPU_LORAS"), Field(ge=1)] = 32
    max_lora_rank: Annotated[
        int, Env("OPTION_MAX_LORA_RANK"), Field(ge=1, le=VLLM_LORA_RANKS[-1])
    ] = 64
    #: False for a merged model's server (``runtime.merged``): no LoRA slots are preallocated
    #: and no adapter is registered, which is what makes merged serving faster.
    enable_lora: Annotated[bool, Env("OPTION_ENABLE_LORA")] = True
    #: The seed article's VRAM headroom: the share of device memory vLLM may take for weights,
    #: adapter slots and its paged KV cache (``gpu_memory_utilization``).
    vram_headroom: Annotated[float, Env("OPTION_VRAM_HEADROOM"), Field(gt=0, le=1)] = 0.92
    #: How long vLLM waits for its engine to start (its own variable; 600 s when unset:
    #: ``vllm/envs.py``). Deployments set it from SageMaker's start-up health-check timeout
    #: (``config.processes``), so vLLM never gives up before SageMaker does.
    engine_ready_timeout_s: Annotated[
        int | None, Env("VLLM_ENGINE_READY_TIMEOUT_S"), Field(ge=60)
    ] = None
    #: Sequences vLLM runs at once (``max_num_seqs``).
    max_batch_size: Annotated[int, Env("OPTION_MAX_BATCH_SIZE"), Field(ge=1)] = 16
    #: vLLM's waiting queue: "priority" orders it by the sender's requests in flight (fair
    #: queuing between tenants, ``contracts.fairness``) and keeps a quarter of the batch from
    #: any one sender while others are about (``runtime.engine.Engine.share_cap``); "fcfs"
    #: orders it by arrival alone, with no reserve.
    scheduling_policy: Annotated[Literal["priority", "fcfs"], Env("OPTION_SCHEDULING_POLICY")] = (
        "priority"
    )
    #: Requests the server admits at once (running or waiting in vLLM's queue); beyond: 503.
    max_queue: Annotated[int, Env("OPTION_MAX_QUEUE"), Field(ge=1)] = 256
    max_input_tokens: Annotated[int, Env("OPTION_MAX_INPUT_TOKENS"), Field(ge=1)] = 2048
    max_new_tokens: Annotated[int, Env("OPTION_MAX_NEW_TOKENS"), Field(ge=1)] = 1024
    default_max_new_tokens: Annotated[int, Env("OPTION_DEFAULT_MAX_NEW_TOKENS"), Field(ge=1)] = 128
    #: vLLM's ``max_model_len``: 0 means max_input_tokens + max_new_tokens.
    max_model_len: Annotated[int, Env("OPTION_MAX_MODEL_LEN"), Field(ge=0)] = 0
    max_body_bytes: Annotated[int, Env("OPTION_MAX_BODY_BYTES"), Field(ge=1)] = 6 * 1024 * 1024
    request_timeout_s: Annotated[float, Env("OPTION_REQUEST_TIMEOUT_S"), Field(gt=0)] = 60.0
    dtype: Annotated[Dtype, Env("OPTION_DTYPE")] = "auto"
    quantization: Annotated[str, Env("OPTION_QUANTIZATION"), Field(pattern="^(none|nf4|fp8)$")] = (
        "none"
    )
    base_model_id: Annotated[str | None, Env("BASE_MODEL_ID")] = None
    base_revision: Annotated[str | None, Env("BASE_REVISION")] = None
    base_tokenizer_sha256: Annotated[str | None, Env("BASE_TOKENIZER_SHA256")] = None
    #: Where adapter archives are extracted: by default ``lora-runtime`` in the temporary
    #: directory of the machine that runs the server (a default is never written by ``to_env``,
    #: so the synth machine's directory never reaches a template).
    work_dir: Annotated[Path, Env("OPTION_WORK_DIR")] = Field(
        default_factory=lambda: Path(tempfile.gettempdir()) / "lora-runtime"
    )
    max_artifact_bytes: Annotated[int, Env("OPTION_MAX_ARTIFACT_BYTES"), Field(ge=1)] = 8 * 1024**3
    max_expansion_ratio: Annotated[float, Env("OPTION_MAX_EXPANSION_RATIO"), Field(gt=1)] = 100.0
    #: Prompt tokens one engine step may schedule (vLLM's ``max_num_batched_tokens``).
    max_prefill_tokens: Annotated[int, Env("OPTION_MAX_PREFILL_TOKENS"), Field(ge=1)] = 4096
    #: Largest JSON schema a request may carry, in bytes of its JSON text.
    max_schema_bytes: Annotated[int, Env("OPTION_MAX_SCHEMA_BYTES"), Field(ge=2)] = MAX_SCHEMA_BYTES
    #: CPU build only: GiB of host memory for vLLM's KV cache (``VLLM_CPU_KVCACHE_SPACE``).
    #: 0 lets vLLM size it as OPTION_VRAM_HEADROOM of the memory node, which it refuses to
    #: start with when other processes hold more than the rest (a developer's machine does).
    cpu_kvcache_gib: Annotated[int, Env("OPTION_CPU_KVCACHE_GIB"), Field(ge=0)] = 1
    #: CPU build only: cores vLLM's OpenMP threads bind to ("all": every core this process
    #: may use; vLLM's own default reserves one and runs one thread).
    cpu_threads: Annotated[str, Env("OPTION_CPU_THREADS")] = "all"

    @model_validator(mode="after")
    def _host_holds_every_batch(self) -> Self:
        if self.max_cpu_loras < self.max_loras:
            raise ValueError(
                f"OPTION_MAX_CPU_LORAS={self.max_cpu_loras} must be at least "
                f"OPTION_MAX_LORAS={self.max_loras} (vLLM keeps every batch's adapters in host "
                "memory too)"
            )
        return self


class RouterSettings(EnvSettings):
    """The router Lambda's limits and connections.

    The routing table is not an environment variable: infra ships it as a file beside the code
    (``lambda_proxy/routing_table.json``), and the router passes it in.
    """

    #: The default routes nothing: no adapter is known, so every request is a 404.
    routing_table: RoutingTable = Field(
        default_factory=lambda: RoutingTable(endpoint="", base_component="")
    )
    max_new_tokens_cap: Annotated[int, Env("MAX_NEW_TOKENS_CAP"), Field(ge=1)] = 512
    max_stop_sequences: Annotated[int, Env("MAX_STOP_SEQUENCES"), Field(ge=0)] = 4
    max_body_bytes: Annotated[int, Env("MAX_BODY_BYTES"), Field(ge=1024)] = 262144
    invoke_deadline_s: Annotated[float, Env("INVOKE_DEADLINE_S"), Field(gt=0)] = 55.0
    #: How long a streamed generation may run (API Gateway streams up to 15 minutes).
    stream_deadline_s: Annotated[float, Env("STREAM_DEADLINE_S"), Field(gt=0)] = 120.0
    cache_ttl_hours: Annotated[float, Env("CACHE_TTL_HOURS"), Field(gt=0)] = 72.0
    redis_url: Annotated[str | None, Env("REDIS_URL")] = None
    redis_secret_arn: Annotated[str | None, Env("REDIS_SECRET_ARN")] = None
    sagemaker_endpoint_url: Annotated[str | None, Env("SAGEMAKER_ENDPOINT_URL")] = None
    region: Annotated[
        str | None, Env("AWS_REGION", fallbacks=("AWS_DEFAULT_REGION",), platform=True)
    ] = None
    #: Take the tenant from an authorizer's ``tenant`` claim; only where the environment puts
    #: such an authorizer in front of the API (infra sets none, so the IAM identity decides).
    trust_tenant_claim: Annotated[bool, Env("TRUST_TENANT_CLAIM")] = False
    #: Per-tenant limits across all adapters (a catalog entry may add its own): None = none.
    quota_requests_per_minute: Annotated[
        int | None, Env("QUOTA_REQUESTS_PER_MINUTE"), Field(ge=1)
    ] = None
    quota_tokens_per_minute: Annotated[int | None, Env("QUOTA_TOKENS_PER_MINUTE"), Field(ge=1)] = (
        None
    )

    @property
    def cache_ttl_s(self) -> int:
        return int(self.cache_ttl_hours * 3600)
