"""Tiers as vLLM keeps them: a pin keeps its adapter in the host tier and never takes its last
place, the host tier is bounded by OPTION_MAX_CPU_LORAS, and a new version replaces the old one
without touching requests already running on it."""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path

SERVED = {"max_new_tokens": 6}


def _register(server, name: str, src: Path, **extra) -> dict:
    r = server.client.post("/adapters", json={"name": name, "src": str(src), **extra})
    assert r.status_code == 200, r.text
    return r.json()


def _listing(server) -> dict[str, dict]:
    return {a["name"]: a for a in server.client.get("/adapters").json()["adapters"]}


def test_a_pin_stays_in_the_host_tier_and_never_takes_its_last_place(server, adapters) -> None:
    pinned = _register(server, "pin-a", adapters["attn-r4"], pin=True)
    assert pinned["pinned"] and pinned["tier"] == "host"
    before = _listing(server)
    # Two host places (OPTION_MAX_CPU_LORAS=2): a second pin would leave none for the rest.
    r = server.client.post(
        "/adapters", json={"name": "pin-b", "src": str(adapters["mlp-r8"]), "pin": True}
    )
    assert r.status_code == 409 and "one stays unpinned" in r.json()["error"], r.text
    assert _listing(server) == before
    # ... so unpinned adapters still answer (vLLM evicts the pinned one to load them), and the
    # pinned one is loaded back at once.
    _register(server, "unpinned-1", adapters["mlp-r8"])
    _register(server, "unpinned-2", adapters["all-r16"])
    for name in ("unpinned-1", "unpinned-2", "pin-a"):
        r = server.invoke(name, inputs="hello", parameters=SERVED)
        assert r.status_code == 200 and r.json()["adapter"] == name, r.text
    assert _listing(server)["pin-a"]["tier"] == "host"
    events = server.client.get("/trace", params={"limit": 1000}).json()["events"]
    assert any(e["event"] == "adapter_load" and e.get("reason") == "pinned" for e in events)
    for name in ("pin-a", "unpinned-1", "unpinned-2"):
        assert server.client.delete(f"/adapters/{name}").status_code == 200


def test_the_host_tier_holds_at_most_max_cpu_loras(server, adapters) -> None:
    names = [f"host-{i}" for i in range(4)]
    for name, src in zip(names, ("attn-r4", "mlp-r8", "all-r16", "qo-r2"), strict=True):
        _register(server, name, adapters[src])
        assert server.invoke(name, inputs="hi", parameters=SERVED).status_code == 200
    tiers = server.client.get("/adapters").json()["tiers"]
    assert tiers["host"] + tiers["device"] <= 2, tiers  # OPTION_MAX_CPU_LORAS=2
    assert tiers["disk"] >= 2
    # A disk-tier adapter still answers: vLLM loads it again from its directory.
    listed = _listing(server)
    cold = next(n for n in names if listed[n]["tier"] == "disk")
    assert server.invoke(cold, inputs="hi", parameters=SERVED).status_code == 200
    for name in names:
        server.client.delete(f"/adapters/{name}")


def test_an_update_keeps_running_requests_on_the_old_version(server, adapters, tmp_path) -> None:
    """SageMaker re-registers an updated component under the same name. A request that
    started on version 1 finishes on version 1; the next is served by version 2, never from
    version 1's prefix cache (each registration is a new vLLM LoRA name and id)."""
    v1, v2 = tmp_path / "v1", tmp_path / "v2"
    shutil.copytree(adapters["attn-r4"], v1)
    shutil.copytree(adapters["all-r16"], v2)
    for d, version in ((v1, "1"), (v2, "2")):
        base = json.loads((d / "adapter_config.json").read_text())["base_model_name_or_path"]
        local = json.loads((Path(base) / "base_manifest.json").read_text())
        (d / "manifest.json").write_text(
            json.dumps(
                {
                    "name": "upd",
                    "version": version,
                    "base": {"model_id": local["model_id"], "revision": local["revision"]},
                }
            )
        )
    prompt = {"inputs": "pt 45yo m c/o sob and cp", "parameters": {"max_new_tokens": 8}}
    _register(server, "upd", v2)
    v2_text = server.invoke("upd", **prompt).json()["generated_text"]
    first = _register(server, "upd", v1)
    v1_text = server.invoke("upd", **prompt).json()["generated_text"]
    assert v1_text != v2_text
    long_body = {
        "inputs": "pt 45yo",
        "parameters": {"max_new_tokens": 1500, "min_new_tokens": 1500},
    }
    result: dict = {}
    running = threading.Thread(
        target=lambda: result.update(server.invoke("upd", **long_body).json())
    )
    running.start()
    threading.Event().wait(0.5)  # the long request is running on version 1
    second = _register(server, "upd", v2)
    assert second["lora_id"] != first["lora_id"]
    assert server.invoke("upd", **prompt).json()["generated_text"] == v2_text
    running.join(120)
    assert result["artifact"]["version"] == "1" and result["usage"]["output_tokens"] == 1500
    server.client.delete("/adapters/upd")
