"""Runtime settings from the container environment (LMI-style OPTION_* names)."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path


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
    max_loras: int = 4
    max_cpu_loras: int = 16
    max_lora_rank: int = 64
    vram_headroom: float = 0.85
    max_batch_size: int = 16
    max_queue: int = 256
    max_input_tokens: int = 2048
    max_new_tokens: int = 1024
    default_max_new_tokens: int = 128
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
    #: Prompt tokens one iteration prefills before the running rows take their next step.
    max_prefill_tokens: int = 4096
    #: "continuous" (rows join and leave at every decode step) or "static" (a batch forms
    #: only when the previous one has finished; kept for the side-by-side benchmark).
    scheduler: str = "continuous"
    #: transformers' attention implementation. "sdpa" is the fast default; with "eager" a
    #: bfloat16 row's output does not depend on the padding its batch neighbours bring
    #: (PyTorch's SDPA kernels change the last bit with the key length; see README).
    attention: str = "sdpa"
    #: Bytes the LoRA layers may spend on per-row copies of A and B, to serve a batch that
    #: mixes adapters with two matrix products per layer (``runtime.lora``); beyond it they
    #: group rows by adapter instead.
    lora_gather_bytes: int = 256 * 1024**2

    def __post_init__(self) -> None:
        if self.attention not in ("sdpa", "eager"):
            raise SystemExit(f"OPTION_ATTENTION={self.attention!r} must be 'sdpa' or 'eager'")
        if self.scheduler not in ("continuous", "static"):
            raise SystemExit(
                f"OPTION_SCHEDULER={self.scheduler!r} must be 'continuous' or 'static'"
            )

    @classmethod
    def from_env(cls, model_dir: str | Path | None = None) -> Settings:
        md = model_dir or os.environ.get("SM_MODEL_DIR") or "/opt/ml/model"
        return cls(
            model_dir=Path(md),
            max_loras=_int("OPTION_MAX_LORAS", 4),
            max_cpu_loras=_int("OPTION_MAX_CPU_LORAS", 16),
            max_lora_rank=_int("OPTION_MAX_LORA_RANK", 64),
            vram_headroom=_float("OPTION_VRAM_HEADROOM", 0.85),
            max_batch_size=_int("OPTION_MAX_BATCH_SIZE", 16),
            max_queue=_int("OPTION_MAX_QUEUE", 256),
            max_input_tokens=_int("OPTION_MAX_INPUT_TOKENS", 2048),
            max_new_tokens=_int("OPTION_MAX_NEW_TOKENS", 1024),
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
            scheduler=os.environ.get("OPTION_SCHEDULER", "continuous"),
            attention=os.environ.get("OPTION_ATTENTION", "sdpa"),
            lora_gather_bytes=_int("OPTION_LORA_GATHER_BYTES", 256 * 1024**2),
        )
