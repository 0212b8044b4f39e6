"""The runtime image's Dockerfile, read for what broke a build on vLLM's base before.

No Docker here: the workflow's image job builds it (tests/ci/test_workflow.py). These checks
refuse statically what that build would meet: vLLM's image is Ubuntu 24.04-based, where UID 1000
already belongs to the distribution's `ubuntu` user, so `useradd --uid 1000` exits 4; and
SageMaker's container contract expects root ("SageMaker AI expects all containers to run with
root users", developer guide, "Custom Inference Code with Hosting Services").
"""

from __future__ import annotations

import re
from pathlib import Path

from ops.base_image import pinned

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "runtime" / "Dockerfile"


def _instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    joined = re.sub(r"\\\n", " ", "\n".join(
        line for line in text.splitlines() if not line.lstrip().startswith("#")
    ))  # fmt: skip
    out = []
    for line in joined.splitlines():
        if line.strip():
            word, _, rest = line.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def refusals(text: str) -> list[str]:
    """What in a Dockerfile would not build on vLLM's base, or not run as SageMaker expects."""
    problems = []
    for word, args in _instructions(text):
        if word == "RUN" and re.search(r"\b(useradd|adduser)\b.*(--uid|-u)\s*\d+", args):
            problems.append(f"RUN creates a user with a fixed UID: {args[:80]}")
        if word == "RUN" and re.search(r"\b(groupadd|addgroup)\b.*(--gid|-g)\s*\d+", args):
            problems.append(f"RUN creates a group with a fixed GID: {args[:80]}")
        if word == "USER" and args.split(":")[0] not in ("root", "0"):
            problems.append(f"USER {args}: SageMaker expects containers to run as root")
    return problems


def test_the_dockerfile_would_build_on_vllms_base_and_runs_as_root() -> None:
    assert refusals(DOCKERFILE.read_text()) == []


def test_the_check_refuses_what_broke_the_build_before() -> None:
    before = (
        "FROM vllm/vllm-openai:v0.32.0\n"
        "RUN useradd --create-home --uid 1000 model && mkdir -p /tmp/lora-runtime \\\n"
        "    && chown model /tmp/lora-runtime\n"
        "USER 1000\n"
    )
    found = refusals(before)
    assert len(found) == 2 and "fixed UID" in found[0] and "USER 1000" in found[1], found
    assert refusals("FROM x\n# RUN useradd --uid 1000 model\nUSER root\n") == []


def test_the_base_is_vllms_image_named_by_tag_for_its_digest() -> None:
    """The base is the vLLM release the runtime pins, named so `ops.base_image` can pin and
    check its digest; the build turns FlashInfer's sampler off and runs pip check and the
    doctor."""
    from runtime.doctor import VLLM_VERSION

    ref, digest = pinned(DOCKERFILE)
    assert ref == f"vllm/vllm-openai:v{VLLM_VERSION}"
    assert digest is None or re.fullmatch(r"sha256:[0-9a-f]{64}", digest)
    steps = _instructions(DOCKERFILE.read_text())
    assert ("FROM", "${VLLM_IMAGE}") in steps
    runs = " ".join(args for word, args in steps if word == "RUN")
    assert "pip check" in runs and "runtime doctor --offline" in runs
    assert "-c /tmp/base-constraints.txt" in runs, "the install keeps the base's versions"
    env = " ".join(args for word, args in steps if word == "ENV")
    assert "VLLM_USE_FLASHINFER_SAMPLER=0" in env
