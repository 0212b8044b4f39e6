"""The SageMaker container contract over HTTP (port 8080).

Routes: GET /ping, POST /invocations, POST /adapters, DELETE /adapters/{name}, GET /adapters,
GET /metrics, and GET /trace (the live trace the playground polls). The adapter header and the
register-request model (``name``, ``src``, ``preload``, ``pin``; JSON body or query string) come
from AWS's model-hosting-container-standards package, which encodes SageMaker's adapter
contract. Its decorator registry is process-global and built for wrapping another engine's
server, so the routes themselves are plain FastAPI here.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from model_hosting_container_standards.sagemaker.lora.constants import (
    ResponseMessage,
    SageMakerLoRAApiHeader,
)
from model_hosting_container_standards.sagemaker.lora.models.request import (
    SageMakerRegisterLoRAAdapterRequest,
)
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from runtime.adapters import AdapterError
from runtime.artifacts import ArtifactError, extract
from runtime.cache import CapacityError
from runtime.engine import Engine
from runtime.request import EngineError, GenParams, GenRequest
from runtime.sampler import MIN_TEMPERATURE, REPETITION_PENALTY

ADAPTER_HEADER = SageMakerLoRAApiHeader.ADAPTER_IDENTIFIER


class Message(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: Literal["system", "user", "assistant"]
    content: str = Field(max_length=1_000_000)


class Parameters(BaseModel):
    model_config = ConfigDict(extra="forbid")
    max_new_tokens: int | None = Field(default=None, ge=1)
    min_new_tokens: int = Field(default=0, ge=0)
    temperature: float = Field(default=1.0, ge=0.0, le=2.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    top_k: int = Field(default=0, ge=0)
    repetition_penalty: float = Field(
        default=1.0, ge=REPETITION_PENALTY[0], le=REPETITION_PENALTY[1]
    )

    @field_validator("temperature")
    @classmethod
    def _temperature(cls, v: float) -> float:
        if 0 < v < MIN_TEMPERATURE:
            raise ValueError(f"must be 0 (greedy) or at least {MIN_TEMPERATURE:g}")
        return v

    stop: list[str] = Field(default_factory=list, max_length=16)
    seed: int | None = Field(default=None, ge=0, lt=2**63)
    do_sample: bool = False


class Invocation(BaseModel):
    model_config = ConfigDict(extra="forbid")
    inputs: str | None = Field(default=None, max_length=5_000_000)
    messages: list[Message] | None = Field(default=None, min_length=1, max_length=256)
    parameters: Parameters = Field(default_factory=Parameters)
    stream: bool = False

    @model_validator(mode="after")
    def _one_prompt(self) -> Invocation:
        if (self.inputs is None) == (self.messages is None):
            raise ValueError("give exactly one of 'inputs' or 'messages'")
        return self


def _error(status: int, message: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"error": message, "status": status, **extra}, status_code=status)


def create_app(engine: Engine, *, start_engine: bool = True) -> FastAPI:
    app = FastAPI(title="lora-fleet runtime", docs_url=None, redoc_url=None)
    s = engine.settings
    tel = engine.telemetry

    @app.on_event("startup")
    async def _startup() -> None:
        if start_engine and not engine.ready.is_set():
            await asyncio.to_thread(engine.start)

    @app.on_event("shutdown")
    async def _shutdown() -> None:
        engine.stop()

    @app.get("/ping")
    async def ping() -> Response:
        if not engine.ready.is_set():
            return _error(503, "base model loading")
        if not engine.alive:
            return _error(503, "the engine thread has stopped; replace this copy")
        return JSONResponse({"status": "healthy", "base": engine.base_info["model_id"]})

    @app.post("/invocations")
    async def invocations(request: Request) -> Response:
        if not engine.ready.is_set():
            return _error(503, "base model loading")
        adapter = request.headers.get(ADAPTER_HEADER) or None
        raw = await _read_limited(request, s.max_body_bytes)
        if raw is None:
            return _error(413, f"body over the limit of {s.max_body_bytes} bytes")
        try:
            body = Invocation.model_validate_json(raw)
        except ValidationError as exc:
            errors = [
                {"field": ".".join(map(str, e["loc"])) or "body", "message": e["msg"]}
                for e in exc.errors(include_url=False, include_input=False)
            ]
            return _error(400, "malformed request body", details=errors)
        p = body.parameters
        max_new = p.max_new_tokens or min(s.default_max_new_tokens, s.max_new_tokens)
        if max_new > s.max_new_tokens:
            return _error(413, f"max_new_tokens {max_new} is over the limit of {s.max_new_tokens}")
        params = GenParams(
            max_new_tokens=max_new, min_new_tokens=min(p.min_new_tokens, max_new),
            temperature=p.temperature, top_p=p.top_p, top_k=p.top_k,
            repetition_penalty=p.repetition_penalty, stop=tuple(x for x in p.stop if x),
            seed=p.seed, do_sample=p.do_sample,
        )  # fmt: skip
        # Characters are bounded before tokenizing (no tokenizer turns more than
        # CHARS_PER_TOKEN characters into fewer than one token), and tokenizing runs off the
        # event loop, so a huge prompt can neither stall /ping nor reach the tokenizer.
        chars = len(body.inputs or "") + sum(len(m.content) for m in body.messages or [])
        if chars > s.max_input_tokens * CHARS_PER_TOKEN:
            return _error(413, f"prompt is {chars} characters, over the "
                               f"{s.max_input_tokens * CHARS_PER_TOKEN} that "
                               f"{s.max_input_tokens} input tokens allow")  # fmt: skip
        record = engine.cache.get(adapter) if adapter is not None else None
        try:
            ids = await asyncio.to_thread(
                engine.encode,
                body.inputs, [m.model_dump() for m in body.messages] if body.messages else None,
                record.prompt if record is not None else None,
            )  # fmt: skip
        except EngineError as exc:
            return _error(exc.status, exc.message)
        except Exception as exc:  # a template or tokenizer failure is the request's fault
            return _error(400, f"cannot tokenize the prompt: {exc}")
        # Metric labels name registered adapters only: an unknown name must not grow /metrics.
        if adapter is None:
            label = "__base__"
        else:
            label = adapter if record is not None else "__unregistered__"
        loop = asyncio.get_running_loop()
        chunks: asyncio.Queue[str | None] = asyncio.Queue()
        on_token = (
            (lambda t: loop.call_soon_threadsafe(chunks.put_nowait, t)) if body.stream else None
        )
        req = GenRequest(adapter=adapter, input_ids=ids, params=params, on_token=on_token)
        try:
            engine.submit(req)
        except EngineError as exc:
            tel.requests.labels(label, str(exc.status)).inc()
            return _error(exc.status, exc.message)
        if body.stream:
            return StreamingResponse(
                _stream(engine, req, chunks, label), media_type="application/jsonlines"
            )
        # A client that goes away cancels its row at the next decode step.
        watcher = asyncio.create_task(_cancel_on_disconnect(request, req))
        try:
            done = await _finished(req, s.request_timeout_s + 30)
        finally:
            watcher.cancel()
        return _respond(engine, req, label, done)

    @app.post("/adapters")
    async def register(request: Request) -> Response:
        if not engine.ready.is_set():
            return _error(503, "base model loading")
        raw = await _read_limited(request, REGISTER_BODY_BYTES)
        if raw is None:
            return _error(413, f"register request over {REGISTER_BODY_BYTES} bytes")
        data: Any
        if raw.strip():
            try:
                data = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError):
                return _error(400, "body is not valid JSON (or send name and src as query string)")
            if not isinstance(data, dict):
                return _error(400, "body must be a JSON object")
            data = {**dict(request.query_params), **data}
        else:
            data = dict(request.query_params)
        try:
            req = SageMakerRegisterLoRAAdapterRequest.model_validate(data)
        except ValidationError as exc:
            fields = sorted({str(e["loc"][0]) for e in exc.errors() if e["loc"]})
            return _error(400, f"invalid register request: check {', '.join(fields)}")
        if not ADAPTER_NAME_RE.match(req.name):
            return _error(
                400,
                f"adapter name {req.name[:80]!r} must be 1 to 63 letters, digits and inner "
                "hyphens (SageMaker's inference-component name rule)",
            )
        try:
            loaded = await asyncio.wait_for(
                asyncio.get_running_loop().run_in_executor(
                    REGISTRATIONS, _load, engine, req.name, req.src
                ),
                REGISTER_BUDGET_S,
            )
            owned = _owned_dir(engine, loaded.src)
            try:
                record, replaced = engine.cache.register(loaded, pin=req.pin, owned_dir=owned)
            except CapacityError:
                if owned is not None:
                    shutil.rmtree(owned, ignore_errors=True)
                raise
        except TimeoutError:
            tel.event("adapter_rejected", adapter=req.name, reason="registration budget")
            return _error(424, f"adapter {req.name!r} rejected: checking it took over "
                               f"{REGISTER_BUDGET_S:g} s")  # fmt: skip
        except (AdapterError, ArtifactError) as exc:
            tel.event("adapter_rejected", adapter=req.name, reason=str(exc))
            return _error(424, f"adapter {req.name!r} rejected: {exc}")
        except FileNotFoundError as exc:
            return _error(404, f"adapter {req.name!r}: source not found: {exc}")
        except CapacityError as exc:
            return _error(409, str(exc))
        tel.event("adapter_register", adapter=req.name, pinned=req.pin, replaced=replaced,
                  version=record.version)  # fmt: skip
        if req.preload or req.pin:
            # When no slot can be freed it stays in host memory and is promoted on first use.
            with contextlib.suppress(CapacityError, EngineError):
                await asyncio.get_running_loop().run_in_executor(
                    REGISTRATIONS, _preload, engine, req.name
                )
        msg = ResponseMessage.ADAPTER_UPDATED if replaced else ResponseMessage.ADAPTER_REGISTERED
        return JSONResponse({"message": msg.format(alias=req.name), **record.describe()})

    @app.delete("/adapters/{name}")
    async def unregister(name: str) -> Response:
        try:
            engine.cache.unregister(name)
        except KeyError:
            return _error(404, ResponseMessage.ADAPTER_NOT_FOUND.format(alias=name))
        return JSONResponse({"message": ResponseMessage.ADAPTER_UNREGISTERED.format(alias=name)})

    @app.get("/adapters")
    async def list_adapters() -> Response:
        if not engine.ready.is_set():
            return _error(503, "base model loading")
        return JSONResponse(
            {
                "adapters": engine.cache.list(),
                "tiers": engine.cache.tier_counts(),
                "max_loras": s.max_loras,
                "max_cpu_loras": s.max_cpu_loras,
                "base": engine.base_info,
                "memory": engine.memory(),
            }
        )

    @app.get("/metrics")
    async def metrics() -> Response:
        if engine.ready.is_set():
            engine.memory()  # refreshes the device-memory gauges
        return PlainTextResponse(tel.render(), media_type="text/plain; version=0.0.4")

    @app.get("/trace")
    async def trace(since: int = 0, limit: int = 200) -> Response:
        return JSONResponse({"events": tel.trace(since, max(1, min(limit, 1000)))})

    return app


#: SageMaker's rule for inference-component names (CreateInferenceComponent), which is what it
#: passes as the adapter identifier: never a path separator, control character or dot segment.
ADAPTER_NAME_RE = re.compile(r"^(?=.{1,63}$)[a-zA-Z0-9](-*[a-zA-Z0-9])*$")
REGISTER_BODY_BYTES = 64 * 1024
#: Characters one token can hold at most, for the bound checked before tokenizing.
CHARS_PER_TOKEN = 32
#: What checking and loading one adapter may take before its registration is refused.
REGISTER_BUDGET_S = 120.0
#: Registrations run here, never in the default pool that tokenizing shares.
REGISTRATIONS = ThreadPoolExecutor(max_workers=2, thread_name_prefix="register")


async def _read_limited(request: Request, limit: int) -> bytes | None:
    """The body, or None once it is over ``limit``: refused by Content-Length before reading,
    and reading stops at the limit, so an oversized body never sits in memory."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        return None
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def _owned_dir(engine: Engine, src: str) -> Path | None:
    """The directory ``_load`` extracted an archive into (under the work dir), if it did."""
    path = Path(src).resolve()
    work = engine.settings.work_dir.resolve()
    if path.name == "adapter" and path.parent.parent == work:
        return path.parent
    return None


