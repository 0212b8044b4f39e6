"""Adapter artifacts: config, weights and manifest at the root of a .tar.gz, hashes verified.

The archive layout is what SageMaker adapter inference components take (files at the archive
root) and what the runtime's registration accepts.
"""

from __future__ import annotations

import hashlib
import json
import tarfile
from pathlib import Path
from typing import Any

REQUIRED = ("adapter_config.json", "adapter_model.safetensors", "manifest.json")


class PackageError(ValueError):
    pass


def sha256_file(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def write_manifest(adapter_dir: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    files = {
        name: sha256_file(adapter_dir / name)
        for name in ("adapter_config.json", "adapter_model.safetensors")
    }
    manifest = {**manifest, "files": files}
    (adapter_dir / "manifest.json").write_text(
        json.dumps(manifest, indent=2, sort_keys=True) + "\n"
    )
    return manifest


def pack(adapter_dir: Path, archive: Path) -> str:
    """Write ``archive`` (files at its root, deterministic order); returns its sha256."""
    for name in REQUIRED:
        if not (adapter_dir / name).is_file():
            raise PackageError(f"{adapter_dir}: {name} missing")
    archive.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive, "w:gz") as tar:
        for name in REQUIRED:
            info = tar.gettarinfo(str(adapter_dir / name), arcname=name)
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = 0
            with (adapter_dir / name).open("rb") as f:
                tar.addfile(info, f)
    return sha256_file(archive)


def read_manifest(archive: Path) -> dict[str, Any]:
    """The manifest of an archive, after checking every file against the hashes it records.

    Every file but the manifest must be listed in its ``files`` with its sha256: a file the
    manifest does not name (or a manifest without ``files``) would be served unchecked.
    """
    with tarfile.open(archive, "r:gz") as tar:
        members = [m for m in tar.getmembers() if not m.isdir()]
        names = [m.name for m in members]
        for name in REQUIRED:
            if name not in names:
                raise PackageError(f"{archive.name}: {name} missing at the archive root")
        if odd := [m.name for m in members if not m.isfile()]:
            raise PackageError(f"{archive.name}: {odd} are not regular files")
        data = {n: tar.extractfile(n).read() for n in names}  # type: ignore[union-attr]
    manifest = json.loads(data["manifest.json"])
    files = manifest.get("files")
    if not isinstance(files, dict) or not files:
        raise PackageError(f"{archive.name}: the manifest lists no files and their sha256")
    unlisted = sorted(set(names) - set(files) - {"manifest.json"})
    absent = sorted(set(files) - set(names))
    if unlisted or absent:
        raise PackageError(
            f"{archive.name}: files the manifest does not list {unlisted}, "
            f"listed but not in the archive {absent}"
        )
    for name, digest in files.items():
        if hashlib.sha256(data[name]).hexdigest() != digest:
            raise PackageError(f"{archive.name}: {name} does not match its manifest sha256")
    return manifest
