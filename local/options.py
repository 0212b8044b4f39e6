"""What ``up`` was asked for (the command line's choices), and its one error type."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from config import CATALOG_PATH, ENVIRONMENTS_DIR

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"


@dataclass
class Options:
    env: str = "local"
    catalog: Path = CATALOG_PATH
    environments_dir: Path = ENVIRONMENTS_DIR
    state_dir: Path = ROOT / ".local"
    artifacts: Path = ROOT / ".artifacts"
    host: str = "127.0.0.1"
    gateway_port: int = 8000
    endpoint_port: int = 8081
    runtime_port: int = 8080
    redis_url: str | None = DEFAULT_REDIS_URL
    max_steps: int | None = None  # cap training steps (quick platforms for tests)
    tour: bool = True
    #: Wait for the background trainer before the tour (tests; a user's ``up`` returns).
    wait: bool = False
    #: Serve adapters that did not pass their gate (the quick platform's small base cannot).
    serve_unpublishable: bool = False
    log: Any = field(default=print)

    def url(self, port: int) -> str:
        return f"http://{self.host}:{port}"


def port_flags(ports: dict[str, int]) -> list[str]:
    """``python -m local up``'s port options for ``{"gateway": .., "endpoint": .., "runtime":
    ..}``: how a test or a benchmark runs a platform beside a user's own."""
    return [
        flag
        for kind in ("gateway", "endpoint", "runtime")
        for flag in (f"--{kind}-port", str(ports[kind]))
    ]


class PlatformError(RuntimeError):
    pass
