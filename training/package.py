"""Adapter artifacts: config, weights and manifest at the root of a .tar.gz, hashes verified.

The archive layout is what SageMaker adapter inference components take (files at the archive
root) and what the runtime's registration accepts.
"""

from __future__ import annotations

import hashlib
import tarfile
from pathlib import Path

from contracts.manifests import ADAPTER_MANIFEST, AdapterManifest, ManifestError

REQUIRED = ("adapter_config.json", "adapter_model.safetensors", ADAPTER_MANIFEST)


class PackageError(ValueError):
    pass


def sha256_file(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def write_manifest(adapter_dir: Path, manifest: AdapterManifest) -> AdapterManifest:
    """Write ``manifest`` into the adapter directory with the sha256 of every file it packs."""
    files = {
        name: sha256_file(adapter_dir / name)
        for name in ("adapter_config.json", "adapter_model.safetensors")
    }
    written = manifest.model_copy(update={"files": files})
    written.dump(adapter_dir)
    return written


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


def read_manifest(archive: Path) -> AdapterManifest:
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
    try:
        manifest = AdapterManifest.loads(data[ADAPTER_MANIFEST], f"{archive.name}: manifest.json")
    except ManifestError as exc:
        raise PackageError(str(exc)) from None
    files = manifest.files
    if not files:
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
