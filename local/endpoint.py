"""A local SageMaker endpoint: the InvokeEndpoint wire protocol in front of the runtime server.

moto has no inference-component APIs, so this plays both of SageMaker's parts for one endpoint:

* the data plane, byte-compatible with boto3's ``sagemaker-runtime`` client pointed at it with
  ``endpoint_url``: ``POST /endpoints/{name}/invocations`` and
  ``POST /endpoints/{name}/invocations-response-stream`` (AWS event-stream framing), the
  ``X-Amzn-SageMaker-Inference-Component`` header naming the component, errors as SageMaker
  returns them (``ValidationError`` 400, ``ModelError`` 424 carrying the container's status and
  message, ``ModelNotReadyException`` when the container is down);
* the part of the control plane adapter components need: it extracts each adapter component's
  ``.tar.gz`` (files at the archive root) and calls the container's ``POST /adapters`` with the
  directory, ``DELETE /adapters/{name}`` when the component goes, and forwards invocations with
  ``X-Amzn-SageMaker-Adapter-Identifier`` set to the component's name. Like SageMaker, a
  component whose registration the container refused is still created; its status says why.

Components are declared with ``PUT /_local/components`` (the whole desired set, as the catalog
gives it), so adding an entry and declaring again registers it without touching the base.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from local import eventstream
from runtime.artifacts import ArtifactError, extract
from training.package import sha256_file

COMPONENT_HEADER = "x-amzn-sagemaker-inference-component"
ADAPTER_HEADER = "X-Amzn-SageMaker-Adapter-Identifier"
#: Headers of an InvokeEndpoint request that SageMaker passes to the container.
_PASSED = ("content-type", "accept", "x-amzn-sagemaker-custom-attributes")


class AdapterComponent(BaseModel):
    model_config = ConfigDict(extra="forbid")
    component: str = Field(pattern=r"^[a-zA-Z0-9](-*[a-zA-Z0-9])*$", max_length=63)
    artifact: str = Field(description="path of the adapter .tar.gz (ArtifactUrl)")


class ModelComponent(BaseModel):
    """A base component of its own (a ``serving: merged`` entry's): its model's server."""

    model_config = ConfigDict(extra="forbid")
    component: str = Field(pattern=r"^[a-zA-Z0-9](-*[a-zA-Z0-9])*$", max_length=63)
    url: str = Field(pattern=r"^http://")


class Components(BaseModel):
    model_config = ConfigDict(extra="forbid")
    adapters: list[AdapterComponent]
    #: Components being made (their adapter still trains): SageMaker's "Creating" state.
    pending: list[str] = Field(default_factory=list)
    models: list[ModelComponent] = Field(default_factory=list)


@dataclass
class Component:
    name: str
    artifact: str
    sha256: str
    directory: str
    status: str  # InService | Failed
    registration: str  # what the container said


def sagemaker_error(status: int, code: str, message: str, **members: Any) -> JSONResponse:
    """An error the way the sagemaker-runtime REST-JSON protocol carries it."""
    return JSONResponse(
        {"Message": message, **members}, status_code=status, headers={"x-amzn-ErrorType": code}
    )


class LocalEndpoint:
    def __init__(self, *, name: str, base_component: str, runtime_url: str, work_dir: Path) -> None:
        self.name = name
        self.base_component = base_component
        self.runtime_url = runtime_url.rstrip("/")
        self.work_dir = work_dir
        self.components: dict[str, Component] = {}
        self.pending: set[str] = set()
        #: Base components of their own (merged entries), each served by its own process.
        self.models: dict[str, httpx.AsyncClient] = {}
        self.lock = asyncio.Lock()
        self.client = httpx.AsyncClient(base_url=self.runtime_url, timeout=httpx.Timeout(120.0))

    # -- control plane ---------------------------------------------------------------------

    async def declare(
        self,
        wanted: list[AdapterComponent],
        pending: list[str] | None = None,
        models: list[ModelComponent] | None = None,
    ) -> list[dict[str, Any]]:
        """Create, update and delete adapter components until they are exactly ``wanted``;
        ``pending`` ones exist but are not in service yet; ``models`` are base components of
        their own, served by the process at their URL."""
        async with self.lock:
            served = {m.component: m.url for m in models or ()}
            for name in set(self.models) - set(served):
                await self.models.pop(name).aclose()
            for name, url in served.items():
                if name not in self.models or str(self.models[name].base_url) != url:
                    self.models[name] = httpx.AsyncClient(
                        base_url=url, timeout=httpx.Timeout(120.0)
                    )
            self.pending = set(pending or ()) - {w.component for w in wanted} - set(served)
            actions = []
            names = {w.component for w in wanted}
            for gone in sorted(set(self.components) - names):
                actions.append(await self._delete(gone))
            for w in wanted:
                path = Path(w.artifact)
                if not path.is_file():
                    actions.append(
                        {
                            "component": w.component,
                            "action": "failed",
                            "detail": f"artifact {w.artifact} not found",
                        }
                    )
                    continue
                digest = await asyncio.to_thread(sha256_file, path)
                have = self.components.get(w.component)
                if have is not None and have.sha256 == digest and have.registration == "ok":
                    actions.append({"component": w.component, "action": "unchanged"})
                    continue
                kind = "updated" if have is not None else "created"
                actions.append(await self._create(w.component, path, digest, kind))
            return actions

    async def _create(self, name: str, artifact: Path, digest: str, kind: str) -> dict[str, Any]:
        directory = self.work_dir / f"{name}-{digest[:12]}"
        t0 = time.perf_counter()
        try:
            if not directory.is_dir():
                await asyncio.to_thread(extract, artifact, directory)
        except ArtifactError as exc:
            self.components[name] = Component(name, str(artifact), digest, "", "Failed", str(exc))
            return {"component": name, "action": "failed", "detail": f"artifact: {exc}"}
        resp = await self.client.post("/adapters", json={"name": name, "src": str(directory)})
        ms = round((time.perf_counter() - t0) * 1000, 1)
        previous = self.components.get(name)
        ok = resp.status_code == 200
        detail = resp.json().get("message" if ok else "error", resp.text) if resp.content else ""
        if ok:
            if previous is not None and previous.directory not in ("", str(directory)):
                shutil.rmtree(previous.directory, ignore_errors=True)
            served = str(directory)
        else:
            # The container keeps serving what it had (a bad update never replaces a good
            # adapter), so the previous directory stays.
            shutil.rmtree(directory, ignore_errors=True)
            served = previous.directory if previous is not None else ""
        # SageMaker reports an adapter component InService even when the container refused it;
        # the registration field keeps what the container said so smoke checks can show it.
        self.components[name] = Component(
            name, str(artifact), digest, served, "InService", "ok" if ok else detail
        )
        return {
            "component": name,
            "action": kind if ok else "registration-failed",
            "status": resp.status_code,
            "detail": detail,
            "ms": ms,
        }

    async def _delete(self, name: str) -> dict[str, Any]:
        comp = self.components.pop(name)
        resp = await self.client.delete(f"/adapters/{name}")
        if comp.directory:
            shutil.rmtree(comp.directory, ignore_errors=True)
        return {"component": name, "action": "deleted", "status": resp.status_code}

    # -- data plane --------------------------------------------------------------------------

    def _route(self, endpoint: str, request: Request) -> tuple[dict[str, str], Response | None]:
        """Container headers for this invocation, or the error SageMaker would answer (the
        container: ``_container``)."""
        if endpoint != self.name:
            return {}, sagemaker_error(
                400, "ValidationError", f"Endpoint {endpoint} of account local not found."
            )
        component = request.headers.get(COMPONENT_HEADER)
        if not component:
            return {}, sagemaker_error(
                400,
                "ValidationError",
                "Inference Component Name header is required for endpoints to which you plan "
                "to deploy inference components.",
            )
        headers = {k: v for k, v in request.headers.items() if k.lower() in _PASSED}
        if component == self.base_component or component in self.models:
            return headers, None
        if component in self.pending:
            return {}, sagemaker_error(
                429,
                "ModelNotReadyException",
                f"Inference Component {component} is not in service yet (its adapter is being "
                "trained).",
            )
        if component not in self.components:
            return {}, sagemaker_error(
                400,
                "ValidationError",
                f"Inference Component {component} not found on endpoint {endpoint}.",
            )
        return {**headers, ADAPTER_HEADER: component}, None

    def _container(self, request: Request) -> httpx.AsyncClient:
        """The server of the component invoked: its own model's, or the base's."""
        return self.models.get(request.headers.get(COMPONENT_HEADER, ""), self.client)

    async def invoke(self, endpoint: str, request: Request) -> Response:
        headers, error = self._route(endpoint, request)
        if error is not None:
            return error
        body = await request.body()
        try:
            resp = await self._container(request).post(
                "/invocations", content=body, headers=headers
            )
        except httpx.TransportError as exc:
            return sagemaker_error(
                429, "ModelNotReadyException", f"the model container is not reachable: {exc}"
            )
        if resp.status_code >= 400:
            return _model_error(resp.status_code, resp.text)
        return Response(
            resp.content,
            media_type=resp.headers.get("content-type", "application/json"),
            headers={"x-Amzn-Invoked-Production-Variant": "AllTraffic"},
        )

    async def invoke_stream(self, endpoint: str, request: Request) -> Response:
        headers, error = self._route(endpoint, request)
        if error is not None:
            return error
        body = await request.body()
        try:
            data = json.loads(body)
        except ValueError:
            data = None
        if isinstance(data, dict):
            data["stream"] = True  # the container streams only when asked in the body
            body = json.dumps(data).encode()
        client = self._container(request)
        req = client.build_request("POST", "/invocations", content=body, headers=headers)
        try:
            resp = await client.send(req, stream=True)
        except httpx.TransportError as exc:
            return sagemaker_error(
                429, "ModelNotReadyException", f"the model container is not reachable: {exc}"
            )
        if resp.status_code >= 400:
            text = (await resp.aread()).decode(errors="replace")
            await resp.aclose()
            return _model_error(resp.status_code, text)

        async def events():
            try:
                async for chunk in resp.aiter_bytes():
                    if chunk:
                        yield eventstream.payload_part(chunk)
            except httpx.HTTPError as exc:
                yield eventstream.model_stream_error("ModelStreamError", str(exc))
            finally:
                await resp.aclose()

        return StreamingResponse(
            events(),
            media_type="application/vnd.amazon.eventstream",
            headers={
                "x-Amzn-Invoked-Production-Variant": "AllTraffic",
                "X-Amzn-SageMaker-Content-Type": resp.headers.get("content-type", ""),
            },
        )

    def describe(self) -> dict[str, Any]:
        return {
            "endpoint": self.name,
            "base_component": self.base_component,
            "runtime": self.runtime_url,
            "components": [
                asdict(c) for c in sorted(self.components.values(), key=lambda c: c.name)
            ],
            "pending": sorted(self.pending),
            "models": {name: str(c.base_url) for name, c in sorted(self.models.items())},
        }


def _model_error(status: int, text: str) -> JSONResponse:
    return sagemaker_error(
        424,
        "ModelError",
        f'Received client error ({status}) from primary with message "{text}".',
        OriginalStatusCode=status,
        OriginalMessage=text,
        LogStreamArn="arn:aws:logs:local:000000000000:log-group:/aws/sagemaker/Endpoints/local",
    )


def create_app(endpoint: LocalEndpoint) -> FastAPI:
    app = FastAPI(title="local SageMaker endpoint", docs_url=None, redoc_url=None)

    @app.post("/endpoints/{name}/invocations")
    async def invocations(name: str, request: Request) -> Response:
        return await endpoint.invoke(name, request)

    @app.post("/endpoints/{name}/invocations-response-stream")
    async def invocations_stream(name: str, request: Request) -> Response:
        return await endpoint.invoke_stream(name, request)

    @app.put("/_local/components")
    async def declare(components: Components) -> Response:
        return JSONResponse(
            {
                "actions": await endpoint.declare(
                    components.adapters, components.pending, components.models
                )
            }
        )

    @app.get("/_local/components")
    async def components() -> Response:
        return JSONResponse(endpoint.describe())

    @app.get("/ping")
    async def ping() -> Response:
        try:
            resp = await endpoint.client.get("/ping")
        except httpx.TransportError:
            return JSONResponse({"status": "container unreachable"}, status_code=503)
        return JSONResponse(
            {"status": "InService" if resp.status_code == 200 else "Creating"},
            status_code=resp.status_code,
        )

    @app.on_event("shutdown")
    async def _close() -> None:
        await endpoint.client.aclose()

    return app
