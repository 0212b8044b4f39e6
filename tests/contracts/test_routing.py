"""The routing table the router ships with: what the catalog writes is what the router reads."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from contracts.routing import RoutingTable


def test_the_table_survives_the_trip_through_its_file() -> None:
    from config import load_deployment

    table = load_deployment("dev").routing_table()
    assert RoutingTable.loads(table.dumps()) == table
    assert table.adapters["sales-json"].json_schema is not None  # the catalog's default schema


def test_the_router_refuses_a_table_it_would_misread() -> None:
    """A route with a field the router does not know (a typo for ``tenants``, say) would
    otherwise be served with that rule silently dropped."""
    route = {"component": "c", "version": "1", "tenant": ["clinic-north"]}
    with pytest.raises(ValidationError, match="tenant"):
        RoutingTable.model_validate(
            {"endpoint": "e", "base_component": "b", "adapters": {"a": route}}
        )
    with pytest.raises(ValidationError, match="cache"):
        RoutingTable.model_validate(
            {
                "endpoint": "e",
                "base_component": "b",
                "adapters": {"a": {"component": "c", "version": "1", "cache": "everyone"}},
            }
        )


def test_the_local_platform_serves_no_canary() -> None:
    canary = {
        "component": "c-canary",
        "version": "2",
        "weight": 10,
        "max_error_rate": 0.1,
        "window_s": 60,
        "min_requests": 5,
    }
    table = RoutingTable.model_validate(
        {
            "endpoint": "e",
            "base_component": "b",
            "adapters": {"a": {"component": "c", "version": "1", "canary": canary}},
        }
    )
    assert table.adapters["a"].canary is not None and table.adapters["a"].canary.weight == 10
    stable = table.without_canaries()
    assert stable.adapters["a"].canary is None and stable.adapters["a"].component == "c"
    assert "canary" not in stable.dumps()
