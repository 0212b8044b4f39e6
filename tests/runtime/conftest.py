"""A real runtime server process (vLLM's CPU build behind it) on a free port, and adapters made
in the test with PEFT.

vLLM takes about a minute to start on two cores (it imports torch and itself in three
processes), so one server serves the whole test session; tests that register adapters delete
them again, under names of their own.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM

ADAPTER_SPECS = {
    "attn-r4": (["q_proj", "v_proj"], 4, 8),
    "mlp-r8": (["gate_proj", "up_proj", "down_proj"], 8, 16),
    "all-r16": (
        ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        16,
        16,
    ),
    "qo-r2": (["q_proj", "o_proj"], 2, 4),
    "all-r64": (
        ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        64,
        32,
    ),
}


def make_mixed_rank_adapter(base: Path, out: Path, seed: int = 7) -> Path:
    """PEFT's rank_pattern / alpha_pattern: rank 4 by default, 16 on the MLP's down_proj."""
    torch.manual_seed(seed)
    model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(base),
        LoraConfig(
            r=4,
            lora_alpha=8,
            target_modules=["q_proj", "v_proj", "down_proj"],
            rank_pattern={"down_proj": 16},
            alpha_pattern={"down_proj": 32},
        ),
    )
    for name, p in model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.4)
    model.save_pretrained(out)
    return out


def make_adapter(base: Path, out: Path, targets: list[str], r: int, alpha: int, seed: int) -> Path:
    torch.manual_seed(seed)
    model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(base),
        LoraConfig(r=r, lora_alpha=alpha, target_modules=targets),
    )
    for name, p in model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.4)  # visibly change the base's output
    model.save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def adapters(tiny_base: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("adapters")
    made = {
        name: make_adapter(tiny_base, root / name, t, r, a, seed=i)
        for i, (name, (t, r, a)) in enumerate(ADAPTER_SPECS.items())
    }
    made["mixed-ranks"] = make_mixed_rank_adapter(tiny_base, root / "mixed-ranks")
    return made


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, url: str, proc: subprocess.Popen, log: Path) -> None:
        self.url, self.proc, self.log = url, proc, log
        self.started_s = 0.0
        self.client = httpx.Client(base_url=url, timeout=60)

    def invoke(self, adapter: str | None = None, **body) -> httpx.Response:
        headers = {"X-Amzn-SageMaker-Adapter-Identifier": adapter} if adapter else {}
        return self.client.post("/invocations", json=body, headers=headers)


def start_server(model_dir: Path, workdir: Path, **options: str) -> Server:
    """The runtime as SageMaker runs it: ``python -m runtime serve`` with OPTION_* variables."""
    port = _free_port()
    log = workdir / "server.log"
    env = {**os.environ, "OPTION_WORK_DIR": str(workdir / "work"), **options}
    with log.open("w") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "runtime",
                "serve",
                "--model-dir",
                str(model_dir),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    srv = Server(f"http://127.0.0.1:{port}", proc, log)
    t0 = time.time()
    deadline = t0 + 300
    while time.time() < deadline:
        try:
            if srv.client.get("/ping").status_code == 200:
                srv.started_s = time.time() - t0
                return srv
        except httpx.TransportError:
            pass
        assert proc.poll() is None, log.read_text()
        time.sleep(0.2)
    proc.kill()
    pytest.fail(f"server did not become healthy:\n{log.read_text()}")


def stop_server(srv: Server) -> None:
    srv.proc.terminate()
    srv.proc.wait(timeout=30)
    assert "Traceback" not in srv.log.read_text(), srv.log.read_text()


#: The shared server's options: two device slots and two host slots for five adapters (so vLLM
#: evicts and reloads), and a generation limit long enough for a client to leave mid-way.
SERVER_OPTIONS = {
    "OPTION_MAX_LORAS": "2",
    "OPTION_MAX_CPU_LORAS": "2",
    "OPTION_MAX_INPUT_TOKENS": "256",
    "OPTION_MAX_NEW_TOKENS": "3000",
    "OPTION_MAX_BODY_BYTES": "65536",
    "OPTION_CPU_KVCACHE_GIB": "1",
}


@pytest.fixture(scope="session")
def server(tiny_base: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start_server(tiny_base, tmp_path_factory.mktemp("server"), **SERVER_OPTIONS)
    yield srv
    stop_server(srv)
