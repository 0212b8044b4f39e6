"""A merged adapter served as a model of its own (``serving: merged``): the same greedy answers
as the adapter on its base, the adapter's prompt shape and identity in every answer, and no
adapter registered on it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contracts.manifests import AdapterManifest, BaseManifest, BaseRef, PromptFormat
from tests.runtime.conftest import make_adapter, start_server, stop_server
from training.merge import MERGED_MANIFEST, merge
from training.package import pack, write_manifest

SYSTEM = "Rewrite the note in full sentences."
PROMPTS = [
    "pt c/o sob x3d",
    "hello there",
    "the quick brown fox",
    "bp 120/80 hr 72",
    "no acute distress",
    "sales call with acme",
    "tomorrow at noon",
    "rx amox 500mg",
]


@pytest.fixture(scope="module")
def merged_pair(tiny_base: Path, tmp_path_factory) -> tuple[Path, Path]:
    """An adapter archive with a manifest (name, version, prompt), and it merged."""
    root = tmp_path_factory.mktemp("merged")
    adapter = make_adapter(
        tiny_base, root / "notes", ["q_proj", "v_proj", "down_proj"], 8, 16, seed=11
    )
    built = BaseManifest.read(tiny_base)
    write_manifest(
        adapter,
        AdapterManifest(
            name="notes",
            version="2.0.0",
            base=BaseRef(
                model_id=built.model_id,
                revision=built.revision,
                tokenizer_sha256=built.tokenizer_sha256,
            ),
            prompt=PromptFormat(format="chat", system=SYSTEM),
        ),
    )
    archive = root / "notes.tar.gz"
    pack(adapter, archive)
    out = merge(tiny_base, archive, root / "notes-merged", log=lambda _: None)
    assert out.adapter.name == "notes" and out.adapter.sha256
    return adapter, root / "notes-merged"


def test_a_merged_server_answers_as_the_adapter_on_its_base(server, merged_pair, tmp_path) -> None:
    adapter, merged_dir = merged_pair
    registered = server.client.post("/adapters", json={"name": "notes-lora", "src": str(adapter)})
    assert registered.status_code == 200, registered.text
    own = start_server(
        merged_dir,
        tmp_path,
        OPTION_ENABLE_LORA="false",
        OPTION_CPU_KVCACHE_GIB="1",
        OPTION_MAX_INPUT_TOKENS="256",
    )
    try:
        same, answers = 0, []
        for prompt in PROMPTS:
            body = {"inputs": prompt, "parameters": {"max_new_tokens": 12}}
            lora = server.invoke("notes-lora", **body).json()
            merged = own.invoke(**body).json()  # no adapter header: the merged model itself
            answers.append((lora["generated_text"], merged["generated_text"]))
            same += lora["generated_text"] == merged["generated_text"]
            # The adapter's identity, marked merged, with the weights sha256 of the archive.
            assert merged["artifact"] == {**lora["artifact"], "merged": True}
            assert merged["usage"]["input_tokens"] == lora["usage"]["input_tokens"], (
                "the merged model must get the adapter's prompt shape (its system turn)"
            )
        # float32 on the CPU: W + BA·s folded once against W·x + B(A·x)·s per token; the
        # sums round differently, so a near tie may flip a token, rarely.
        assert same >= len(PROMPTS) - 1, answers
        refused = own.client.post("/adapters", json={"name": "x", "src": str(adapter)})
        assert refused.status_code == 424 and "OPTION_ENABLE_LORA=false" in refused.text
    finally:
        stop_server(own)
        server.client.delete("/adapters/notes-lora")


def test_a_merged_directory_whose_weights_changed_is_refused_at_start(
    merged_pair, tmp_path
) -> None:
    import shutil

    from runtime.merged import MergedModelError, load_merged

    _, merged_dir = merged_pair
    copy = tmp_path / "copy"
    shutil.copytree(merged_dir, copy)
    assert load_merged(copy).identity["merged"] is True  # type: ignore[union-attr]
    weights = next(copy.glob("*.safetensors"))
    weights.write_bytes(weights.read_bytes()[:-8] + b"\0" * 8)
    with pytest.raises(MergedModelError, match="does not match the sha256"):
        load_merged(copy)
    manifest = json.loads((copy / MERGED_MANIFEST).read_text())
    assert manifest["adapter"]["prompt"]["system"] == SYSTEM
