"""Reading and validating a PEFT LoRA adapter directory against the served base.

Everything here runs before an adapter is handed to vLLM, and raises ``AdapterError`` naming the
defect: a rejected adapter leaves the registry and the engine as they were. vLLM would refuse
some of these shapes itself, but only when a request first uses the adapter (and then fails that
request); checking at registration turns each into a 424 that names the reason.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from contracts.manifests import AdapterManifest, ManifestError, PromptFormat, chat_prompt
from contracts.requests import MAX_SCHEMA_BYTES
from runtime.schemas import SchemaError, check_schema

_KEY = re.compile(
    r"^(?:base_model\.model\.)?(?P<module>.+)\.lora_(?P<ab>[AB])(?:\.[^.]+)?\.weight$"
)


class AdapterError(ValueError):
    """The adapter cannot be served; the message names the defect."""


#: The projections vLLM's LoRA layers wrap in the dense decoder architectures we serve (Llama,
#: Qwen2/3: ``qkv_proj`` and ``gate_up_proj`` are packed from these); embeddings and the LM head
#: would need vLLM's extra-vocabulary support, which it removed.
TARGETABLE = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
#: Files PEFT writes for adapters that add tokens: vLLM cannot serve a changed vocabulary.
EXTRA_VOCAB_FILES = ("new_embeddings.safetensors", "new_embeddings.bin", "added_tokens.json")


def base_modules(model_dir: Path) -> dict[str, tuple[int, int]]:
    """Every targetable projection of the base, with its (in_features, out_features), read from
    the safetensors headers: the engine holds the weights in another process, and a header read
    takes milliseconds where loading the model would take the base's size in memory."""
    from safetensors import safe_open

    index = model_dir / "model.safetensors.index.json"
    if index.is_file():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    else:
        files = sorted(p.name for p in model_dir.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no safetensors weights in {model_dir}")
    modules: dict[str, tuple[int, int]] = {}
    for fname in files:
        with safe_open(str(model_dir / fname), framework="numpy") as f:
            for key in f.keys():  # noqa: SIM118 - safe_open has keys(), not iteration
                module, _, leaf = key.rpartition(".")
                if leaf != "weight" or module.rsplit(".", 1)[-1] not in TARGETABLE:
                    continue
                shape = f.get_slice(key).get_shape()
                if len(shape) == 2:
                    modules[module] = (int(shape[1]), int(shape[0]))
    return modules


@dataclass(frozen=True)
class BaseIdentity:
    """What adapters are checked against: the served base and its module shapes."""

    model_id: str
    revision: str | None
    model_dir: str
    modules: dict[str, tuple[int, int]]  # module name -> (in_features, out_features)
    max_lora_rank: int

    def matches(self, claimed: str | None) -> bool:
        """Whether an adapter's ``base_model_name_or_path`` names this base exactly: its model
        id, or the directory it is served from. A look-alike (another path ending in the same
        directory name, another hub id) does not; an adapter naming no base is refused."""
        if not claimed:
            return False
        norm = claimed.rstrip("/")
        return norm in {self.model_id, self.model_dir.rstrip("/")}


@dataclass
class LoadedAdapter:
    name: str
    src: str
    version: str | None
    rank: int
    alpha: float
    targets: tuple[str, ...]
    #: Bytes of the LoRA weights (vLLM reads them from ``src`` itself).
    nbytes: int
    manifest: AdapterManifest | None = None
    identity: dict[str, str | None] = field(default_factory=dict)
    #: The chat shape the adapter was trained on (``chat_prompt``), or None for raw text.
    prompt: PromptFormat | None = None


def _read_json(path: Path, what: str) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise AdapterError(f"{what} missing: {path.name} not found in {path.parent}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise AdapterError(f"{what} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise AdapterError(f"{what} must be a JSON object")
    return data


#: A rank_pattern / alpha_pattern key: a module name or a dotted suffix of one. PEFT compiles
#: keys as regular expressions; a key such as ``(.|.)*X`` then backtracks for ever, so keys are
#: matched here as suffixes and anything else is refused.
PATTERN_KEY_RE = re.compile(r"^[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*$")
#: Bounds of what an adapter's numbers may be (larger values only make garbage).
MAX_ALPHA = 1.0e4
MAX_WEIGHT = 1.0e4


def _pattern_value(patterns: dict[str, Any], module: str, default: Any) -> Any:
    """PEFT's rank_pattern / alpha_pattern lookup: a key matches a module-name suffix."""
    for key, value in patterns.items():
        if module == key or module.endswith("." + key):
            return value
    return default


def _number(value: Any, field: str, *, integer: bool, upper: float) -> float:
    """A finite positive number (an int where ``integer``) within ``upper``, or AdapterError."""
    ok_type = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok_type:
        kind = "an integer" if integer else "a number"
        raise AdapterError(f"adapter_config.json field {field!r} must be {kind}")
    if not math.isfinite(value) or not 0 < value <= upper:
        raise AdapterError(f"adapter_config.json field {field!r} must be in (0, {upper:g}]")
    return value


#: Ranks beyond this are refused as malformed; the base's own max_lora_rank is checked after.
RANK_LIMIT = 1 << 16


def check_config(cfg: dict[str, Any]) -> None:
    """Type- and range-check every config value the server reads, naming the field."""
    _number(cfg.get("r"), "r", integer=True, upper=RANK_LIMIT)
    if "lora_alpha" in cfg:
        _number(cfg["lora_alpha"], "lora_alpha", integer=False, upper=MAX_ALPHA)
    for name, integer, upper in (
        ("rank_pattern", True, RANK_LIMIT),
        ("alpha_pattern", False, MAX_ALPHA),
    ):
        patterns = cfg.get(name)
        if patterns is None:
            continue
        if not isinstance(patterns, dict):
            raise AdapterError(f"adapter_config.json field {name!r} must be an object")
        for key, value in patterns.items():
            if not isinstance(key, str) or not PATTERN_KEY_RE.match(key):
                raise AdapterError(
                    f"adapter_config.json field {name!r}: key {str(key)[:80]!r} is not a module "
                    "name (letters, digits, '_' and '.'); keys are matched as name suffixes"
                )
            _number(value, f"{name}.{key}", integer=integer, upper=upper)
    targets = cfg.get("target_modules")
    if targets is not None and not (
        isinstance(targets, str)
        or (isinstance(targets, list) and all(isinstance(t, str) for t in targets))
    ):
        raise AdapterError("adapter_config.json field 'target_modules' must be names (strings)")


def _float32(t: torch.Tensor, module: str, which: str) -> np.ndarray:
    """A LoRA matrix as contiguous float32, converted with NumPy (bfloat16 has no NumPy type:
    its bits are the upper half of a float32's)."""
    if t.dtype == torch.bfloat16:
        bits = t.contiguous().view(torch.int16).numpy().astype(np.uint16).astype(np.uint32)
        return np.ascontiguousarray((bits << 16).view(np.float32))
    if t.dtype in (torch.float32, torch.float16, torch.float64):
        return np.ascontiguousarray(t.numpy(), dtype=np.float32)
    raise AdapterError(f"module {module!r}: lora_{which} is {t.dtype}, not a float type")


def _load_tensors(directory: Path) -> dict[str, torch.Tensor]:
    st = directory / "adapter_model.safetensors"
    if st.is_file():
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        try:
            return load_file(str(st), device="cpu")
        except (SafetensorError, OSError, ValueError) as exc:
            raise AdapterError(f"adapter weights do not load: {exc}") from None
    pt = directory / "adapter_model.bin"
    if pt.is_file():
        try:
            data = torch.load(pt, map_location="cpu", weights_only=True)
        except Exception as exc:  # torch raises many types for a corrupt pickle
            raise AdapterError(f"adapter weights do not load: {exc}") from None
        if not isinstance(data, dict):
            raise AdapterError("adapter_model.bin does not hold a state dict")
        return data
    raise AdapterError(
        "adapter weights missing: neither adapter_model.safetensors nor adapter_model.bin "
        f"in {directory}"
    )


def file_sha256(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def artifact_identity(directory: Path, manifest: AdapterManifest | None) -> dict[str, str | None]:
    """What the artifact says it is (manifest ``name`` and ``version``) and the sha256 of its
    weights, after checking every file hash the manifest records.

    SageMaker does not document that the adapter identifier it sends equals the component's
    name, so answers carry this identity instead: a smoke check compares it with the catalog.
    """
    recorded = manifest.files if manifest is not None else {}
    for fname, digest in recorded.items():
        path = directory / fname
        if "/" in fname or fname in ("", ".", "..") or not path.is_file():
            raise AdapterError(f"manifest.json lists {fname[:80]!r}, which is not in the artifact")
        if file_sha256(path) != digest:
            raise AdapterError(f"{fname} does not match the sha256 manifest.json records")
    weights = next(
        (
            directory / f
            for f in ("adapter_model.safetensors", "adapter_model.bin")
            if (directory / f).is_file()
        ),
        None,
    )
    sha = recorded.get(weights.name) if weights is not None else None
    if weights is not None and sha is None:
        sha = file_sha256(weights)
    return {
        "name": manifest.name if manifest is not None else None,
        "version": manifest.version if manifest is not None else None,
        "sha256": sha,
    }


def load_adapter(name: str, directory: Path, base: BaseIdentity) -> LoadedAdapter:
    """Validate ``directory`` as a LoRA adapter for ``base`` and load its weights on the CPU."""
    if not directory.is_dir():
        raise AdapterError(f"adapter source {str(directory)!r} is not a directory")
    cfg = _read_json(directory / "adapter_config.json", "adapter_config.json")
    try:
        manifest = AdapterManifest.load(directory)
    except ManifestError as exc:
        raise AdapterError(str(exc)) from None

    peft_type = str(cfg.get("peft_type", "")).upper()
    if peft_type != "LORA":
        raise AdapterError(f"peft_type is {cfg.get('peft_type')!r}; only LORA adapters are served")
    for flag, why in (
        ("use_dora", "DoRA adapters"),
        ("fan_in_fan_out", "fan_in_fan_out (Conv1D) adapters"),
    ):
        if cfg.get(flag):
            raise AdapterError(f"{why} are not supported ({flag}: true)")
    if cfg.get("modules_to_save"):
        raise AdapterError(
            f"modules_to_save {cfg['modules_to_save']!r} would replace base weights; not supported"
        )
    if cfg.get("bias", "none") != "none":
        raise AdapterError(f"bias {cfg['bias']!r} is not supported (only 'none')")
    extra = [f for f in EXTRA_VOCAB_FILES if (directory / f).is_file()]
    if extra:
        raise AdapterError(
            f"adapter adds vocabulary ({', '.join(extra)}); vLLM serves LoRA adapters over the "
            "base's own vocabulary only"
        )

    claimed = cfg.get("base_model_name_or_path")
    if manifest is not None:
        # A manifest is the compatibility record: it must name the base, exactly (the model
        # checks that it names one).
        trained_on = manifest.base
        if trained_on.model_id != base.model_id:
            raise AdapterError(
                f"base model mismatch: adapter was trained on {trained_on.model_id[:120]!r}, "
                f"this server serves {base.model_id!r}"
            )
        if base.revision and trained_on.revision != base.revision:
            raise AdapterError(
                f"base revision mismatch: adapter was trained on revision "
                f"{str(trained_on.revision)[:64]!r}, this server serves {base.revision!r}"
            )
    elif not base.matches(claimed):
        raise AdapterError(
            f"base model mismatch: adapter_config.json names {claimed!r}, "
            f"this server serves {base.model_id!r}"
        )

    check_config(cfg)
    r = int(cfg["r"])
    alpha = float(cfg.get("lora_alpha", r))
    ranks = [r, *[int(v) for v in (cfg.get("rank_pattern") or {}).values()]]
    if max(ranks) > base.max_lora_rank:
        raise AdapterError(
            f"rank {max(ranks)} greater than max_lora_rank {base.max_lora_rank} "
            "(OPTION_MAX_LORA_RANK)"
        )
    targets = cfg.get("target_modules")
    if isinstance(targets, list):
        leaves = {m.rsplit(".", 1)[-1] for m in base.modules}
        missing = [t for t in targets if t.rsplit(".", 1)[-1] not in leaves]
        if missing:
            raise AdapterError(
                f"target modules {missing} do not exist in the base (targetable: {sorted(leaves)})"
            )

    tensors = _load_tensors(directory)
    if not tensors:
        raise AdapterError("adapter weights doesn't contain tensors")
    pairs: dict[str, dict[str, torch.Tensor]] = {}
    for key, tensor in tensors.items():
        m = _KEY.match(key)
        if m is None:
            raise AdapterError(
                f"unsupported tensor {key!r}: only lora_A / lora_B weights are served"
            )
        pairs.setdefault(m["module"], {})[m["ab"]] = tensor
    targets_seen: set[str] = set()
    nbytes = 0
    for module, ab in sorted(pairs.items()):
        if module not in base.modules:
            leaf = module.rsplit(".", 1)[-1]
            why = "is not a targetable projection" if leaf not in TARGETABLE else "does not exist"
            raise AdapterError(f"target module {module!r} {why} in the base")
        if set(ab) != {"A", "B"}:
            raise AdapterError(f"module {module!r} has lora_{''.join(ab)} but not both A and B")
        a, b = ab["A"], ab["B"]
        fan_in, fan_out = base.modules[module]
        mr = _pattern_value(cfg.get("rank_pattern") or {}, module, r)
        if a.dim() != 2 or b.dim() != 2 or a.shape != (mr, fan_in) or b.shape != (fan_out, mr):
            raise AdapterError(
                f"module {module!r}: lora_A {tuple(a.shape)} / lora_B {tuple(b.shape)} do not fit "
                f"the base ({fan_out}x{fan_in}) at rank {mr}"
            )
        a32, b32 = _float32(a, module, "A"), _float32(b, module, "B")
        if not (np.isfinite(a32).all() and np.isfinite(b32).all()):
            raise AdapterError(f"module {module!r}: weights contain NaN or infinity")
        if max(float(np.abs(a32).max()), float(np.abs(b32).max())) > MAX_WEIGHT:
            raise AdapterError(f"module {module!r}: weights exceed {MAX_WEIGHT:g} in magnitude")
        targets_seen.add(module.rsplit(".", 1)[-1])
        nbytes += a.numel() * a.element_size() + b.numel() * b.element_size()

    version = (manifest.version if manifest is not None else None) or cfg.get("revision")
    return LoadedAdapter(
        name=name,
        src=str(directory),
        version=str(version) if version is not None else None,
        rank=max(ranks),
        alpha=alpha,
        targets=tuple(sorted(targets_seen)),
        nbytes=nbytes,
        manifest=manifest,
        identity=artifact_identity(directory, manifest),
        prompt=chat_prompt(manifest.prompt if manifest is not None else None),
    )


def default_schema(schema: dict[str, Any] | None) -> dict[str, Any] | None:
    """The JSON schema an adapter's manifest names for its requests (``json_schema``), checked
    as a request's schema is."""
    if schema is None:
        return None
    try:
        return check_schema(schema, max_bytes=MAX_SCHEMA_BYTES)
    except SchemaError as exc:
        raise AdapterError(f"manifest.json field 'json_schema': {exc}") from None
