"""Catalog validation: every rule rejects with the file, the entry and the field named."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from config import (
    CATALOG_PATH,
    ENVIRONMENTS_DIR,
    AdapterEntry,
    CatalogError,
    environment_names,
    load_catalog,
    load_deployment,
)

REAL = yaml.safe_load(CATALOG_PATH.read_text())


def _write(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "adapters.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _with_adapter(**fields: object) -> dict:
    data = copy.deepcopy(REAL)
    entry = {"name": "new-adapter", "version": "1.0.0", "base": "qwen3-4b", "task": "sales_json"}
    entry.update(fields)
    data["adapters"].append(entry)
    return data


def _issue(exc: pytest.ExceptionInfo[CatalogError], field: str):
    matches = [i for i in exc.value.issues if i.field == field]
    assert matches, f"no issue on field {field!r}: {exc.value}"
    return matches[0]


def test_shipped_catalog_is_valid_for_every_environment() -> None:
    # local-quick: `make up QUICK=1`, the small Qwen3 base made here.
    assert set(environment_names()) == {"local", "local-quick", "dev", "staging", "prod"}
    for env in environment_names():
        dep = load_deployment(env)
        assert len(dep.adapters) >= 7
        tasks = {a.entry.task for a in dep.adapters}
        assert tasks == {
            "support_triage",  # a task the catalog defines, on examples/ data
            "medical_shorthand",
            "sales_json",
            "singlish_to_standard",
            "pii_redaction",
            "sentiment_neutralization",
            "style_transfer",
        }


def test_one_task_ships_two_variants_that_differ_in_rank_alpha_and_targets() -> None:
    medical = [a for a in load_catalog().adapters if a.task == "medical_shorthand"]
    assert len(medical) == 2
    a, b = (m.profile() for m in medical)
    assert a.rank != b.rank and a.alpha != b.alpha and a.targets != b.targets


def test_duplicate_name(tmp_path: Path) -> None:
    data = _with_adapter(name="sales-json")
    with pytest.raises(CatalogError) as exc:
        load_catalog(_write(tmp_path, data))
    issue = _issue(exc, "name")
    assert "sales-json" in issue.entry and "duplicate" in issue.message
    assert issue.file.endswith("adapters.yaml")


def test_duplicate_name_differing_only_in_case(tmp_path: Path) -> None:
    with pytest.raises(CatalogError) as exc:
        load_catalog(_write(tmp_path, _with_adapter(name="Sales-JSON")))
    assert "duplicate" in _issue(exc, "name").message


def test_unknown_base(tmp_path: Path) -> None:
    with pytest.raises(CatalogError) as exc:
        load_catalog(_write(tmp_path, _with_adapter(base="llama-9b")))
    issue = _issue(exc, "base")
    assert "new-adapter" in issue.entry and "llama-9b" in issue.message


def test_rank_above_max_lora_rank(tmp_path: Path) -> None:
    with pytest.raises(CatalogError) as exc:
        load_catalog(_write(tmp_path, _with_adapter(rank=128)))
    issue = _issue(exc, "rank")
    assert "new-adapter" in issue.entry
    assert "128" in issue.message and "max_lora_rank 64" in issue.message


def test_rank_inherited_from_task_is_checked_too(tmp_path: Path) -> None:
    data = copy.deepcopy(REAL)
    data["base_models"]["qwen3-4b"]["max_lora_rank"] = 32
    with pytest.raises(CatalogError) as exc:
        load_catalog(_write(tmp_path, data))
    assert any(
        "medical-shorthand-r64" in i.entry and i.field == "rank" for i in exc.value.issues
    ), exc.value


@pytest.mark.parametrize("bad", ["bad_name", "-lead", "trail-", "has space", "base", "a.b"])
def test_invalid_component_name(tmp_path: Path, bad: str) -> None:
    with pytest.raises(CatalogError) as exc:
        load_catalog(_write(tmp_path, _with_adapter(name=bad)))
    issue = _issue(exc, "name")
    assert "adapters[" in issue.entry or bad in issue.entry


def test_name_too_long_after_environment_prefix(tmp_path: Path) -> None:
    # 55 characters is fine on its own but not behind "lora-prod-" (10 characters).
    name = "a" * 55
    path = _write(tmp_path, _with_adapter(name=name))
    load_catalog(path)  # valid without an environment
    with pytest.raises(CatalogError) as exc:
        load_deployment("prod", path, ENVIRONMENTS_DIR)
    issue = _issue(exc, "name")
    assert name in issue.entry and "63" in issue.message and "lora-prod-" in issue.message


@pytest.mark.parametrize(
    "artifact",
    ["s3://bucket/adapter.zip", "https://bucket.s3.amazonaws.com/a.tar.gz", "/tmp/a.tar.gz"],
)
def test_artifact_not_a_tar_gz_s3_uri(tmp_path: Path, artifact: str) -> None:
    with pytest.raises(CatalogError) as exc:
        load_catalog(_write(tmp_path, _with_adapter(artifact=artifact)))
    issue = _issue(exc, "artifact")
    assert "new-adapter" in issue.entry and ".tar.gz" in issue.message


def test_unknown_task(tmp_path: Path) -> None:
    with pytest.raises(CatalogError) as exc:
        load_catalog(_write(tmp_path, _with_adapter(task="poetry")))
    issue = _issue(exc, "task")
    assert "new-adapter" in issue.entry and "poetry" in issue.message


def test_unknown_environment() -> None:
    with pytest.raises(CatalogError) as exc:
        load_deployment("qa")
    issue = exc.value.issues[0]
    assert issue.field == "env" and "qa" in issue.entry and "known: dev" in issue.message
    assert issue.file.endswith("qa.yaml")


def test_duplicate_yaml_key_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "adapters.yaml"
    path.write_text("base_models: {}\nbase_models: {}\nadapters: []\n")
    with pytest.raises(CatalogError, match="duplicate key"):
        load_catalog(path)


def test_base_revision_must_be_exact(tmp_path: Path) -> None:
    data = copy.deepcopy(REAL)
    data["base_models"]["qwen3-4b"]["revision"] = "main"
    with pytest.raises(CatalogError) as exc:
        load_catalog(_write(tmp_path, data))
    issue = exc.value.issues[0]
    assert "qwen3-4b" in issue.entry and "40 hex" in issue.message


def test_all_errors_are_reported_at_once(tmp_path: Path) -> None:
    data = _with_adapter(base="nope")
    data["adapters"].append(
        {"name": "x2", "version": "1", "base": "qwen3-4b", "task": "sales_json", "rank": 512}
    )
    with pytest.raises(CatalogError) as exc:
        load_catalog(_write(tmp_path, data))
    assert {i.field for i in exc.value.issues} >= {"base", "rank"}


def test_overrides_replace_profile_fields() -> None:
    raw = load_catalog().adapters[0].model_dump()
    raw.update(dropout=0.2, training={"learning_rate": 1e-3, "epochs": 1})
    profile = AdapterEntry.model_validate(raw).profile()
    assert (profile.dropout, profile.learning_rate, profile.epochs) == (0.2, 1e-3, 1)
    assert profile.rank == 64  # untouched fields keep the entry's value


def test_routing_table_maps_names_to_prefixed_components() -> None:
    table = load_deployment("dev").routing_table().as_json()
    assert table["endpoint"] == "lora-dev-endpoint"
    assert table["adapters"]["sales-json"]["component"] == "lora-dev-sales-json"
    assert table["adapters"]["sales-json"]["tenants"] == ["sales-ops", "demo"]


def test_cli_prints_table_and_fails_with_messages(tmp_path: Path) -> None:
    ok = subprocess.run(
        [sys.executable, "-m", "config", "check", "--env", "dev"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert ok.returncode == 0, ok.stderr
    assert "lora-dev-medical-shorthand-r64" in ok.stdout and "catalog ok" in ok.stdout
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "config",
            "check",
            "--catalog",
            str(_write(tmp_path, _with_adapter(task="poetry"))),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert bad.returncode == 1
    assert "adapter 'new-adapter'" in bad.stderr and "field 'task'" in bad.stderr


@pytest.mark.parametrize(
    "tenant", ["clinic north", "12345:clinic", "clinic:north", "", "role/clinic", "user/"]
)
def test_a_tenant_that_is_not_account_qualifiable_is_refused_with_the_entry(tmp_path, tenant):
    import yaml

    from config import CATALOG_PATH, CatalogError, load_catalog

    data = yaml.safe_load(CATALOG_PATH.read_text())
    data["adapters"][0]["allow"] = {"tenants": [tenant]}
    path = tmp_path / "adapters.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(CatalogError, match=data["adapters"][0]["name"]):
        load_catalog(path)


def test_account_qualified_tenants_and_cache_modes_load(tmp_path):
    import yaml

    from config import CATALOG_PATH, load_catalog

    data = yaml.safe_load(CATALOG_PATH.read_text())
    data["adapters"][0]["allow"] = {
        "tenants": [
            "clinic-north",
            "999999999999:clinic-north",
            "999999999999:*",
            "*",
            "user/clinic-north",
            "999999999999:user/clinic-north",
        ]
    }
    data["adapters"][0]["cache"] = "shared"
    path = tmp_path / "adapters.yaml"
    path.write_text(yaml.safe_dump(data))
    assert load_catalog(path).adapters[0].cache == "shared"


def _local_env(tmp_path: Path, training: dict) -> Path:
    env = yaml.safe_load((ENVIRONMENTS_DIR / "local.yaml").read_text())
    env["training"] = training
    directory = tmp_path / "envs"
    directory.mkdir(exist_ok=True)
    (directory / "local.yaml").write_text(yaml.safe_dump(env))
    return directory


def test_an_environments_training_plan_applies_by_task_then_by_adapter(tmp_path: Path) -> None:
    from config import load_deployment

    envs = _local_env(
        tmp_path,
        {
            "defaults": {"max_steps": 30, "learning_rate": 1e-3},
            "tasks": {"medical_shorthand": {"max_steps": 35}},
            "adapters": {"medical-shorthand-r8": {"max_steps": 60}},
        },
    )
    dep = load_deployment("local", CATALOG_PATH, envs)
    steps = {a.name: a.profile.max_steps for a in dep.adapters}
    assert steps["medical-shorthand-r64"] == 35 and steps["medical-shorthand-r8"] == 60
    assert steps["sales-json"] == 30
    assert dep.adapter("medical-shorthand-r8").profile.rank == 8, "the entry's own rank stays"


def test_an_environments_training_plan_may_name_a_task_the_catalog_defines(tmp_path: Path) -> None:
    """support_triage is no built-in profile: the support-triage entry defines it. Before,
    the environment's schema knew only the built-in names and refused it."""
    from config import load_deployment

    envs = _local_env(tmp_path, {"tasks": {"support_triage": {"max_steps": 7}}})
    dep = load_deployment("local", CATALOG_PATH, envs)
    steps = {a.name: a.profile.max_steps for a in dep.adapters}
    assert steps["support-triage"] == 7 and steps["sales-json"] != 7


