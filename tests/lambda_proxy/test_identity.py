"""Account-qualified callers, no enumeration, tenant-private caching, and bounded input."""

from __future__ import annotations

import json
import uuid

import pytest

from contracts.settings import RouterSettings
from lambda_proxy import service
from tests.lambda_proxy.conftest import TABLE, call, event, invoke_params, model_answer, routed

OWN = "123456789012"
FOREIGN = "999999999999"


def _body(**params):
    # A new prompt every time: Redis keeps answers between runs.
    return {
        "inputs": f"pt 45yo m c/o sob {uuid.uuid4().hex}",
        "parameters": {"max_new_tokens": 8, **params},
    }


def _expect(stub, component: str = "lora-test-medical", check=None) -> None:
    expected = None if check is None else invoke_params(component, body=check)
    name = component.removeprefix("lora-test-")
    version = TABLE["adapters"][name]["version"]
    artifact = {"name": name, "version": version, "sha256": "0" * 64}
    stub.add_response("invoke_endpoint", model_answer(artifact=artifact), expected)


@pytest.mark.parametrize(
    "arn",
    [
        f"arn:aws:sts::{FOREIGN}:assumed-role/clinic-north/x",
        f"arn:aws:iam::{FOREIGN}:user/clinic-north",
    ],
)
def test_the_same_role_or_user_name_in_another_account_is_someone_else(router, arn) -> None:
    status, out = call(event(body=_body(), arn=arn))
    assert status == 404 and out["error"] == "unknown adapter 'medical'"


def test_another_accounts_tenant_is_admitted_only_when_named_with_its_account(
    router, sagemaker
) -> None:
    stub, cache = router
    table = json.loads(json.dumps(TABLE))
    table["adapters"]["medical"]["tenants"] = [f"{FOREIGN}:clinic-north"]
    service.configure(
        service.Dependencies(RouterSettings(routing_table=table), cache, sagemaker[0])
    )
    _expect(stub)
    assert (
        call(event(body=_body(), arn=f"arn:aws:sts::{FOREIGN}:assumed-role/clinic-north/x"))[0]
        == 200
    )
    # ... and the bare name no longer admits this account's clinic-north.
    assert call(event(body=_body()))[0] == 404


def test_an_authorizer_claim_does_not_override_the_iam_identity(router) -> None:
    ev = event(body=_body(), arn=f"arn:aws:sts::{OWN}:assumed-role/intruder/x")
    ev["requestContext"]["authorizer"] = {"claims": {"tenant": "clinic-north"}}
    assert call(ev)[0] == 404


def test_unknown_and_forbidden_adapters_cannot_be_told_apart(router) -> None:
    stranger = f"arn:aws:sts::{OWN}:assumed-role/stranger/s"
    forbidden = call(event(body=_body(), arn=stranger))
    unknown = call(event(path="/v1/adapters/medicaI/generate", body=_body(), arn=stranger))
    assert forbidden[0] == unknown[0] == 404
    assert forbidden[1]["error"].replace("medical", "X") == unknown[1]["error"].replace(
        "medicaI", "X"
    )
    # No identity at all: refused before any adapter name is looked at.
    assert call(event(path="/v1/adapters/nope/generate", body=_body(), arn=None))[0] == 403
    assert call(event(body=_body(), arn=None))[0] == 403


def test_a_cached_answer_is_private_to_the_tenant_that_asked(router, sagemaker) -> None:
    stub, cache = router
    table = json.loads(json.dumps(TABLE))
    table["adapters"]["medical"]["tenants"] = ["clinic-north", "clinic-south"]
    service.configure(
        service.Dependencies(RouterSettings(routing_table=table), cache, sagemaker[0])
    )
    body = _body()
    north = f"arn:aws:sts::{OWN}:assumed-role/clinic-north/a"
    south = f"arn:aws:sts::{OWN}:assumed-role/clinic-south/b"
    _expect(stub)
    assert call(event(body=body, arn=north))[1]["cache"] == "miss"
    assert call(event(body=body, arn=north))[1]["cache"] == "hit"
    _expect(stub)
    assert call(event(body=body, arn=south))[1]["cache"] == "miss", "another tenant's answer"


def test_shared_and_off_cache_modes(router, sagemaker) -> None:
    stub, cache = router
    table = json.loads(json.dumps(TABLE))
    table["adapters"]["public"]["cache"] = "shared"
    table["adapters"]["medical"]["cache"] = "off"
    service.configure(
        service.Dependencies(RouterSettings(routing_table=table), cache, sagemaker[0])
    )
    body = _body()
    a = f"arn:aws:sts::{OWN}:assumed-role/clinic-north/a"
    b = f"arn:aws:sts::{OWN}:assumed-role/someone/b"
    _expect(stub, "lora-test-public")
    assert call(event(path="/v1/adapters/public/generate", body=body, arn=a))[1]["cache"] == "miss"
    assert call(event(path="/v1/adapters/public/generate", body=body, arn=b))[1]["cache"] == "hit"
    for _ in range(2):
        _expect(stub)
        assert call(event(body=body, arn=a))[1]["cache"] == "bypass"


@pytest.mark.parametrize("depth", [1_500, 100_000])
def test_deeply_nested_json_is_a_400(router, sagemaker, depth) -> None:
    _, cache = router
    service.configure(
        service.Dependencies(RouterSettings(routing_table=TABLE), cache, sagemaker[0])
    )
    deep = "[" * depth + "]" * depth
    status, out = call(event(body='{"inputs": "x", "parameters": ' + deep + "}"))
    assert status == 400, out


