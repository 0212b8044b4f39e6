"""One local platform for the e2e session, started the way a user starts it (``python -m local up``).

It differs from ``make up`` only in size: the tiny Qwen3 preset as the base (a catalog entry and
an environment file written here, through the same schema) and training capped at a few steps,
so that the whole platform comes up in about a minute on two cores. Ports are free ones and the
Redis database is its own, so a developer's running ``make up`` is never touched.
"""

from __future__ import annotations

import copy
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from config import CATALOG_PATH, ENVIRONMENTS_DIR
from local.options import port_flags
from tests.progress import run_with_progress

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
MAX_STEPS = "10"
#: An IAM Identity Center role as the IAM console shows it: a path, then the role's name.
SSO_ROLE = "AWSReservedSSO_PlatformAdmin_0123456789abcdef"
SSO_OPERATOR = f"arn:aws:iam::000000000000:role/aws-reserved/sso.amazonaws.com/{SSO_ROLE}"
#: How long ``local up`` may print nothing before the fixture gives up, and its overall bound.
STALL_S = 600.0
BOUND_S = 3600.0
REDIS_URL = "redis://127.0.0.1:6379/14"

TINY_BASE = {
    "model_id": "local/qwen3-tiny",
    "source": "local",
    "revision": "recipe-2",
    "dtype": "float32",
    "quantization": "none",
    "max_lora_rank": 64,
    "image": {"repository": "lora-runtime", "tag": "local"},
    "architecture": {
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "vocab_size": 1024,
        "parameters": 139648,
    },
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Platform:
    root: Path
    catalog: Path
    environments: Path
    state: Path
    artifacts: Path
    ports: dict[str, int]
    first_up: subprocess.CompletedProcess | None = None

    @property
    def gateway(self) -> str:
        return f"http://127.0.0.1:{self.ports['gateway']}"

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.ports['endpoint']}"

    @property
    def runtime(self) -> str:
        return f"http://127.0.0.1:{self.ports['runtime']}"

    def up(self, *extra: str) -> subprocess.CompletedProcess:
        """``python -m local up`` as a user runs it, waited on by its progress: each line it
        prints (its steps, each adapter's training step) is progress; it fails after
        ``STALL_S`` without one or ``BOUND_S`` in all, never on a fixed clock that a machine
        busy with other work would miss (stdout and stderr are one stream here)."""
        argv = [
            sys.executable,
            "-m",
            "local",
            "up",
            "--catalog",
            str(self.catalog),
            "--environments-dir",
            str(self.environments),
            "--state-dir",
            str(self.state),
            "--artifacts",
            str(self.artifacts),
            "--max-steps",
            MAX_STEPS,
            *port_flags(self.ports),
            "--redis-url",
            REDIS_URL,
            # The tiny base cannot pass the gate; the tests need every adapter served.
            "--wait",
            "--serve-unpublishable",
            *extra,
        ]
        return run_with_progress(argv, cwd=ROOT, stall_s=STALL_S, bound_s=BOUND_S)

    def down(self) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "local", "down", "--state-dir", str(self.state)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def catalog_data(self) -> dict:
        return yaml.safe_load(self.catalog.read_text())

    def write_catalog(self, data: dict) -> None:
        self.catalog.write_text(yaml.safe_dump(data, sort_keys=False))


@pytest.fixture(scope="session")
def platform(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("platform")
    catalog = yaml.safe_load(CATALOG_PATH.read_text())
    catalog["base_models"]["qwen3-tiny"] = copy.deepcopy(TINY_BASE)
    env = yaml.safe_load((ENVIRONMENTS_DIR / "local.yaml").read_text())
    env.update(prefix="lora-e2e", base="qwen3-tiny", base_overrides={"qwen3-4b": "qwen3-tiny"})
    # Long enough generations for the streaming tests to cut one short.
    env.setdefault("router", {})["max_new_tokens_cap"] = 1000
    # The release's smoke check runs as whoever releases, often an IAM Identity Center role,
    # listed by the ARN the console shows (with its path); the router matches it by account and
    # name.
    env["router"]["operators"] = [SSO_OPERATOR]
    (root / "environments").mkdir()
    (root / "environments" / "local.yaml").write_text(yaml.safe_dump(env))
    (root / "adapters.yaml").write_text(yaml.safe_dump(catalog, sort_keys=False))
    p = Platform(
        root=root,
        catalog=root / "adapters.yaml",
        environments=root / "environments",
        state=root / "state",
        artifacts=root / "artifacts",
        ports={"gateway": free_port(), "endpoint": free_port(), "runtime": free_port()},
    )
    try:
        # Inside the try: an `up` that times out has started processes all the same, and they
        # must go down with the fixture, not train on behind the rest of the suite.
        p.first_up = p.up()
        assert p.first_up.returncode == 0, p.first_up.stdout[-4000:] + p.first_up.stderr[-4000:]
        yield p
    finally:
        p.down()
