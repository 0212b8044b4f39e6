"""The docs site for the playground's "how this works" panel: built with MkDocs (the same build
the test suite runs with ``--strict``) the first time the gateway is asked for ``/docs/``, and
again only when a page or ``mkdocs.yml`` is newer than the built site; never on ``local up``'s
start-up path. A failed build costs the links, never the platform."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Where the site is built (``make docs`` serves the same sources).
DOCS_SITE = ROOT / "build" / "site"
_LOCK = threading.Lock()


def _stale(site: Path) -> bool:
    index = site / "index.html"
    if not index.exists():
        return True
    sources = [ROOT / "mkdocs.yml", *(ROOT / "docs").rglob("*")]
    built = index.stat().st_mtime
    return any(p.is_file() and p.stat().st_mtime > built for p in sources)


def ensure_site(site: Path = DOCS_SITE) -> str | None:
    """Builds the site into ``site`` when it is missing or stale; None when it is there, else
    why it cannot be."""
    with _LOCK:
        if not _stale(site):
            return None
        mkdocs = Path(sys.executable).with_name("mkdocs")
        if not mkdocs.exists():
            return "mkdocs is not installed: make setup"
        proc = subprocess.run(
            [str(mkdocs), "build", "--quiet", "-d", str(site)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            env={"NO_MKDOCS_2_WARNING": "1", "PATH": f"{mkdocs.parent}:/usr/bin:/bin"},
            check=False,
        )
        if proc.returncode != 0:
            return (proc.stderr or proc.stdout).strip()[-300:] or "mkdocs build failed"
        return None
