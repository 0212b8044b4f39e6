"""LoRA SFT of one catalog entry: ``python -m training.train --adapter NAME``.

The same entry point runs on a laptop CPU and inside a SageMaker training job: there it reads
the SageMaker variables (``SM_MODEL_DIR`` for the output, ``SM_CHANNEL_BASE`` for the base
model, ``SM_HPS`` for the hyperparameters) and writes the packaged adapter to /opt/ml/model.

TRL's SFTTrainer with a PEFT LoRA config: prompt/completion chat records formatted with the
base tokenizer's own chat template, loss on the completion only, cosine schedule, weight decay,
LoRA dropout, bf16 -> fp16 -> fp32 by hardware, optional QLoRA. Early stopping and the choice
of checkpoint use the validation split; the test split is seen once, by the gate
(``training.evaluate``), after training.

The manifest records the prompt format the adapter learned (the task instruction as a system
turn, the input as the user turn, the base's chat template), so that the runtime can give a
plain-text ``inputs`` request the same shape.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformers import PrinterCallback, TrainerCallback

from config import (
    CATALOG_PATH,
    ENVIRONMENTS_DIR,
    TARGET_MODULES,
    AdapterEntry,
    Deployment,
    TaskProfile,
    load_deployment,
)
from config.dataset_files import DatasetFileError
from config.schema import NoCanaryError
from contracts.compat import tokenizer_sha256
from contracts.manifests import AdapterManifest, BaseManifest, BaseRef, PromptFormat, TrainingRecord
from training import datasets
from training.evaluate import compare
from training.metrics import headline
from training.package import pack, write_manifest
from training.publish import gate_line


@dataclass
class TrainResult:
    adapter: str
    archive: Path
    sha256: str
    manifest: AdapterManifest
    seconds: float


def recorded_hyperparameters(profile: TaskProfile, max_steps: int | None) -> dict[str, Any]:
    """What the manifest records: the profile, with the steps actually asked for (a capped run
    is not the profile's run). The local platform compares archives against this."""
    hp = profile.model_dump(mode="json")
    if max_steps is not None:
        hp["max_steps"] = max_steps
    return hp


def precision() -> dict[str, bool]:
    import torch

    if torch.cuda.is_available():
        if torch.cuda.is_bf16_supported():
            return {"bf16": True, "fp16": False}
        return {"bf16": False, "fp16": True}
    return {"bf16": False, "fp16": False}


@dataclass
class Job:
    """One training run's inputs, resolved from the catalog: the entry, its profile and the
    split it trains, validates and is gated on."""

    adapter: str
    dep: Deployment
    entry: AdapterEntry
    profile: TaskProfile
    version: str
    split: Any
    #: Where the records come from (``training.datasets.for_entry``): generator or file.
    identity: dict[str, Any]
    dataset_size: int


def resolve(
    adapter: str,
    *,
    env: str,
    base_dir: Path,
    dataset_size: int,
    catalog: Path | None,
    environments_dir: Path | None,
    canary: bool,
) -> Job:
    """The entry, its data and its version; refuses a base directory that holds another base."""
    dep = load_deployment(env, catalog or CATALOG_PATH, environments_dir or ENVIRONMENTS_DIR)
    resolved = dep.adapter(adapter)
    entry = resolved.entry
    catalog_dir = Path(catalog or CATALOG_PATH).parent
    split, identity = datasets.for_entry(entry, catalog_dir, dataset_size)
    built = BaseManifest.load(Path(base_dir))
    if built is not None and (built.model_id, built.revision) != (
        dep.base.model_id,
        dep.base.revision,
    ):
        raise ValueError(
            f"{base_dir} holds {built.model_id}@{built.revision}, but environment "
            f"{env!r} serves {dep.base.model_id}@{dep.base.revision}"
        )
    return Job(
        adapter,
        dep,
        entry,
        resolved.profile,
        entry.version_made(canary),
        split,
        identity,
        dataset_size,
    )


def sft_records(records: Any, instruction: str) -> Any:
    """Prompt/completion chat records: the instruction as the system turn, the input as the
    user's, the label as the assistant's (the shape the runtime gives an ``inputs`` request)."""
    from datasets import Dataset

    return Dataset.from_list(
        [
            {
                "prompt": [
                    {"role": "system", "content": instruction},
                    {"role": "user", "content": r.raw},
                ],
                "completion": [{"role": "assistant", "content": r.label}],
            }
            for r in records
        ]
    )


@dataclass
class Fitted:
    """What training left: the adapter directory and the run's own record."""

    adapter_dir: Path
    record: TrainingRecord


def fit(
    job: Job, base_dir: Path, out_dir: Path, *, qlora: bool, max_steps: int | None, log: Any
) -> Fitted:
    """LoRA SFT on the train split, early stopping on the validation split; the adapter saved
    under ``out_dir/NAME``."""
    import torch
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, EarlyStoppingCallback
    from trl import SFTConfig, SFTTrainer

    t0 = time.perf_counter()
    adapter, profile, split = job.adapter, job.profile, job.split
    tokenizer = AutoTokenizer.from_pretrained(base_dir)
    if job.identity["source"] == "file":
        check_lengths(adapter, job.entry.dataset or "", split, profile, tokenizer)
    kwargs: dict[str, Any] = {}
    prec = precision()
    if qlora:
        from transformers import BitsAndBytesConfig

        kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_quant_type="nf4",
            bnb_4bit_compute_dtype=torch.bfloat16 if prec["bf16"] else torch.float16,
        )
    model = AutoModelForCausalLM.from_pretrained(base_dir, **kwargs)
    lora = LoraConfig(
        r=profile.rank,
        lora_alpha=profile.alpha,
        lora_dropout=profile.dropout,
        target_modules=list(TARGET_MODULES[profile.targets]),
        task_type="CAUSAL_LM",
    )
    work = Path(tempfile.mkdtemp(prefix=f"train-{adapter}-"))
    steps = max_steps if max_steps is not None else profile.max_steps
    config = SFTConfig(
        output_dir=str(work),
        num_train_epochs=profile.epochs,
        max_steps=steps,
        learning_rate=profile.learning_rate,
        lr_scheduler_type="cosine",
        warmup_steps=5,
        weight_decay=profile.weight_decay,
        per_device_train_batch_size=profile.batch_size,
        per_device_eval_batch_size=profile.batch_size,
        eval_strategy="steps",
        eval_steps=profile.eval_steps,
        save_strategy="steps",
        save_steps=profile.eval_steps,
        save_total_limit=1,
        load_best_model_at_end=True,
        metric_for_best_model="eval_loss",
        greater_is_better=False,
        logging_steps=profile.eval_steps,
        report_to=[],
        use_cpu=not torch.cuda.is_available(),
        seed=job.entry.dataset_seed,
        max_length=profile.max_length,
        completion_only_loss=True,
        disable_tqdm=True,
        # TRL's default; it trades time for memory, which pays on a GPU with a 4B base only.
        gradient_checkpointing=torch.cuda.is_available(),
        **prec,
    )
    trainer = SFTTrainer(
        model=model,
        args=config,
        train_dataset=sft_records(split.train, profile.instruction),
        eval_dataset=sft_records(split.validation, profile.instruction),
        processing_class=tokenizer,
        peft_config=lora,
        callbacks=[
            EarlyStoppingCallback(early_stopping_patience=profile.early_stopping_patience),
            _Progress(adapter, log),
        ],
    )
    # The trainer's own per-log dict printer; _Progress reports evaluations in one line each.
    trainer.remove_callback(PrinterCallback)
    mode = "bf16" if prec["bf16"] else "fp16" if prec["fp16"] else "fp32"
    log(
        f"[{adapter}] training r={profile.rank} alpha={profile.alpha} targets={profile.targets} "
        f"on {len(split.train)} examples ({mode})"
    )
    if 0 < steps <= profile.eval_steps * profile.early_stopping_patience:
        log(
            f"[{adapter}] note: {steps} steps allow at most {steps // profile.eval_steps} "
            f"evaluations, so patience {profile.early_stopping_patience} cannot stop early; "
            "the step cap ends training (the manifest records which did)"
        )
    result = trainer.train()
    adapter_dir = out_dir / adapter
    if adapter_dir.exists():
        shutil.rmtree(adapter_dir)
    trainer.model.save_pretrained(adapter_dir)
    shutil.rmtree(work, ignore_errors=True)
    record = TrainingRecord(
        # SageMaker sets TRAINING_JOB_NAME in a training container (the SDK's own container
        # drivers read it); publish then checks the job's recorded metrics.
        job_name=os.environ.get("TRAINING_JOB_NAME"),
        steps=result.global_step,
        # Whether early stopping ended the run, or the step cap (or the epochs) did.
        ended="early" if result.global_step < trainer.state.max_steps else "cap",
        train_loss=round(result.training_loss, 4),
        best_eval_loss=trainer.state.best_metric,
        seconds=round(time.perf_counter() - t0, 1),
    )
    return Fitted(adapter_dir, record)


