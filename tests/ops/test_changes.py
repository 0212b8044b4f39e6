"""The catalog change summary a reviewer reads: exactly the adapters that changed."""

from __future__ import annotations

from pathlib import Path

import yaml

from config import CATALOG_PATH, load_deployment
from infra.adapters import shard_of
from ops.changes import main, render, summarize


def _catalog(tmp_path: Path, edit) -> Path:
    data = yaml.safe_load(CATALOG_PATH.read_text())
    edit(data)
    path = tmp_path / "adapters.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _entry(data: dict, name: str) -> dict:
    return next(a for a in data["adapters"] if a["name"] == name)


def test_changing_one_entry_names_exactly_that_adapter_and_its_component(tmp_path: Path) -> None:
    def publish(data: dict) -> None:
        e = _entry(data, "sales-json")
        e.update(
            version="1.1.0",
            artifact="s3://bucket/adapters/sales-json/1.1.0/adapter.tar.gz",
            sha256="a" * 64,
        )

    before = load_deployment("dev")
    after = load_deployment("dev", _catalog(tmp_path, publish))
    (change,) = summarize(before, after)
    assert (change.adapter, change.kind, change.component) == (
        "sales-json",
        "changed",
        "lora-dev-sales-json",
    )
    assert set(change.fields) == {"version", "artifact", "sha256"}
    assert change.stack == f"lora-dev-adapters-{shard_of('sales-json'):02d}"
    assert "updates lora-dev-sales-json's ArtifactUrl" in change.effect
    text = render("dev", [change], [], markdown=True)
    assert "| sales-json | changed" in text and "lora-dev-sales-json" in text
    others = {a.name for a in before.adapters} - {"sales-json"}
    assert not any(f"| {n} |" in text for n in others)


def test_added_removed_and_route_only_changes_say_what_they_do(tmp_path: Path) -> None:
    def edit(data: dict) -> None:
        data["adapters"] = [a for a in data["adapters"] if a["name"] != "style-formal"]
        _entry(data, "singlish-standard")["allow"] = {"tenants": ["localization"]}
        data["adapters"].append(
            {
                "name": "claims-summary",
                "version": "1.0.0",
                "base": "qwen3-4b",
                "task": "style_transfer",
                "allow": {"tenants": ["claims"]},
            }
        )

    changes = {
        c.adapter: c
        for c in summarize(load_deployment("dev"), load_deployment("dev", _catalog(tmp_path, edit)))
    }
    assert set(changes) == {"claims-summary", "style-formal", "singlish-standard"}
    assert changes["claims-summary"].effect.startswith("adds inference component lora-dev-claims")
    assert changes["style-formal"].effect.startswith("deletes inference component")
    assert changes["singlish-standard"].effect == "updates its route in the router's table"


def test_the_command_compares_with_a_git_ref(tmp_path: Path, capsys) -> None:
    path = _catalog(tmp_path, lambda d: _entry(d, "pii-redaction").update(version="1.0.1"))
    assert main(["--env", "dev", "--catalog", str(path)]) == 0
    out = capsys.readouterr().out
    assert "pii-redaction: changed (version, artifact)" in out
    assert "updates lora-dev-pii-redaction's ArtifactUrl" in out
