"""The docs site for the playground's "how this works" panel: built by ``python -m local up``
with MkDocs (the same build the test suite runs with ``--strict``), served by the gateway at
``/docs/``. A failed build costs the links, never the platform."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from local.gateway import DOCS_SITE

ROOT = Path(__file__).resolve().parents[1]


def build_docs(log) -> bool:
    """Builds the site into ``build/site``; says why not when it cannot."""
    mkdocs = shutil.which("mkdocs", path=str(Path(sys.executable).parent))
    if mkdocs is None:
        log("  docs              not built (mkdocs is not installed: make setup)")
        return False
    proc = subprocess.run(
        [mkdocs, "build", "--quiet", "-d", str(DOCS_SITE)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"},
        check=False,
    )
    if proc.returncode != 0:
        log(f"  docs              not built: {(proc.stderr or proc.stdout).strip()[-300:]}")
        return False
    return True