def gate(job: Job, base_dir: Path, adapter_dir: Path, out_dir: Path, log: Any) -> dict[str, Any]:
    """The evaluation gate on the test split, seen here for the first time (``compare``)."""
    adapter, profile, split = job.adapter, job.profile, job.split
    evaluation = compare(
        base_dir,
        adapter_dir,
        profile,
        list(split.test),
        train=split.train,
        schema=job.entry.json_schema_document,
        cache_dir=out_dir / ".base-outputs",
        log=lambda m: log(f"[{adapter}] {m}"),
    )
    boot = evaluation["bootstrap"]
    rival = evaluation["strongest_baseline"]
    rival_score = evaluation["base"] if rival == "base" else evaluation["baselines"][rival]
    verdict = (
        "publishable"
        if evaluation["publishable"]
        else "NOT publishable: " + "; ".join(evaluation["failures"])
    )
    log(
        f"[{adapter}] test {headline(profile.metric)}: "
        f"adapter {evaluation['adapter']['score']:.3f} vs {rival} {rival_score['score']:.3f} "
        f"(difference {boot['mean_diff']:.3f}, 95% CI [{boot['ci_low']:.3f}, "
        f"{boot['ci_high']:.3f}]) -> {verdict}"
    )
    return evaluation


def manifest_of(
    job: Job,
    base_dir: Path,
    *,
    qlora: bool,
    max_steps: int | None,
    record: TrainingRecord,
    evaluation: dict[str, Any],
) -> AdapterManifest:
    """What the archive says it is: the compatibility tuple, the profile, the dataset's
    identity, the prompt format, the run and the gate's verdict."""
    base, entry, split, identity = job.dep.base, job.entry, job.split, job.identity
    generated = identity["source"] == "generator"
    return AdapterManifest(
        name=job.adapter,
        version=job.version,
        task=entry.task,
        base=BaseRef(
            key=job.dep.base_key,
            model_id=base.model_id,
            revision=base.revision,
            tokenizer_sha256=tokenizer_sha256(base_dir),
            dtype=base.dtype,
            quantization="nf4" if qlora else base.quantization,
        ),
        hyperparameters=recorded_hyperparameters(job.profile, max_steps),
        dataset={
            "task": split.task,
            "seed": split.seed,
            "sha256": split.sha256(),
            "size": job.dataset_size if generated else identity["records"],
            **split.sizes(),
            "card": datasets.card(split.task)
            if generated
            else f"the team's own records: {entry.dataset}",
            **identity,
        },
        prompt=prompt_format(job.profile),
        # The catalog's default output schema: the runtime decodes to it when a request (sent
        # to the container directly, not through the router) names none.
        **({"json_schema": entry.json_schema_document} if entry.json_schema_document else {}),
        training=record,
        eval=evaluation,
    )


