"""The ``image`` step: the runtime image, built for linux/amd64 from its digest-pinned base and
pushed under the catalog's tag (an immutable tag that exists is never pushed again; a digest
must already exist), with a record of what it was built from."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

from ops.steps.base import ROOT, Release, ReleaseError, running_in_ci

NAME = "image"
SUMMARY = "build the runtime image for linux/amd64 and push it under the catalog's tag"


#: What goes into the runtime image (runtime/Dockerfile copies these): its identity.
IMAGE_INPUTS = ("runtime", "contracts", "pyproject.toml")


def image_inputs_sha256(root: Path = ROOT) -> str:
    """The sha256 of every file the image is built from, by path: an immutable tag pushed once
    is never pushed again, so a change to them under the same tag would never reach AWS."""
    h = hashlib.sha256()
    for top in IMAGE_INPUTS:
        base = root / top
        files = sorted(p for p in base.rglob("*") if p.is_file()) if base.is_dir() else [base]
        for path in files:
            if "__pycache__" in path.parts or path.suffix == ".pyc":
                continue
            h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def missing(r: Release) -> list[str]:
    if not r.dep.base.image.external and not r.repository_exists():
        return ["the repository does not exist yet (stacks step)"]
    registry, repo, ref = r.image_uri()  # type: ignore[misc]
    if not r.image_present():
        return [f"{registry}/{repo}{ref} not in ECR"]
    return [drift] if (drift := r.image_drift()) else []


def run(r: Release) -> None:
    registry, repo, ref = r.image_uri()  # type: ignore[misc]
    image = r.dep.base.image
    if (drift := r.image_drift()) is not None:
        raise ReleaseError(drift)
    if image.external is not None:
        # Never built into, nor pushed to, a registry this environment does not own.
        raise ReleaseError(
            f"the catalog's image {image.repository}{ref} is not in it: push it there "
            "yourself (the release builds and pushes only to the environment's own "
            "repository)"
        )
    if image.digest:
        raise ReleaseError(
            f"the catalog names digest {image.digest} in {repo}, which is not there; push "
            "that image, or name a tag for this command to build and push"
        )
    # The registry's own DNS suffix: amazonaws.com, or amazonaws.com.cn in China's regions.
    suffix = "amazonaws.com.cn" if r.region.startswith("cn-") else "amazonaws.com"
    host = f"{registry}.dkr.ecr.{r.region}.{suffix}"
    token = r.ecr.get_authorization_token(registryIds=[registry])["authorizationData"][0]
    user, password = base64.b64decode(token["authorizationToken"]).decode().split(":", 1)
    r.tools.run(["docker", "login", "--username", user, "--password-stdin", host], input=password)
    base = r.tools.base_image(ci=running_in_ci())
    # Pushed only when the tag is absent (checked above); ECR's immutable tags refuse a
    # second image under an existing tag as well. The base by the digest just verified.
    r.tools.run(
        [
            "docker",
            "buildx",
            "build",
            "--platform",
            "linux/amd64",
            "--provenance",
            "false",
            "--build-arg",
            f"VLLM_IMAGE={base}",
            "--file",
            "runtime/Dockerfile",
            "--tag",
            f"{host}/{repo}{ref}",
            "--push",
            ".",
        ]
    )
    if not r.image_present():
        raise ReleaseError(f"{host}/{repo}{ref} is still not in ECR after the push")
    r._put_json(r.image_record_key(), {"inputs_sha256": image_inputs_sha256()})
