"""The local platform as a user meets it: ``up``, requests through the gateway, a new catalog
entry, the playground in a real browser."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import uuid

import boto3
import httpx
import pytest

from config import load_deployment
from local.processes import read_state

pytestmark = pytest.mark.e2e


def request_body(instruction: str, text: str, max_new_tokens: int) -> dict:
    """A deterministic request in the shape adapters are trained on (task instruction first)."""
    return {
        "messages": [{"role": "system", "content": instruction}, {"role": "user", "content": text}],
        "parameters": {"max_new_tokens": max_new_tokens, "do_sample": False},
    }


def _deployment(platform):
    return load_deployment("local", platform.catalog, platform.environments)


def test_up_prints_the_urls_and_a_tour_of_every_adapter(platform) -> None:
    out = platform.first_up.stdout
    dep = _deployment(platform)
    assert f"playground        {platform.gateway}/" in out
    assert "response cache    redis" in out or "response cache    in-process" in out
    assert "tour: one request per serving adapter" in out
    # The platform answered before the adapters trained; they came online one by one after.
    assert out.index("platform ready in") < out.index("training in the background")
    for a in dep.adapters:
        assert f"{a.name}: online" in out, a.name
    rows = {
        line.split()[0]: line
        for line in out.splitlines()
        if line.startswith("  ") and len(line.split()) > 3 and "(again)" not in line
    }
    for a in dep.adapters:
        assert rows[a.name].split()[1] == "200", rows[a.name]
    again = next(line for line in out.splitlines() if "(again)" in line)
    assert again.split()[2] == "200" and " hit " in again  # the repeat came from the cache


def test_every_adapter_answers_through_the_gateway_from_its_own_component(platform) -> None:
    dep = _deployment(platform)
    with httpx.Client(base_url=platform.gateway, timeout=60) as client:
        listed = client.get("/v1/adapters").json()["adapters"]
        assert {a["name"] for a in listed} == {a.name for a in dep.adapters}
        for a in dep.adapters:
            body = request_body(a.profile.instruction, "pt 45yo m c/o sob", 8)
            resp = client.post(f"/v1/adapters/{a.name}/generate", json=body)
            assert resp.status_code == 200, resp.text
            answer = resp.json()
            assert answer["adapter"] == a.name and answer["version"] == a.entry.version
            # What the container itself says it served: the adapter component of this entry.
            assert answer["served_by"] == a.component_name
            # ... and the artifact's own identity, from its manifest.
            assert (answer["artifact"]["name"], answer["artifact"]["version"]) == (
                a.name,
                a.entry.version,
            )
            assert len(answer["artifact"]["sha256"]) == 64
        assert client.post("/v1/adapters/no-such-adapter/generate", json=body).status_code == 404
        forbidden = client.post(
            f"/v1/adapters/{dep.adapters[0].name}/generate",
            json=body,
            headers={"X-Local-Tenant": "intruder"},
        )
        assert forbidden.status_code == 404  # "not yours" answers like "no such adapter"


def test_an_adapter_trained_on_a_teams_own_file_answers_through_the_router(platform) -> None:
    """support-triage: a task the catalog defines, trained by ``up`` on examples/, gated
    against its baselines, published to the platform and answered (decoded to its schema)."""
    from jsonschema import validate

    from config.loader import SCHEMAS_DIR

    base_key = _deployment(platform).base_key
    manifest = json.loads(
        (
            platform.artifacts / "adapters" / base_key / "support-triage" / "manifest.json"
        ).read_text()
    )
    assert manifest["task"] == "support_triage"
    assert manifest["dataset"]["source"] == "file"
    assert manifest["dataset"]["path"] == "examples/support-triage.jsonl"
    assert len(manifest["dataset"]["file_sha256"]) == 64
    assert set(manifest["eval"]["against"]) == {
        "base",
        "echo",
        "nearest_label",
        "most_frequent_label",
    }
    text = "Hi, I was charged twice for order 88123 and nobody answers my e-mails. Fix it today!"
    answer = httpx.post(
        f"{platform.gateway}/v1/adapters/support-triage/generate",
        json={"inputs": text, "parameters": {"max_new_tokens": 200, "do_sample": False}},
        timeout=120,
    ).json()
    assert answer["served_by"].endswith("-support-triage"), answer
    schema = json.loads((SCHEMAS_DIR / "support-triage.json").read_text())
    validate(json.loads(answer["output"]), schema)


def test_a_repeated_deterministic_request_is_a_cache_hit(platform) -> None:
    name = _deployment(platform).adapters[0].name
    body = request_body(
        "Expand the clinical shorthand into full medical terminology.",
        f"pt 60yo f c/o cp {uuid.uuid4().hex[:8]}",
        8,
    )
    with httpx.Client(base_url=platform.gateway, timeout=60) as client:
        first = client.post(f"/v1/adapters/{name}/generate", json=body).json()
        second = client.post(f"/v1/adapters/{name}/generate", json=body).json()
    assert (first["cache"], second["cache"]) == ("miss", "hit")
    assert second["output"] == first["output"]


def test_the_endpoint_speaks_the_real_invoke_endpoint_protocol(platform) -> None:
    dep = _deployment(platform)
    client = boto3.client(
        "sagemaker-runtime",
        endpoint_url=platform.endpoint,
        region_name="us-east-1",
        aws_access_key_id="local",
        aws_secret_access_key="local",
    )
    a = dep.adapters[0]
    payload = json.dumps(request_body("x", "pt 45yo m", 6)).encode()
    resp = client.invoke_endpoint(
        EndpointName=dep.endpoint_name,
        Body=payload,
        InferenceComponentName=a.component_name,
        ContentType="application/json",
    )
    assert json.loads(resp["Body"].read())["adapter"] == a.component_name
    stream = client.invoke_endpoint_with_response_stream(
        EndpointName=dep.endpoint_name,
        Body=payload,
        InferenceComponentName=a.component_name,
        ContentType="application/json",
    )
    chunks = b"".join(e["PayloadPart"]["Bytes"] for e in stream["Body"] if "PayloadPart" in e)
    last = json.loads(chunks.decode().strip().splitlines()[-1])
    assert last["done"] is True and last["adapter"] == a.component_name
    with pytest.raises(client.exceptions.ValidationError):
        client.invoke_endpoint(
            EndpointName=dep.endpoint_name, Body=payload, InferenceComponentName="lora-e2e-missing"
        )


def test_a_new_catalog_entry_is_served_without_restarting_the_base(platform) -> None:
    runtime_pid = read_state(platform.state)["processes"]["runtime"]["pid"]
    data = platform.catalog_data()
    before = len(data["adapters"])
    data["adapters"].append(
        {
            "name": "claims-summary",
            "version": "1.0.0",
            "base": "qwen3-4b",
            "task": "style_transfer",
            "description": "Claims notes in formal register.",
            "rank": 4,
            "alpha": 8,
            "targets": "attention",
            "allow": {"tenants": ["demo"]},
        }
    )
    platform.write_catalog(data)
    again = platform.up("--no-tour")
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert (
        f"{before} ready, 1 to train" in again.stdout
        and "claims-summary: no artifact yet" in again.stdout
    )
    assert "reusing the running platform" in again.stdout
    assert f"{before} unchanged" in again.stdout  # the new one is declared once trained
    assert "claims-summary: online" in again.stdout
    status = subprocess.run(
        [sys.executable, "-m", "local", "status", "--state-dir", str(platform.state)],
        capture_output=True,
        text=True,
        check=False,
        cwd=platform.root,
    )
    assert "claims-summary" in status.stdout and "online" in status.stdout, status.stdout
    assert read_state(platform.state)["processes"]["runtime"]["pid"] == runtime_pid
    base_loads = [
        e
        for e in httpx.get(f"{platform.runtime}/trace?limit=1000").json()["events"]
        if e["event"] == "base_load"
    ]
    assert len(base_loads) == 1
    body = request_body("Rewrite the informal text in a formal register.", "hey thx", 8)
    answer = httpx.post(
        f"{platform.gateway}/v1/adapters/claims-summary/generate", json=body, timeout=60
    ).json()
    assert answer["served_by"] == "lora-e2e-claims-summary"


def test_the_playground_runs_a_query_in_a_browser(platform) -> None:
    chromedriver = shutil.which("chromedriver")
    chromium = next(
        filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None
    )
    if chromedriver is None or chromium is None:
        pytest.fail("chromium and chromium-driver are required (.ci/run installs them)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    from tests.e2e.conftest import ARTIFACTS

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--window-size=1440,900",
        "--disable-gpu",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(chromedriver), options=options)
    try:
        wait = WebDriverWait(driver, 60)
        driver.get(platform.gateway + "/?adapter=sales-json")
        wait.until(ec.element_to_be_clickable((By.ID, "run")))
        card = driver.find_element(
            By.CSS_SELECTOR, '.adapter-card[data-name="medical-shorthand-r64"]'
        )
        card.click()
        assert "selected" in card.get_attribute("class")
        driver.find_element(By.CSS_SELECTOR, ".sample").click()
        assert driver.find_element(By.ID, "query").get_attribute("value")
        driver.find_element(By.ID, "run").click()
        wait.until(
            lambda d: (
                "pending"
                not in d.find_element(By.CSS_SELECTOR, "#result-adapter .output").get_attribute(
                    "class"
                )
            )
        )
        wait.until(
            lambda d: (
                "pending"
                not in d.find_element(By.CSS_SELECTOR, "#result-base .output").get_attribute(
                    "class"
                )
            )
        )
        badges = driver.find_element(By.CSS_SELECTOR, "#result-adapter .badges").text
        assert "cache" in badges and "ms" in badges, badges
        # The live trace shows the router's request and the status bar the runtime's tiers.
        wait.until(lambda d: "router_request" in d.find_element(By.ID, "trace").text)
        assert "device" in driver.find_element(By.ID, "st-tiers").text
        # Compare variants: both medical adapters side by side with their LoRA settings.
        driver.find_element(By.ID, "compare").click()
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, ".result")) == 3)
        wait.until(lambda d: not d.find_elements(By.CSS_SELECTOR, ".output.pending"))
        subs = [e.text for e in driver.find_elements(By.CSS_SELECTOR, ".result .sub")]
        assert any("r=64" in s for s in subs) and any("r=8" in s for s in subs)
        time.sleep(1.2)  # one trace poll, so the screenshot shows the latest events
        ARTIFACTS.mkdir(exist_ok=True)
        assert driver.save_screenshot(str(ARTIFACTS / "playground.png"))
    finally:
        driver.quit()


def test_the_smoke_check_invokes_every_adapter_through_the_router(platform) -> None:
    import subprocess
    import sys

    from tests.e2e.conftest import ROOT

    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ops.smoke",
            "--env",
            "local",
            "--url",
            platform.gateway,
            "--catalog",
            str(platform.catalog),
            "--environments-dir",
            str(platform.environments),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    dep = _deployment(platform)
    for a in dep.adapters:
        line = next(x for x in proc.stdout.splitlines() if x.startswith(a.name + " "))
        # The artifact's own name and version (its manifest), as the catalog names them.
        assert " 200 " in line and f"ok  {a.name}@{a.entry.version} sha256:" in line, line
    assert f"{len(dep.adapters)}/{len(dep.adapters)} adapters answered" in proc.stdout


def test_the_smoke_check_passes_as_an_sso_role_that_no_adapter_lists(platform, monkeypatch) -> None:
    """The release's smoke runs as an SSO session, whose
    assumed-role ARN drops the role's path. The environment lists the role by the ARN the
    console shows (path and all) under router.operators; no adapter lists it as a tenant, so
    every 200 here is the operator match by account and name."""
    from ops import smoke
    from tests.e2e.conftest import SSO_ROLE

    dep = _deployment(platform)
    assert all(SSO_ROLE not in a.entry.allow.tenants for a in dep.adapters)
    signed = smoke._signed

    def as_sso(url, body, region, extra=None):
        # The local gateway's stand-in for SigV4: the session arn:aws:sts::ACCOUNT:assumed-role/
        # SSO_ROLE/local, as API Gateway would report an SSO session's.
        return signed(url, body, region, {**(extra or {}), "X-Local-Tenant": SSO_ROLE})

    monkeypatch.setattr(smoke, "_signed", as_sso)
    results = smoke.invoke_all(dep, platform.gateway)
    assert results and all(r.ok for r in results), smoke.render(results)
    with httpx.Client(base_url=platform.gateway, timeout=60) as client:
        refused = client.post(
            f"/v1/adapters/{dep.adapters[0].name}/generate",
            json={"inputs": "hi"},
            headers={"X-Local-Tenant": "AWSReservedSSO_Other_0123456789abcdef"},
        )
    assert refused.status_code in (403, 404), "another SSO role is no operator"


def test_a_refused_artifact_leaves_the_good_adapter_serving(platform, tmp_path) -> None:
    import tarfile

    dep = _deployment(platform)
    victim = dep.adapters[0]
    good = {
        a.component_name: str(platform.artifacts / "adapters" / dep.base_key / f"{a.name}.tar.gz")
        for a in dep.adapters
    }
    bad = tmp_path / "bad.tar.gz"
    config = tmp_path / "adapter_config.json"
    config.write_text(json.dumps({"peft_type": "PROMPT_TUNING"}))
    with tarfile.open(bad, "w:gz") as tar:
        tar.add(config, arcname="adapter_config.json")
    wanted = [
        {"component": c, "artifact": str(bad) if c == victim.component_name else a}
        for c, a in good.items()
    ]
    actions = httpx.put(
        f"{platform.endpoint}/_local/components", json={"adapters": wanted}, timeout=120
    ).json()["actions"]
    (refused,) = [x for x in actions if x["component"] == victim.component_name]
    assert refused["action"] == "registration-failed" and refused["status"] == 424
    listed = httpx.get(f"{platform.endpoint}/_local/components").json()["components"]
    (comp,) = [c for c in listed if c["name"] == victim.component_name]
    assert comp["status"] == "InService" and "rejected" in comp["registration"]
    body = request_body(victim.profile.instruction, "pt 50yo m", 4)
    answer = httpx.post(
        f"{platform.gateway}/v1/adapters/{victim.name}/generate", json=body, timeout=60
    ).json()
    assert answer["served_by"] == victim.component_name  # the previous artifact still serves
    restored = httpx.put(
        f"{platform.endpoint}/_local/components",
        json={"adapters": [{"component": c, "artifact": a} for c, a in good.items()]},
        timeout=120,
    ).json()
    assert {x["action"] for x in restored["actions"]} <= {"unchanged", "updated"}


def test_local_usage_counts_the_requests_this_test_sent(platform, tmp_path) -> None:
    """Each request through the gateway is one usage record, per tenant and adapter, with the
    tokens its answer reports; ``python -m local usage`` prints them and writes CSV."""
    import csv

    dep = _deployment(platform)
    name = next(a.name for a in dep.adapters if "clinic-north" in a.entry.allow.tenants)
    tenant = "clinic-north"
    sent, tokens_in, tokens_out = 0, 0, 0
    with httpx.Client(base_url=platform.gateway, timeout=60) as client:
        for i in range(3):
            body = request_body(
                "Expand the clinical shorthand into full medical terminology.",
                f"pt {40 + i}yo m c/o sob {uuid.uuid4().hex[:8]}",
                6,
            )
            answer = client.post(
                f"/v1/adapters/{name}/generate", json=body, headers={"X-Local-Tenant": tenant}
            )
            assert answer.status_code == 200, answer.text
            sent += 1
            tokens_in += answer.json()["usage"]["input_tokens"]
            tokens_out += answer.json()["usage"]["output_tokens"]
    out = tmp_path / "usage.csv"
    shown = subprocess.run(
        [sys.executable, "-m", "local", "usage", "--state-dir", str(platform.state),
         "--csv", str(out)],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    rows = {(r["tenant"], r["adapter"]): r for r in csv.DictReader(out.open())}
    mine = rows[(f"000000000000:{tenant}", name)]
    assert (int(mine["requests"]), int(mine["tokens_in"]), int(mine["tokens_out"])) == (
        sent,
        tokens_in,
        tokens_out,
    )
    assert f"000000000000:{tenant}" in shown and name in shown
