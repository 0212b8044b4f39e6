"""The local platform as a benchmark brings it up: the catalog cut down to the adapters it
measures, on free ports, in a state directory of its own, and down again afterwards (what
``make up`` runs, with nothing else of the machine's in the way). Not named ``platform``: a
benchmark run as a script has this folder first on its path, where that name would shadow
the standard library's."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
import yaml

from config import CATALOG_PATH, ENVIRONMENTS_DIR, TASK_PROFILES

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class Platform:
    gateway: str
    #: What ``local up`` printed (it says "training" when it had to train first).
    stdout: str

    def native(self, adapter: str, text: str, max_new_tokens: int = 128) -> str:
        """The router's native route, with plain ``inputs`` (the seed article's request)."""
        r = httpx.post(
            f"{self.gateway}/v1/adapters/{adapter}/generate",
            json={"inputs": text, "parameters": {"max_new_tokens": max_new_tokens}},
            timeout=600,
        )
        r.raise_for_status()
        return r.json()["output"]

    def chat(self, adapter: str, text: str, max_tokens: int = 128) -> str:
        """The OpenAI route through the official client, with only a user turn (what most
        clients send)."""
        client = openai.OpenAI(
            base_url=f"{self.gateway}/v1", api_key="unused", max_retries=0, timeout=600
        )
        out = client.chat.completions.create(
            model=adapter,
            max_tokens=max_tokens,
            temperature=0,
            messages=[{"role": "user", "content": text}],
        )
        return out.choices[0].message.content or ""


@contextlib.contextmanager
def local_platform(adapters: list[str], *extra: str) -> Iterator[Platform]:
    """``local up --wait --no-tour`` with only ``adapters`` in the catalog (and the local
    environment's training overrides for them), yielding the gateway's URL; ``local down``
    on the way out. Raises ``RuntimeError`` with its output when it does not come up."""
    work = Path(tempfile.mkdtemp(prefix="bench-platform-"))
    catalog = yaml.safe_load(CATALOG_PATH.read_text())
    catalog["adapters"] = [a for a in catalog["adapters"] if a["name"] in adapters]
    (work / "adapters.yaml").write_text(yaml.safe_dump(catalog, sort_keys=False))
    env = yaml.safe_load((ENVIRONMENTS_DIR / "local.yaml").read_text())
    overrides = env.get("training", {}).get("adapters") or {}
    env.setdefault("training", {})["adapters"] = {
        k: v for k, v in overrides.items() if k in adapters
    }
    # A task only a removed entry defined is no longer known to the cut-down catalog.
    kept = set(TASK_PROFILES) | {a["task"] for a in catalog["adapters"]}
    tasks = env["training"].get("tasks") or {}
    env["training"]["tasks"] = {k: v for k, v in tasks.items() if k in kept}
    (work / "environments").mkdir()
    (work / "environments" / "local.yaml").write_text(yaml.safe_dump(env, sort_keys=False))
    ports = {"gateway": free_port(), "endpoint": free_port(), "runtime": free_port()}
    state = work / "state"
    up = [
        sys.executable,
        "-m",
        "local",
        "up",
        "--catalog",
        str(work / "adapters.yaml"),
        "--environments-dir",
        str(work / "environments"),
        "--state-dir",
        str(state),
        "--artifacts",
        str(ROOT / ".artifacts"),
        "--gateway-port",
        str(ports["gateway"]),
        "--endpoint-port",
        str(ports["endpoint"]),
        "--runtime-port",
        str(ports["runtime"]),
        "--wait",
        "--no-tour",
        *extra,
    ]
    try:
        started = subprocess.run(up, cwd=ROOT, text=True, capture_output=True, check=False)
        print(started.stdout[-3000:])
        if started.returncode != 0:
            raise RuntimeError(f"local up failed:\n{started.stderr[-3000:]}")
        yield Platform(f"http://127.0.0.1:{ports['gateway']}", started.stdout)
    finally:
        subprocess.run(
            [sys.executable, "-m", "local", "down", "--state-dir", str(state)],
            cwd=ROOT,
            check=False,
            capture_output=True,
        )
