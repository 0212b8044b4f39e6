"""``python -m ops.base_image``: the runtime's base pinned by the registry's digest."""

from __future__ import annotations

import pytest

from ops.base_image import BaseImageError, check, pin, pinned

DIGEST = "sha256:" + "a" * 64
MOVED = "sha256:" + "b" * 64


def _dockerfile(tmp_path, arg: str):
    path = tmp_path / "Dockerfile"
    path.write_text(f"# the base\n{arg}\nFROM ${{VLLM_IMAGE}}\nRUN true\n")
    return path


def test_pin_writes_the_registrys_digest_and_check_then_passes(tmp_path) -> None:
    path = _dockerfile(tmp_path, "ARG VLLM_IMAGE=vllm/vllm-openai:v0.32.0")
    assert pinned(path) == ("vllm/vllm-openai:v0.32.0", None)
    with pytest.raises(BaseImageError, match="without a digest"):
        check(path, resolve=lambda ref: DIGEST)
    assert pin(path, resolve=lambda ref: DIGEST) == f"vllm/vllm-openai:v0.32.0@{DIGEST}"
    assert f"ARG VLLM_IMAGE=vllm/vllm-openai:v0.32.0@{DIGEST}\n" in path.read_text()
    assert check(path, resolve=lambda ref: DIGEST).endswith(DIGEST)


def test_a_tag_moved_upstream_fails_the_check_naming_both_digests(tmp_path) -> None:
    path = _dockerfile(tmp_path, f"ARG VLLM_IMAGE=vllm/vllm-openai:v0.32.0@{DIGEST}")
    with pytest.raises(BaseImageError, match=f"now names {MOVED}, not the pinned {DIGEST}"):
        check(path, resolve=lambda ref: MOVED)


def test_a_dockerfile_without_the_argument_is_named(tmp_path) -> None:
    path = tmp_path / "Dockerfile"
    path.write_text("FROM vllm/vllm-openai:v0.32.0\n")
    with pytest.raises(BaseImageError, match="no `ARG VLLM_IMAGE"):
        pinned(path)


def test_a_release_in_ci_refuses_an_unpinned_base_and_a_terminal_pins_it(
    tmp_path, monkeypatch
) -> None:
    from ops import base_image
    from ops.release import ReleaseError, Tools

    path = _dockerfile(tmp_path, "ARG VLLM_IMAGE=vllm/vllm-openai:v0.32.0")
    monkeypatch.setattr(base_image, "DOCKERFILE", path)
    monkeypatch.setattr(base_image, "registry_digest", lambda ref: DIGEST)
    monkeypatch.setattr(base_image.pin, "__defaults__", (path, lambda ref: DIGEST))
    monkeypatch.setattr(base_image.check, "__defaults__", (path, lambda ref: DIGEST))
    monkeypatch.setattr(base_image.pinned, "__defaults__", (path,))
    with pytest.raises(ReleaseError, match=r"without a digest.*ops\.base_image pin"):
        Tools().base_image(ci=True)
    assert Tools().base_image(ci=False) == f"vllm/vllm-openai:v0.32.0@{DIGEST}"
    assert pinned(path)[1] == DIGEST
    assert Tools().base_image(ci=True).endswith(DIGEST)
