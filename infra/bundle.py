"""The router's Lambda code asset, built without Docker.

CDK's Python bundling runs pip inside a Docker image; this machine class (and many CI runners)
has no Docker engine. pip itself can install wheels for another platform (``--platform
--python-version --only-binary``), so the build step here fills a directory with
``lambda_proxy`` and ``contracts`` (source files only; the router imports nothing else of ours),
its pinned dependencies for the Lambda runtime's platform,
and the routing table generated from the catalog. The asset hash is computed from the inputs
(requirements, platform, source, routing table), so a synth is reproducible byte for byte in its
template and the dependency install runs once per requirements change, not once per synth.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from contracts.routing import TABLE_FILENAME, RoutingTable

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "lambda_proxy"
#: The packages the function's code is made of: the router and the contracts it shares.
PACKAGES = (SOURCE, ROOT / "contracts")
REQUIREMENTS = SOURCE / "requirements.txt"
BUILD = Path(os.environ.get("LORA_FLEET_BUILD_DIR", ROOT / "build"))

#: The Lambda platform the wheels are chosen for; infra/router.py uses the same pair.
PYTHON_VERSION = "3.14"
PLATFORM = "manylinux2014_aarch64"
ROUTING_TABLE_FILE = TABLE_FILENAME
#: The function's handler: the script the Lambda Web Adapter runs (at the bundle's root).
ENTRY_SCRIPT = SOURCE / "run.sh"


class BundleError(RuntimeError):
    pass


def _digest(*parts: bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(len(part).to_bytes(8, "big"))
        h.update(part)
    return h.hexdigest()


def _sources() -> list[Path]:
    return [p for package in PACKAGES for p in sorted(package.glob("*.py")) if p.is_file()]


def table_bytes(routing_table: RoutingTable) -> bytes:
    return routing_table.dumps().encode()


def dependencies() -> Path:
    """The pinned dependencies installed for the Lambda platform, cached by their inputs."""
    key = _digest(REQUIREMENTS.read_bytes(), PLATFORM.encode(), PYTHON_VERSION.encode())[:16]
    target = BUILD / "router-deps" / key
    if target.is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    print(
        f"router bundle: installing {REQUIREMENTS.name} for {PLATFORM} / CPython "
        f"{PYTHON_VERSION} into {target} (once per requirements change)",
        file=sys.stderr,
    )
    staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=".tmp-"))
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "--no-compile",
        "--target",
        str(staging),
        "--platform",
        PLATFORM,
        "--implementation",
        "cp",
        "--python-version",
        PYTHON_VERSION,
        "--only-binary=:all:",
        "-r",
        str(REQUIREMENTS),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        raise BundleError(
            f"could not install the router's dependencies for {PLATFORM}:\n{proc.stderr[-2000:]}"
        )
    for junk in ("bin",):
        shutil.rmtree(staging / junk, ignore_errors=True)
    try:
        staging.rename(target)
    except OSError:  # another synth finished first; its result is identical
        shutil.rmtree(staging, ignore_errors=True)
    return target


def router_bundle(routing_table: RoutingTable) -> tuple[Path, str]:
    """Directory holding the Lambda's code, and the asset hash that names it."""
    table = table_bytes(routing_table)
    parts = [
        REQUIREMENTS.read_bytes(),
        PLATFORM.encode(),
        PYTHON_VERSION.encode(),
        table,
        ENTRY_SCRIPT.read_bytes(),
    ]
    for path in _sources():
        parts += [path.relative_to(ROOT).as_posix().encode(), path.read_bytes()]
    asset_hash = _digest(*parts)
    out = BUILD / "router" / asset_hash[:20]
    if out.is_dir():
        return out, asset_hash
    deps = dependencies()
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=out.parent, prefix=".tmp-"))
    shutil.copytree(deps, staging, dirs_exist_ok=True)
    for path in _sources():
        target = staging / path.relative_to(ROOT)
        target.parent.mkdir(exist_ok=True)
        shutil.copy2(path, target)
    (staging / SOURCE.name / ROUTING_TABLE_FILE).write_bytes(table)
    entry = staging / ENTRY_SCRIPT.name
    shutil.copyfile(ENTRY_SCRIPT, entry)
    entry.chmod(0o755)  # Lambda runs the handler script as it finds it in the zip
    try:
        staging.rename(out)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
    _prune(out.parent, keep=KEEP_BUNDLES)
    return out, asset_hash


#: Bundles kept in build/router (each catalog change makes one; CDK copies it into cdk.out).
KEEP_BUNDLES = 8


def _prune(directory: Path, keep: int) -> None:
    bundles = sorted(
        (p for p in directory.iterdir() if p.is_dir() and not p.name.startswith(".")),
        key=lambda p: p.stat().st_mtime,
        reverse=True,
    )
    for old in bundles[keep:]:
        shutil.rmtree(old, ignore_errors=True)
