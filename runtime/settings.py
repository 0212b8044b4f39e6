"""Runtime settings from the container environment (LMI-style ``OPTION_*`` names).

Each option keeps the meaning it had before vLLM became the engine; ``engine_args`` says which
vLLM engine argument it becomes (the README's "Engine options" table lists the same mapping).
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: The ranks vLLM's LoRA config accepts as ``max_lora_rank`` (``vllm.config.lora.MaxLoRARanks``);
#: an OPTION_MAX_LORA_RANK between two of them preallocates at the next one up, while the
#: runtime still refuses adapters above the option itself.
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


def _int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise SystemExit(f"environment variable {name}={raw!r} is not an integer") from None


def _float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return float(raw)
    except ValueError:
        raise SystemExit(f"environment variable {name}={raw!r} is not a number") from None


@dataclass(frozen=True)
class Settings:
    model_dir: Path
    #: Adapters in one batch: vLLM's ``max_loras``, preallocated on the device at max rank.
    max_loras: int = 4
    #: Adapters vLLM keeps loaded in host memory: ``max_cpu_loras`` (at least ``max_loras``).
    max_cpu_loras: int = 16
    max_lora_rank: int = 64
    #: False for a merged model's server (``runtime.merged``): no LoRA slots are preallocated
    #: and no adapter is registered, which is what makes merged serving faster.
    enable_lora: bool = True
    #: The seed article's VRAM headroom: the share of device memory vLLM may take for weights,
    #: adapter slots and its paged KV cache (``gpu_memory_utilization``).
    vram_headroom: float = 0.85
    #: Sequences vLLM runs at once (``max_num_seqs``).
    max_batch_size: int = 16
    #: Requests the server admits at once (running or waiting in vLLM's queue); beyond: 503.
    max_queue: int = 256
    max_input_tokens: int = 2048
    max_new_tokens: int = 1024
    default_max_new_tokens: int = 128
    #: vLLM's ``max_model_len``: 0 means max_input_tokens + max_new_tokens.
    max_model_len: int = 0
    max_body_bytes: int = 6 * 1024 * 1024
    request_timeout_s: float = 60.0
    dtype: str = "auto"
    quantization: str = "none"
    base_model_id: str | None = None
    base_revision: str | None = None
    base_tokenizer_sha256: str | None = None
    work_dir: Path = Path(tempfile.gettempdir()) / "lora-runtime"
    max_artifact_bytes: int = 8 * 1024**3
    max_expansion_ratio: float = 100.0
    #: Prompt tokens one engine step may schedule (vLLM's ``max_num_batched_tokens``).
    max_prefill_tokens: int = 4096
    #: Largest JSON schema a request may carry, in bytes of its JSON text.
    max_schema_bytes: int = 64 * 1024
    #: CPU build only: GiB of host memory for vLLM's KV cache (``VLLM_CPU_KVCACHE_SPACE``).
    #: 0 lets vLLM size it as OPTION_VRAM_HEADROOM of the memory node, which it refuses to
    #: start with when other processes hold more than the rest (a developer's machine does).
    cpu_kvcache_gib: int = 1
    #: CPU build only: cores vLLM's OpenMP threads bind to ("all": every core this process
    #: may use; vLLM's own default reserves one and runs one thread).
    cpu_threads: str = "all"

    def __post_init__(self) -> None:
        if self.max_cpu_loras < self.max_loras:
            raise SystemExit(
                f"OPTION_MAX_CPU_LORAS={self.max_cpu_loras} must be at least "
                f"OPTION_MAX_LORAS={self.max_loras} (vLLM keeps every batch's adapters in host "
                "memory too)"
            )
        if not 1 <= self.max_lora_rank <= VLLM_LORA_RANKS[-1]:
            raise SystemExit(
                f"OPTION_MAX_LORA_RANK={self.max_lora_rank} must be 1 to {VLLM_LORA_RANKS[-1]}"
            )
        if not 0 < self.vram_headroom <= 1:
            raise SystemExit(f"OPTION_VRAM_HEADROOM={self.vram_headroom} must be in (0, 1]")
        if self.quantization not in ("none", "nf4", "fp8"):
            raise SystemExit(f"OPTION_QUANTIZATION={self.quantization!r} must be none, nf4 or fp8")
        if self.dtype not in ("auto", "bfloat16", "float16", "float32"):
            raise SystemExit(
                f"OPTION_DTYPE={self.dtype!r} must be auto, bfloat16, float16 or float32"
            )

    @property
    def model_len(self) -> int:
        """``OPTION_MAX_MODEL_LEN``, else the input and output limits together, but never past
        the model's own ``max_position_embeddings``: vLLM refuses to start beyond it (the
        local platform's small Qwen3 has 1,024 positions, under the default 3,072)."""
        if self.max_model_len:
            return self.max_model_len
        wanted = self.max_input_tokens + self.max_new_tokens
        try:
            config = json.loads((self.model_dir / "config.json").read_text())
        except (OSError, ValueError):
            return wanted
        positions = config.get("max_position_embeddings")
        return min(wanted, positions) if isinstance(positions, int) and positions > 0 else wanted

    def engine_args(self, *, cuda: bool) -> dict[str, Any]:
        """vLLM's engine arguments for these settings (``AsyncEngineArgs(**...)``)."""
        args: dict[str, Any] = {
            "model": str(self.model_dir),
            "tokenizer": str(self.model_dir),
            "enable_lora": self.enable_lora,
            "max_num_seqs": self.max_batch_size,
            "max_model_len": self.model_len,
            "max_num_batched_tokens": max(self.max_prefill_tokens, self.model_len),
            "dtype": pick_dtype(self.dtype, cuda=cuda),
            # The runtime tokenizes (its chat encoding keeps user text from forging control
            # tokens) and detokenizes through vLLM; vLLM never loads remote code.
            "trust_remote_code": False,
            "seed": 0,
            # Compact JSON under a schema, as the adapters' labels are written: a grammar that
            # allows any whitespace lets a model spend its whole budget on it (measured: an
            # untrained model wrote tabs until max_new_tokens). vLLM sets this per engine, and
            # only for a named backend: xgrammar, its default.
            "structured_outputs_config": {"backend": "xgrammar", "disable_any_whitespace": True},
        }
        if self.enable_lora:
            args |= {
                "max_loras": self.max_loras,
                "max_cpu_loras": self.max_cpu_loras,
                "max_lora_rank": next(r for r in VLLM_LORA_RANKS if r >= self.max_lora_rank),
            }
        if cuda:
            args["gpu_memory_utilization"] = self.vram_headroom
        if self.quantization == "nf4":
            args["quantization"] = "bitsandbytes"
        elif self.quantization == "fp8":
            args["quantization"] = "fp8"
        return args

    @classmethod
    def from_env(cls, model_dir: str | Path | None = None) -> Settings:
        md = model_dir or os.environ.get("SM_MODEL_DIR") or "/opt/ml/model"
        return cls(
            model_dir=Path(md),
            max_loras=_int("OPTION_MAX_LORAS", 4),
            max_cpu_loras=_int("OPTION_MAX_CPU_LORAS", 16),
            max_lora_rank=_int("OPTION_MAX_LORA_RANK", 64),
            enable_lora=os.environ.get("OPTION_ENABLE_LORA", "true").lower() != "false",
            vram_headroom=_float("OPTION_VRAM_HEADROOM", 0.85),
            max_batch_size=_int("OPTION_MAX_BATCH_SIZE", 16),
            max_queue=_int("OPTION_MAX_QUEUE", 256),
            max_input_tokens=_int("OPTION_MAX_INPUT_TOKENS", 2048),
            max_new_tokens=_int("OPTION_MAX_NEW_TOKENS", 1024),
            max_model_len=_int("OPTION_MAX_MODEL_LEN", 0),
            max_body_bytes=_int("OPTION_MAX_BODY_BYTES", 6 * 1024 * 1024),
            request_timeout_s=_float("OPTION_REQUEST_TIMEOUT_S", 60.0),
            dtype=os.environ.get("OPTION_DTYPE", "auto"),
            quantization=os.environ.get("OPTION_QUANTIZATION", "none"),
            base_model_id=os.environ.get("BASE_MODEL_ID") or None,
            base_revision=os.environ.get("BASE_REVISION") or None,
            base_tokenizer_sha256=os.environ.get("BASE_TOKENIZER_SHA256") or None,
            work_dir=Path(
                os.environ.get("OPTION_WORK_DIR", Path(tempfile.gettempdir()) / "lora-runtime")
            ),
            max_artifact_bytes=_int("OPTION_MAX_ARTIFACT_BYTES", 8 * 1024**3),
            max_expansion_ratio=_float("OPTION_MAX_EXPANSION_RATIO", 100.0),
            max_prefill_tokens=_int("OPTION_MAX_PREFILL_TOKENS", 4096),
            max_schema_bytes=_int("OPTION_MAX_SCHEMA_BYTES", 64 * 1024),
            cpu_kvcache_gib=_int("OPTION_CPU_KVCACHE_GIB", 1),
            cpu_threads=os.environ.get("OPTION_CPU_THREADS", "all"),
        )


def pick_dtype(setting: str, *, cuda: bool) -> str:
    """``auto``: bfloat16 on a GPU of compute capability 8 or newer, float16 on older ones, and
    float32 on a CPU (where the answers are compared with PEFT's, token for token)."""
    if setting != "auto":
        return setting
    if cuda:
        import torch

        return "bfloat16" if torch.cuda.get_device_capability()[0] >= 8 else "float16"
    return "float32"