def train(
    adapter: str,
    *,
    env: str = "local",
    base_dir: Path,
    out_dir: Path,
    qlora: bool = False,
    max_steps: int | None = None,
    dataset_size: int = datasets.DEFAULT_SIZE,
    catalog: Path | None = None,
    environments_dir: Path | None = None,
    canary: bool = False,
    log=print,
) -> TrainResult:
    """Train, gate and package one catalog entry: ``out_dir/NAME.tar.gz``."""
    t0 = time.perf_counter()
    job = resolve(
        adapter,
        env=env,
        base_dir=base_dir,
        dataset_size=dataset_size,
        catalog=catalog,
        environments_dir=environments_dir,
        canary=canary,
    )
    fitted = fit(job, base_dir, out_dir, qlora=qlora, max_steps=max_steps, log=log)
    evaluation = gate(job, base_dir, fitted.adapter_dir, out_dir, log)
    record = fitted.record.model_copy(update={"seconds": round(time.perf_counter() - t0, 1)})
    manifest = write_manifest(
        fitted.adapter_dir,
        manifest_of(
            job,
            base_dir,
            qlora=qlora,
            max_steps=max_steps,
            record=record,
            evaluation=evaluation,
        ),
    )
    (fitted.adapter_dir / "eval_report.json").write_text(json.dumps(evaluation, indent=2) + "\n")
    # One line the training job's metric definitions parse (training.launch), so that SageMaker
    # keeps its own record of the gate's figures.
    log(gate_line(evaluation))
    archive = out_dir / f"{adapter}.tar.gz"
    digest = pack(fitted.adapter_dir, archive)
    seconds = time.perf_counter() - t0
    log(f"[{adapter}] {archive} sha256 {digest[:12]}... in {seconds:.1f} s")
    return TrainResult(adapter, archive, digest, manifest, seconds)


