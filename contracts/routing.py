"""The routing table: what the router ships with, generated from the catalog at synth.

``config.loader`` builds it from a resolved deployment; infra bundles it beside the router's
code; the router reads it at start. An adapter name maps to an inference-component name only
through this table, so nothing in a request body can name a component.
"""

from __future__ import annotations

import json
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field

#: The environment variables a routing table is read from, besides the file bundled beside the
#: router's code (``TABLE_FILENAME``): the table itself, or another file. The router reads them
#: and the local gateway sets them, by these names only.
TABLE_JSON_ENV = "ROUTING_TABLE_JSON"
TABLE_FILE_ENV = "ROUTING_TABLE_FILE"
TABLE_FILENAME = "routing_table.json"


class _Part(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class QuotaLimits(_Part):
    """Per-tenant limits per minute; a limit left out is not enforced."""

    requests_per_minute: int | None = Field(default=None, ge=1)
    tokens_per_minute: int | None = Field(default=None, ge=1)


class CanaryRoute(_Part):
    """An entry's second version, served to ``weight`` percent of session keys until its error
    rate over ``window_s`` passes ``max_error_rate``, with failures from ``min_callers``
    distinct callers (``lambda_proxy.canary``)."""

    component: str
    version: str
    weight: int
    max_error_rate: float
    window_s: int
    min_requests: int
    #: Distinct failing callers needed before a rollback (one tenant cannot end a canary).
    min_callers: int = Field(default=1, ge=1)
    sha256: str | None = None
    weights_sha256: str | None = None
    #: Shadow mode (``lambda_proxy.shadow``): the share of stable's buffered requests mirrored
    #: to the canary; None routes ``weight`` percent of keys to it from the start.
    shadow: float | None = None
    #: The quality signals compared (``contracts.quality``), each with its margin.
    margins: dict[str, float] = Field(default_factory=dict)
    min_pairs: int = 30
    promote_after: int = 200
    promote: Literal["split", "hold"] = "split"
    confidence: float = 0.95
    #: The model package group this version is registered in (``contracts.registry``), where
    #: the router records the paired test's decision; None: no record is written.
    registry_group: str | None = None


class Route(_Part):
    """One adapter: the component that serves it and who may call it."""

    component: str
    version: str
    task: str = ""
    description: str = ""
    #: Tenants (``ACCOUNT:NAME``, ``NAME`` in the function's own account, ``ACCOUNT:*``).
    tenants: tuple[str, ...] = ()
    #: IAM principal ARNs allowed besides the tenants.
    principals: tuple[str, ...] = ()
    #: Whose cached answers a request may be shown: the caller's tenant, everyone, nobody.
    cache: Literal["tenant", "shared", "off"] = "tenant"
    #: The pinned digests: part of the cache key; the weights' is compared with each answer's.
    sha256: str | None = None
    weights_sha256: str | None = None
    quota: QuotaLimits | None = None
    #: The default JSON schema requests for this adapter are decoded to.
    json_schema: dict[str, Any] | None = None
    canary: CanaryRoute | None = None
    #: Prompt tokens the container adds to a request that brings no system turn (the
    #: adapter's instruction and the answer's opening): charged to the quota with it.
    prompt_overhead: int = Field(default=0, ge=0)


class RoutingTable(_Part):
    endpoint: str
    base_component: str
    base_revision: str | None = None
    #: IAM principals that see every adapter and the health details.
    operators: tuple[str, ...] = ()
    adapters: dict[str, Route] = Field(default_factory=dict)

    @classmethod
    def loads(cls, data: str | bytes) -> Self:
        return cls.model_validate_json(data)

    def as_json(self) -> dict[str, Any]:
        """The table as JSON data; a field without a value is left out."""
        return self.model_dump(mode="json", exclude_none=True)

    def dumps(self) -> str:
        """The table as the router's file holds it (stable bytes: the bundle's hash)."""
        return json.dumps(self.as_json(), indent=1, sort_keys=True)

    def without_canaries(self) -> Self:
        """Every adapter's stable version only (the local endpoint serves no canary)."""
        adapters = {n: r.model_copy(update={"canary": None}) for n, r in self.adapters.items()}
        return self.model_copy(update={"adapters": adapters})
