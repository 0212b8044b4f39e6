"""The router's settings, read once per process from the function's environment.

The fields, their environment names and defaults are ``contracts.settings.RouterSettings``;
what is the router's own is where its routing table comes from (a file infra bundles beside the
code, or ``ROUTING_TABLE_JSON`` / ``ROUTING_TABLE_FILE`` where a test or the local platform
gives one).
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path

from contracts.routing import TABLE_FILE_ENV, TABLE_FILENAME, TABLE_JSON_ENV, RoutingTable
from contracts.settings import RouterSettings


def _table() -> RoutingTable:
    raw = os.environ.get(TABLE_JSON_ENV)
    if raw:
        return RoutingTable.loads(raw)
    path = Path(os.environ.get(TABLE_FILE_ENV, Path(__file__).with_name(TABLE_FILENAME)))
    return RoutingTable.loads(path.read_bytes())


@cache
def settings() -> RouterSettings:
    return RouterSettings.from_env(routing_table=_table())