class DatasetTooLongError(ValueError):
    """Records whose prompt and answer pass the trainer's ``max_length`` (it would cut the
    answer off): refused before training, naming each line."""


def check_lengths(adapter: str, source: str, split, profile: TaskProfile, tokenizer) -> None:
    """Count every record in the base's chat template, as training will see it. ``make check``
    does the same where the base's tokenizer is on the machine; here it always is."""

    def count(text: str, output: str) -> int:
        turns = [
            {"role": "system", "content": profile.instruction},
            {"role": "user", "content": text},
            {"role": "assistant", "content": output},
        ]
        rendered = tokenizer.apply_chat_template(turns, tokenize=False)
        return len(tokenizer(rendered, add_special_tokens=False)["input_ids"])

    recs = [r for part in datasets.PARTS for r in getattr(split, part)]
    long = [(r, n) for r in recs if (n := count(r.raw, r.label)) > profile.max_length]
    if long:
        shown = "; ".join(f"{r.raw[:40]!r}: {n} tokens" for r, n in long[:5])
        raise DatasetTooLongError(
            f"adapter {adapter!r}: dataset {source}: {len(long)} records pass max_length "
            f"{profile.max_length} in the base's chat template (the answer would be cut off): "
            f"{shown}; make check names their lines where the base's tokenizer is on the "
            "machine (a local base built, or a hub base's tokenizer in the Hugging Face cache)"
        )


def prompt_format(profile: TaskProfile) -> PromptFormat:
    """How requests must be shaped for this adapter: what the runtime applies to ``inputs``."""
    return PromptFormat(format="chat", system=profile.instruction, input_role="user")


class _Progress(TrainerCallback):
    """Prints a line per evaluation (the trainer's own tqdm is off for clean logs)."""

    def __init__(self, adapter: str, log) -> None:
        self.adapter, self.log = adapter, log

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        loss = (metrics or {}).get("eval_loss")
        self.log(
            f"[{self.adapter}] step {state.global_step}/{state.max_steps} eval_loss {loss:.4f}"
        )


def main(argv: list[str] | None = None) -> int:
    hps = json.loads(os.environ.get("SM_HPS", "{}"))
    ap = argparse.ArgumentParser(prog="python -m training.train", description=__doc__)
    ap.add_argument("--adapter", default=hps.get("adapter"), required="adapter" not in hps)
    ap.add_argument("--env", default=hps.get("env", "local"))
    ap.add_argument("--base-dir", type=Path, default=os.environ.get("SM_CHANNEL_BASE"))
    ap.add_argument(
        "--out",
        type=Path,
        default=os.environ.get("SM_MODEL_DIR"),
        help="default: SM_MODEL_DIR in a job, else .artifacts/adapters/BASE_KEY (per base)",
    )
    ap.add_argument("--qlora", action="store_true", default=bool(hps.get("qlora", False)))
    ap.add_argument("--max-steps", type=int, default=hps.get("max_steps"))
    ap.add_argument(
        "--canary",
        action="store_true",
        default=bool(hps.get("canary", False)),
        help="train the entry's canary version (canary.version) instead of its version",
    )
    args = ap.parse_args(argv)
    if args.base_dir is None:
        ap.error("--base-dir is required (or SM_CHANNEL_BASE inside a SageMaker job)")
    if args.out is None:
        from config import load_deployment
        from config.layout import archives_dir

        args.out = archives_dir(Path(".artifacts") / "adapters", load_deployment(args.env).base_key)
    try:
        res = train(
            args.adapter,
            env=args.env,
            base_dir=args.base_dir,
            out_dir=args.out,
            qlora=args.qlora,
            max_steps=args.max_steps,
            canary=args.canary,
        )
    except (NoCanaryError, DatasetTooLongError, datasets.SplitError, DatasetFileError) as exc:
        ap.error(str(exc))
    return 0 if res.manifest.eval and res.manifest.eval["publishable"] else 3


if __name__ == "__main__":
    sys.exit(main())
