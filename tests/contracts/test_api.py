"""The route table (``contracts.api.ROUTES``) is the API: the deployed gateway, the function's
dispatch and the local gateway serve exactly its routes, no more."""

from __future__ import annotations

import pytest

from contracts.api import ROUTES, ApiRoute, route_of
from tests.infra.conftest import resources


def test_a_path_parameter_matches_one_segment_and_nothing_else_matches() -> None:
    route, params = route_of("POST", "/v1/adapters/pii-redaction/generate")
    assert route.name == "generate" and params == {"adapter": "pii-redaction"}
    for method, path in [
        ("GET", "/v1/adapters/pii-redaction/generate"),
        ("POST", "/v1/adapters/a/b/generate"),
        ("POST", "/v1/adapters//generate"),
        ("GET", "/v1/adapters/"),
        ("DELETE", "/health"),
        ("GET", "/v1/models/x"),
    ]:
        assert route_of(method, path) is None, (method, path)


def _gateway_paths(template: dict) -> set[tuple[str, str]]:
    """(method, resource path) of every API Gateway method in the router's template."""
    res = resources(template, "AWS::ApiGateway::Resource")

    def path_of(ref: object) -> str:
        if not isinstance(ref, dict) or "Ref" not in ref:
            return ""  # the API's root resource (Fn::GetAtt RootResourceId)
        props = res[ref["Ref"]]["Properties"]
        return path_of(props["ParentId"]) + "/" + props["PathPart"]

    return {
        (m["Properties"]["HttpMethod"], path_of(m["Properties"]["ResourceId"]))
        for m in resources(template, "AWS::ApiGateway::Method").values()
    }


def test_the_deployed_api_declares_exactly_the_route_table(dev_templates) -> None:
    template = dev_templates["lora-dev-router"]
    assert _gateway_paths(template) == {(r.method, r.path) for r in ROUTES}
    methods = resources(template, "AWS::ApiGateway::Method").values()
    modelled = {
        m["Properties"]["HttpMethod"] for m in methods if "RequestModels" in m["Properties"]
    }
    assert modelled == {r.method for r in ROUTES if r.gateway_model}


def test_the_function_dispatches_exactly_the_route_table() -> None:
    """Powertools' resolver has a handler for each route, from the door the table names, and
    none else (its ``_route_keys``, ``METHOD/rule``, is what it matches an event against)."""
    from lambda_proxy import handler, openai_api

    assert sorted(handler.app._route_keys) == sorted(
        f"{r.method}{r.powertools_path}" for r in ROUTES
    )
    for route in ROUTES:
        door = handler if route.door == "native" else openai_api
        assert callable(getattr(door, route.name)), route


@pytest.mark.parametrize("route", ROUTES, ids=lambda r: f"{r.method} {r.path}")
def test_the_local_gateway_serves_every_route(route: ApiRoute) -> None:
    path = route.path.replace("{adapter}", "pii-redaction")
    found = route_of(route.method, path)
    assert found is not None and found[0] == route
