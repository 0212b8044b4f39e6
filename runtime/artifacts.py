"""Safe extraction of adapter archives (``.tar.gz`` with the files at the archive root).

SageMaker extracts adapter-component archives itself; the runtime unpacks an archive only when
``POST /adapters`` names a ``.tar.gz`` as ``src``. Python's ``tarfile`` "data" filter already
refuses absolute paths, ``..``, links that leave the directory and device files; this module
adds what a server also needs: no links at all, member-count and size limits checked before
anything is written, and an all-or-nothing result.
"""

from __future__ import annotations

import shutil
import tarfile
import tempfile
from pathlib import Path, PurePosixPath


class ArtifactError(ValueError):
    """The archive is unsafe or malformed; the message names the member and the defect."""


MAX_MEMBERS = 64
MAX_MEMBER_BYTES = 4 * 1024**3
MAX_TOTAL_BYTES = 8 * 1024**3
MAX_EXPANSION_RATIO = 100.0


def check_member(member: tarfile.TarInfo, max_member_bytes: int) -> None:
    name = member.name
    path = PurePosixPath(name)
    if path.is_absolute() or name.startswith(("/", "\\")) or ":" in path.parts[0]:
        raise ArtifactError(f"member {name!r}: absolute path")
    if ".." in path.parts:
        raise ArtifactError(f"member {name!r}: path escapes the archive ('..')")
    if member.issym() or member.islnk():
        raise ArtifactError(f"member {name!r}: links are not allowed")
    if member.isdev() or member.isfifo() or member.ischr() or member.isblk():
        raise ArtifactError(f"member {name!r}: device or FIFO files are not allowed")
    if not (member.isfile() or member.isdir()):
        raise ArtifactError(f"member {name!r}: unsupported member type")
    if member.size > max_member_bytes:
        raise ArtifactError(f"member {name!r}: {member.size} bytes exceeds {max_member_bytes}")


def extract(
    archive: Path,
    dest: Path,
    *,
    max_members: int = MAX_MEMBERS,
    max_member_bytes: int = MAX_MEMBER_BYTES,
    max_total_bytes: int = MAX_TOTAL_BYTES,
    max_ratio: float = MAX_EXPANSION_RATIO,
) -> Path:
    """Extract ``archive`` into ``dest`` (created; must not exist) after checking every member:
    their count, sizes, total, and the total against the archive's own size (a small archive
    that expands a hundredfold is a decompression bomb, not an adapter)."""
    if dest.exists():
        raise ArtifactError(f"destination {dest} already exists")
    try:
        tar = tarfile.open(archive, mode="r:*")  # noqa: SIM115 - closed by the `with` below
    except (tarfile.TarError, OSError) as exc:
        raise ArtifactError(f"{archive.name}: not a readable tar archive ({exc})") from None
    with tar:
        members = []
        total = 0
        try:
            for member in tar:
                members.append(member)
                if len(members) > max_members:
                    raise ArtifactError(f"{archive.name}: more than {max_members} members")
                check_member(member, max_member_bytes)
                total += member.size
                if total > max_total_bytes:
                    raise ArtifactError(f"{archive.name}: members exceed {max_total_bytes} bytes")
                if total > max(archive.stat().st_size, 1 << 20) * max_ratio:
                    raise ArtifactError(
                        f"{archive.name}: expands over {max_ratio:g} times its size "
                        "(OPTION_MAX_EXPANSION_RATIO)"
                    )
        except tarfile.TarError as exc:
            raise ArtifactError(f"{archive.name}: corrupt archive ({exc})") from None
        staging = Path(tempfile.mkdtemp(prefix=".extract-", dir=dest.parent))
        try:
            tar.extractall(staging, members=members, filter="data")
            staging.rename(dest)
        except (tarfile.TarError, OSError) as exc:
            raise ArtifactError(f"{archive.name}: extraction failed ({exc})") from None
        finally:
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)
    return dest