@pytest.mark.parametrize(
    ("training", "field"),
    [
        ({"tasks": {"poetry": {"max_steps": 3}}}, "'training.tasks': unknown task 'poetry'"),
        ({"adapters": {"no-such-adapter": {"max_steps": 3}}}, "training.adapters"),
    ],
)
def test_a_training_plan_naming_an_unknown_task_or_adapter_is_refused(
    tmp_path: Path, training: dict, field: str
) -> None:
    from config import load_deployment

    with pytest.raises(CatalogError, match=field):
        load_deployment("local", CATALOG_PATH, _local_env(tmp_path, training))


def test_an_environment_without_room_for_a_rolling_batch_fails_naming_the_field(tmp_path):
    """Each copy takes an instance's GPU, and SageMaker provisions a batch (50% of the copies)
    before it retires the old one: at max_base_copies 2 on one-GPU instances, 3 are needed."""
    import shutil

    from config import CatalogError, load_deployment

    envs = tmp_path / "envs"
    shutil.copytree(ENVIRONMENTS_DIR, envs)
    data = yaml.safe_load((envs / "dev.yaml").read_text())
    data["serving"].update(max_instance_count=2, max_base_copies=2)
    (envs / "dev.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(CatalogError, match=r"raise serving\.max_instance_count to 3"):
        load_deployment("dev", environments_dir=envs)
    data["serving"]["accelerators"] = 0  # CPU copies share an instance
    data["serving"]["instance_type"] = "ml.m5.xlarge"
    (envs / "dev.yaml").write_text(yaml.safe_dump(data))
    assert load_deployment("dev", environments_dir=envs).env.serving.max_instance_count == 2


def test_a_base_revision_change_fails_check_naming_each_adapter_gated_on_the_old_one(tmp_path):
    """AWS's LoRA guidance: "Changing the base revision without reevaluating its adapters"
    is a trap. Publish records the revision an adapter passed its gate on."""
    from config import CATALOG_PATH, CatalogError, load_catalog

    data = yaml.safe_load(CATALOG_PATH.read_text())
    base = data["base_models"]["qwen3-4b"]
    gated = [a for a in data["adapters"] if a["base"] == "qwen3-4b"][:2]
    for a in gated:
        a["gated_base_revision"] = base["revision"]
    path = tmp_path / "adapters.yaml"
    path.write_text(yaml.safe_dump(data))
    load_catalog(path)  # gated on the revision the catalog names: fine
    base["revision"] = "0" * 40
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(CatalogError) as refused:
        load_catalog(path)
    text = str(refused.value)
    for a in gated:
        assert f"adapter {a['name']!r}" in text and "retrain or re-evaluate" in text
    assert text.count("gated_base_revision") == len(gated)


def test_a_token_limit_no_request_at_the_cap_could_fit_fails_check(tmp_path):
    """The router charges max_new_tokens plus the prompt's estimated tokens: a limit at or
    under max_new_tokens_cap would answer every request at the cap with a 400."""
    import shutil

    from config import CATALOG_PATH, CatalogError, load_deployment

    envs = tmp_path / "envs"
    shutil.copytree(ENVIRONMENTS_DIR, envs)
    cap = (
        yaml.safe_load((envs / "dev.yaml").read_text())
        .get("router", {})
        .get("max_new_tokens_cap", 512)
    )
    data = yaml.safe_load(CATALOG_PATH.read_text())
    entry = data["adapters"][0]
    entry["quota"] = {"tokens_per_minute": cap}
    catalog = tmp_path / "adapters.yaml"
    catalog.write_text(yaml.safe_dump(data))
    with pytest.raises(CatalogError, match=rf"adapter '{entry['name']}'.*quota") as refused:
        load_deployment("dev", catalog, envs)
    assert f"max_new_tokens_cap {cap}" in str(refused.value)
    entry["quota"] = {"tokens_per_minute": cap + 1}
    catalog.write_text(yaml.safe_dump(data))
    load_deployment("dev", catalog, envs)
    # The environment-wide limit too, named by its field.
    env = yaml.safe_load((envs / "dev.yaml").read_text())
    env.setdefault("router", {})["quota"] = {"tokens_per_minute": 10}
    (envs / "dev.yaml").write_text(yaml.safe_dump(env))
    with pytest.raises(CatalogError, match=r"quota\.tokens_per_minute 10"):
        load_deployment("dev", catalog, envs)


def test_a_tenant_name_outside_iams_ascii_characters_is_refused() -> None:
    """IAM names are ASCII, and the router reports a tenant as a CloudWatch dimension value,
    which must be ASCII; Python's \\w alone would admit 'équipe'."""
    import pytest
    from pydantic import ValidationError

    from config.schema import AccessPolicy

    with pytest.raises(ValidationError, match="équipe"):
        AccessPolicy(tenants=["équipe"])
    assert AccessPolicy(tenants=["equipe", "123456789012:ops"]).tenants


def test_an_unquoted_account_is_read_as_its_twelve_digits_or_refused(tmp_path) -> None:
    """YAML reads `account: 111122223333` unquoted as an integer, which is kept; one with a
    leading zero is read as another number (octal, or without the zero), which is refused."""
    from config import CatalogError, load_deployment
    from tests.infra.conftest import edited_config

    def unquoted(value):
        return lambda env: env.update(account=value)

    catalog, environments = edited_config(tmp_path, environment=unquoted(111122223333))
    assert load_deployment("dev", catalog, environments).env.account == "111122223333"
    for value in (11122223333, 0o12345670123):  # 011122223333 and 012345670123, unquoted
        catalog, environments = edited_config(tmp_path, environment=unquoted(value))
        with pytest.raises(CatalogError, match="quote it"):
            load_deployment("dev", catalog, environments)


def test_zones_must_be_the_regions_and_agree_with_max_azs(tmp_path) -> None:
    from config import CatalogError, load_deployment
    from tests.infra.conftest import edited_config

    def zones(value, **extra):
        def edit(env: dict) -> None:
            env["network"] = {**env.get("network", {}), "availability_zones": value, **extra}

        return edit

    catalog, environments = edited_config(tmp_path, environment=zones(["eu-west-1a", "eu-west-1b"]))
    with pytest.raises(CatalogError, match="not zones of region us-east-1"):
        load_deployment("dev", catalog, environments)
    catalog, environments = edited_config(
        tmp_path, environment=zones(["us-east-1a", "us-east-1b"], max_azs=3)
    )
    with pytest.raises(CatalogError, match="max_azs is 3 but availability_zones names 2"):
        load_deployment("dev", catalog, environments)
    catalog, environments = edited_config(tmp_path, environment=zones(["us-east-1a", "us-east-1c"]))
    assert load_deployment("dev", catalog, environments).env.network.availability_zones == [
        "us-east-1a",
        "us-east-1c",
    ]


def test_a_prefix_that_makes_no_valid_bucket_name_is_refused(tmp_path) -> None:
    from config import CatalogError, load_deployment
    from tests.infra.conftest import edited_config

    def long_prefix(env: dict) -> None:
        env["prefix"] = "lora-a-very-long-team-prefix-for-dev"

    catalog, environments = edited_config(tmp_path, environment=long_prefix)
    with pytest.raises(CatalogError, match="not a valid S3 bucket name"):
        load_deployment("dev", catalog, environments)


def test_the_usage_metrics_make_check_counts_do_not_grow_with_the_catalog() -> None:
    """A metric per adapter would be thousands of custom metrics at the
    catalog sizes that synthesize; the count is the tenants', and make check prints it."""
    import dataclasses

    from config.__main__ import usage_metrics_line

    dep = load_deployment("dev")
    line = usage_metrics_line(dep)
    assert line is not None and "whatever the number of adapters" in line
    bigger = dataclasses.replace(dep, adapters=dep.adapters * 50)
    assert usage_metrics_line(bigger) == line
    assert usage_metrics_line(load_deployment("local")) is None


def test_a_deployable_environment_must_say_its_region(tmp_path) -> None:
    """A default region is a stand-in: the file names where the environment lives."""
    from config import CatalogError, load_deployment
    from tests.infra.conftest import edited_config

    catalog, environments = edited_config(tmp_path, environment=lambda env: env.pop("region"))
    with pytest.raises(CatalogError, match="region: required"):
        load_deployment("dev", catalog, environments)


def test_a_region_without_the_public_web_adapter_layer_needs_a_copy_named(tmp_path) -> None:
    """The layer is published from awslabs' account in commercial regions only."""
    from config import CatalogError, load_deployment
    from tests.infra.conftest import edited_config

    catalog, environments = edited_config(
        tmp_path, environment=lambda env: env.update(region="cn-north-1")
    )
    with pytest.raises(
        CatalogError, match=r"router\.web_adapter_layer_arn: required in cn-north-1"
    ):
        load_deployment("dev", catalog, environments)

    def with_copy(env: dict) -> None:
        env.update(region="cn-north-1")
        env.setdefault("router", {})["web_adapter_layer_arn"] = (
            "arn:aws-cn:lambda:cn-north-1:111122223333:layer:LambdaAdapterLayerArm64:25"
        )

    catalog, environments = edited_config(tmp_path, environment=with_copy)
    assert load_deployment("dev", catalog, environments).env.region == "cn-north-1"