def _load(engine: Engine, name: str, src: str):
    path = Path(src)
    if not path.exists():
        raise FileNotFoundError(src)
    if path.is_file():
        if not path.name.endswith((".tar.gz", ".tgz", ".tar")):
            raise AdapterError(f"src {src!r} is a file but not a .tar.gz archive")
        work = engine.settings.work_dir
        work.mkdir(parents=True, exist_ok=True)
        # The directory's name never comes from the adapter's name (no path from a name).
        dest = Path(tempfile.mkdtemp(prefix="adapter-", dir=work)) / "adapter"
        try:
            extract(path, dest, max_total_bytes=engine.settings.max_artifact_bytes,
                    max_ratio=engine.settings.max_expansion_ratio)  # fmt: skip
            return engine.cache.validate(name, dest)
        except Exception:
            shutil.rmtree(dest.parent, ignore_errors=True)
            raise
    return engine.cache.validate(name, path)


def _preload(engine: Engine, name: str) -> None:
    """Make a newly registered adapter device-resident.

    Only the engine thread installs weights into the model, between forward passes; a one-token
    greedy request for the adapter is the way to get it to do that in order with other work.
    """
    rec = engine.cache.get(name)
    if rec is None:
        return
    ids = [engine.tokenizer.pad_token_id or 0]
    req = GenRequest(adapter=name, input_ids=ids, params=GenParams(max_new_tokens=1))
    engine.submit(req)
    req.done.wait(engine.settings.request_timeout_s)


