"""The router's API: every route, once. The deployed gateway's resources (``infra/router.py``),
the function's own dispatch (``lambda_proxy.handler``, ``lambda_proxy.openai_api`` and the
streaming web app) and the local gateway (``local/gateway.py``) are all built from ``ROUTES``, so
a route added here is added everywhere, and one missing anywhere fails the route table's test.

Paths are written as API Gateway writes a resource path (``{adapter}`` for a path parameter); a
parameter matches one path segment, as API Gateway's does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

#: How a route answers ``stream: true``: server-sent events of the native API, OpenAI's chat
#: or completion chunks; None when it does not stream.
StreamKind = Literal["native", "chat", "completion"]


@dataclass(frozen=True)
class ApiRoute:
    method: Literal["GET", "POST"]
    #: The resource path, as API Gateway names it (``/v1/adapters/{adapter}/generate``).
    path: str
    #: The handler's name in its door (``lambda_proxy.handler`` or ``lambda_proxy.openai_api``).
    name: str
    door: Literal["native", "openai"]
    stream: StreamKind | None = None
    #: The gateway validates the body against the generate request's model before the function
    #: runs (the OpenAI door validates its own bodies, to answer in OpenAI's error shape).
    gateway_model: bool = False

    @property
    def parameters(self) -> tuple[str, ...]:
        return tuple(re.findall(r"\{(\w+)\}", self.path))

    @property
    def segments(self) -> tuple[str, ...]:
        return tuple(self.path.strip("/").split("/"))

    @property
    def powertools_path(self) -> str:
        """The path in Powertools' resolver syntax (``<adapter>``)."""
        return re.sub(r"\{(\w+)\}", r"<\1>", self.path)

    def match(self, method: str, path: str) -> dict[str, str] | None:
        """The path parameters when ``method path`` is this route, else None."""
        if method != self.method:
            return None
        found = _pattern(self.path).match(path)
        return None if found is None else found.groupdict()


ROUTES: tuple[ApiRoute, ...] = (
    ApiRoute("GET", "/health", "health", "native"),
    ApiRoute("GET", "/v1/adapters", "list_adapters", "native"),
    ApiRoute(
        "POST",
        "/v1/adapters/{adapter}/generate",
        "generate",
        "native",
        stream="native",
        gateway_model=True,
    ),
    ApiRoute("POST", "/v1/chat/completions", "chat_completions", "openai", stream="chat"),
    ApiRoute("POST", "/v1/completions", "completions", "openai", stream="completion"),
    ApiRoute("GET", "/v1/models", "models", "openai"),
)


def _pattern(path: str) -> re.Pattern[str]:
    return re.compile("^" + re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>[^/]+)", re.escape(path)) + "$")


def route_of(method: str, path: str) -> tuple[ApiRoute, dict[str, str]] | None:
    """The route ``method path`` asks for, with its path parameters; None when there is none
    (API Gateway answers such a request 403 "Missing Authentication Token")."""
    for route in ROUTES:
        if (params := route.match(method, path)) is not None:
            return route, params
    return None


def door_routes(door: str) -> tuple[ApiRoute, ...]:
    return tuple(r for r in ROUTES if r.door == door)