def test_a_cache_entry_that_is_not_an_object_is_a_miss(router, redis_client) -> None:
    from lambda_proxy.cache import ResponseCache

    cache = ResponseCache(redis_client, 60)
    for raw in (b"[1, 2]", b'"text"', b"42", b"[" * 50_000 + b"]" * 50_000):
        redis_client.set("lora:v1:test:odd", raw)
        assert cache.get("lora:v1:test:odd") is None
    redis_client.delete("lora:v1:test:odd")


def test_the_cap_bounds_the_default_number_of_new_tokens(router, sagemaker) -> None:
    stub, cache = router
    settings = RouterSettings(routing_table=TABLE, max_new_tokens_cap=16)
    service.configure(service.Dependencies(settings, cache, sagemaker[0]))
    sent = {}

    def capture(body) -> bool:
        sent.update(json.loads(body))
        return True

    class Captured:
        def __eq__(self, other) -> bool:
            return capture(other)

    stub.add_response(
        "invoke_endpoint",
        model_answer(),
        invoke_params(body=Captured()),
    )
    status, _ = call(
        event(body={"inputs": "x", "parameters": {"do_sample": True, "temperature": 0.5}})
    )
    assert status == 200
    assert sent["parameters"]["max_new_tokens"] == 16


def test_an_answer_from_another_artifact_version_is_not_cached(router) -> None:
    stub, _ = router
    body = _body()
    stale = {"name": "medical", "version": "0.9.0", "sha256": "ab" * 32}
    for _ in range(2):  # both go to the model: the first answer came from the old version
        stub.add_response("invoke_endpoint", model_answer(artifact=stale))
        status, out = call(event(body=body))
        assert status == 200 and out["cache"] == "miss"
    current = {"name": "medical", "version": "1.0.0", "sha256": "cd" * 32}
    stub.add_response("invoke_endpoint", model_answer(artifact=current))
    assert call(event(body=body))[1]["cache"] == "miss"
    assert call(event(body=body))[1]["cache"] == "hit"


@pytest.mark.parametrize(
    "params",
    [
        {"do_sample": True, "temperature": 5e-324},
        {"repetition_penalty": 1e-300},
        {"repetition_penalty": 10.5},
    ],
)
def test_sampling_parameters_outside_the_runtimes_bounds_are_a_400(router, params) -> None:
    status, out = call(event(body=_body(**params)))
    assert status == 400 and out["details"][0]["field"].startswith("parameters.")


def test_health_needs_a_caller_and_shows_details_to_operators_only(router) -> None:
    assert call(event("GET", "/health", arn=None))[0] == 403
    status, out = call(event("GET", "/health"))
    assert status == 200 and out == {"status": "ok"}
    operator = f"arn:aws:iam::{OWN}:role/ops"
    table = {**TABLE, "operators": [operator]}
    _, cache = router
    service.configure(service.Dependencies(RouterSettings(routing_table=table), cache, None))
    status, out = call(event("GET", "/health", arn=f"arn:aws:sts::{OWN}:assumed-role/ops/s"))
    assert status == 200 and out["endpoint"] == "lora-test-endpoint" and out["adapters"] == 3


def test_an_iam_user_is_not_the_role_of_the_same_name(router, sagemaker) -> None:
    stub, cache = router
    routed(cache, sagemaker[0], medical={"tenants": ["clinic-north", "user/clinic-north"]})
    body = _body()
    role = f"arn:aws:sts::{OWN}:assumed-role/clinic-north/a"
    user = f"arn:aws:iam::{OWN}:user/clinic-north"
    _expect(stub)
    assert call(event(body=body, arn=role))[1]["cache"] == "miss"
    _expect(stub)
    assert call(event(body=body, arn=user))[1]["cache"] == "miss", "the role's cached answer"
    # A catalog that names only the role does not admit the user.
    service.configure(
        service.Dependencies(RouterSettings(routing_table=TABLE), cache, sagemaker[0])
    )
    assert call(event(body=_body(), arn=user))[0] == 404


def _claiming(arn: str, claim: str) -> dict:
    ev = event(body=_body(), arn=arn)
    ev["requestContext"]["authorizer"] = {"claims": {"tenant": claim}}
    ev["requestContext"]["accountId"] = OWN
    return ev


def test_a_tenant_claim_is_a_name_in_the_callers_own_account(router, sagemaker) -> None:
    stub, cache = router
    settings = RouterSettings(routing_table=TABLE, trust_tenant_claim=True)
    service.configure(service.Dependencies(settings, cache, sagemaker[0]))
    # This account's caller claiming clinic-north is clinic-north ...
    _expect(stub)
    assert call(_claiming(f"arn:aws:sts::{OWN}:assumed-role/app/s", "clinic-north"))[0] == 200
    # ... another account's is that account's clinic-north, which the catalog does not admit.
    assert call(_claiming(f"arn:aws:sts::{FOREIGN}:assumed-role/app/s", "clinic-north"))[0] == 404
    # A claim that is not an IAM name never reaches a Redis key.
    for claim in ("x:*:\n*", f"{OWN}:clinic-north", "a" * 65, ""):
        assert call(_claiming(f"arn:aws:sts::{OWN}:assumed-role/app/s", claim))[0] == 403