def _respond(engine: Engine, req: GenRequest, label: str, done: bool) -> Response:
    tel = engine.telemetry
    if not done:
        tel.requests.labels(label, "504").inc()
        return _error(504, "request timed out")
    if req.error is not None:
        tel.requests.labels(label, str(req.error.status)).inc()
        return _error(req.error.status, req.error.message)
    _account(engine, req, label)
    return JSONResponse(req.result())


def _account(engine: Engine, req: GenRequest, label: str) -> None:
    tel = engine.telemetry
    tel.requests.labels(label, "200").inc()
    tel.latency.labels(label).observe(time.perf_counter() - req.arrival)
    tel.tokens.labels(label, "input").inc(len(req.input_ids))
    tel.tokens.labels(label, "output").inc(len(req.output_ids))


async def _finished(req: GenRequest, timeout: float) -> bool:
    """Wait for the request without holding a thread: the engine's ``done.set()`` resolves a
    future on this loop."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        loop.call_soon_threadsafe(lambda: fut.done() or fut.set_result(None))

    req.done.add_callback(wake)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(fut, timeout)
    return req.done.is_set()


async def _cancel_on_disconnect(request: Request, req: GenRequest) -> None:
    """Cancel ``req`` once the client disconnects. The body has been read, so the next ASGI
    message is the disconnect (uvicorn sends nothing else to a request whose body is done)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            req.cancel()
            return


async def _stream(engine: Engine, req: GenRequest, chunks: asyncio.Queue, label: str):
    """The response body of a streamed request. When the client disconnects, Starlette stops
    iterating and closes this generator: ``finally`` then cancels the row."""
    try:
        async for line in _stream_lines(engine, req, chunks, label):
            yield line
    finally:
        if not req.done.is_set():
            req.cancel()


async def _stream_lines(engine: Engine, req: GenRequest, chunks: asyncio.Queue, label: str):
    loop = asyncio.get_running_loop()
    # Queued after every token callback (call_soon_threadsafe is FIFO): ends the stream.
    req.done.add_callback(lambda: loop.call_soon_threadsafe(chunks.put_nowait, None))
    deadline = loop.time() + engine.settings.request_timeout_s + 30
    while True:
        try:
            text = await asyncio.wait_for(chunks.get(), max(0.0, deadline - loop.time()))
        except TimeoutError:
            break
        if text is None:
            break
        yield json.dumps({"token": text}) + "\n"
    if not req.done.is_set():
        yield json.dumps({"error": "request timed out", "status": 504}) + "\n"
        return
    if req.error is not None:
        engine.telemetry.requests.labels(label, str(req.error.status)).inc()
        yield json.dumps({"error": req.error.message, "status": req.error.status}) + "\n"
        return
    _account(engine, req, label)
    yield json.dumps({"done": True, **req.result()}) + "\n"
