"""The SageMaker container contract over HTTP (port 8080).

Routes: GET /ping, POST /invocations, POST /adapters, DELETE /adapters/{name}, GET /adapters,
GET /metrics, and GET /trace (the live trace the playground polls). The adapter header and the
register-request model (``name``, ``src``, ``preload``, ``pin``; JSON body or query string) come
from AWS's model-hosting-container-standards package, which encodes SageMaker's adapter
contract. Its decorator registry is process-global and built for wrapping another engine's
server, so the routes themselves are plain FastAPI here, over vLLM's async engine
(``runtime.engine``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import re
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from model_hosting_container_standards.sagemaker.lora.constants import (
    ResponseMessage,
    SageMakerLoRAApiHeader,
)
from model_hosting_container_standards.sagemaker.lora.models.request import (
    SageMakerRegisterLoRAAdapterRequest,
)
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from starlette.exceptions import HTTPException as StarletteHTTPException

from contracts import fairness
from contracts.requests import RepetitionPenalty, Temperature
from runtime.adapters import AdapterError
from runtime.artifacts import ArtifactError, extract
from runtime.engine import Engine
from runtime.registry import CapacityError
from runtime.request import EngineError, GenParams, GenRequest
from runtime.schemas import SchemaError, check_schema

ADAPTER_HEADER = SageMakerLoRAApiHeader.ADAPTER_IDENTIFIER
#: The name SageMaker's messages about an adapter use, when it sends one (the package's
#: register and unregister answers say ``Adapter {alias} ...``).
ADAPTER_ALIAS = SageMakerLoRAApiHeader.ADAPTER_ALIAS
log = logging.getLogger("runtime.server")


class Message(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: Literal["system", "user", "assistant"]
    content: str = Field(max_length=1_000_000)


class Parameters(BaseModel):
    model_config = ConfigDict(extra="forbid")
    max_new_tokens: int | None = Field(default=None, ge=1)
    min_new_tokens: int = Field(default=0, ge=0)
    temperature: Temperature = 1.0
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    top_k: int = Field(default=0, ge=0)
    repetition_penalty: RepetitionPenalty = 1.0

    #: vLLM holds back the longest stop string's length of text while streaming.
    stop: list[Annotated[str, Field(max_length=256)]] = Field(default_factory=list, max_length=16)
    seed: int | None = Field(default=None, ge=0, lt=2**63)
    do_sample: bool = False
    #: Constrain the output to this JSON Schema (vLLM's structured outputs); bounded in size.
    json_schema: dict[str, Any] | None = None
    #: Also answer with the generated token ids (``token_ids``).
    details: bool = False


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


def _unavailable(engine: Engine) -> JSONResponse | None:
    """Why the server cannot serve yet or any more (a 503), or None."""
    if not engine.ready.is_set():
        return _error(503, "base model loading")
    if not engine.alive:
        return _error(503, "the engine has stopped; replace this copy")
    return None


def _error(status: int, message: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"error": message, "status": status, **extra}, status_code=status)


def create_app(engine: Engine, *, start_engine: bool = True) -> FastAPI:

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI):
        # The server listens once the engine is up: SageMaker's health check and the local
        # platform poll /ping until then, and a failed start (no CUDA on a GPU instance, a
        # tokenizer that is not the pinned one) ends the process with the reason.
        if start_engine and not engine.ready.is_set():
            await engine.start()
        try:
            yield
        finally:
            await engine.stop()

    app = FastAPI(title="lora-fleet runtime", docs_url=None, redoc_url=None, lifespan=lifespan)

    _health_routes(app, engine)
    _invocation_routes(app, engine)
    _adapter_routes(app, engine)
    _status_routes(app, engine)
    return app


def _health_routes(app: FastAPI, engine: Engine) -> None:
    """/ping, and a WARNING for any route or method the contract does not have."""

    @app.exception_handler(StarletteHTTPException)
    async def unmatched(request: Request, exc: StarletteHTTPException) -> Response:
        """A route or method the contract does not have: logged, so a SageMaker call this
        server does not speak (another adapter route, another method) is seen in the
        component's log instead of failing in silence."""
        if exc.status_code in (404, 405):
            log.warning(
                "unmatched request: %s %s (%d)", request.method, request.url.path, exc.status_code
            )
        return _error(exc.status_code, str(exc.detail))

    @app.get("/ping")
    async def ping() -> Response:
        if (unavailable := _unavailable(engine)) is not None:
            return unavailable
        return JSONResponse({"status": "healthy", "base": engine.base_info["model_id"]})


def _invocation_routes(app: FastAPI, engine: Engine) -> None:
    """POST /invocations: a generation, buffered or streamed."""
    s = engine.settings
    tel = engine.telemetry

    @app.post("/invocations")
    async def invocations(request: Request) -> Response:
        if (unavailable := _unavailable(engine)) is not None:
            return unavailable
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
        schema = None
        if p.json_schema is not None:
            try:
                # Off the event loop: a large schema's metaschema check would stall /ping.
                schema = await asyncio.to_thread(
                    check_schema, p.json_schema, max_bytes=s.max_schema_bytes
                )
            except SchemaError as exc:
                return _error(400, f"parameters.json_schema {exc}")
        # Characters are bounded before tokenizing (no tokenizer turns more than
        # CHARS_PER_TOKEN characters into fewer than one token), and tokenizing runs off the
        # event loop, so a huge prompt can neither stall /ping nor reach the tokenizer.
        chars = len(body.inputs or "") + sum(len(m.content) for m in body.messages or [])
        if chars > s.max_input_tokens * CHARS_PER_TOKEN:
            return _error(
                413,
                f"prompt is {chars} characters, over the {s.max_input_tokens * CHARS_PER_TOKEN} "
                f"that {s.max_input_tokens} input tokens allow",
            )
        messages = [m.model_dump() for m in body.messages] if body.messages else None
        # The record's prompt shapes the tokens and its schema the decoding: if the adapter is
        # registered again while the prompt is tokenized (off the event loop), the tokens are
        # made again for the record that will serve them. Between the last check and admit()
        # nothing awaits, so the record cannot change there.
        # A merged model is its adapter: a base request gets the adapter's prompt and schema.
        merged = engine.merged if adapter is None else None
        for _ in range(RECORD_ATTEMPTS):
            record = engine.registry.get(adapter) if adapter is not None else None
            shape = record.prompt if record is not None else merged.prompt if merged else None
            try:
                ids = await asyncio.to_thread(engine.encode, body.inputs, messages, shape)
            except EngineError as exc:
                return _error(exc.status, exc.message)
            except Exception as exc:  # a template or tokenizer failure is the request's fault
                return _error(400, f"cannot tokenize the prompt: {exc}")
            if adapter is None or engine.registry.get(adapter) is record:
                break
        else:
            return _error(
                503,
                f"adapter {adapter!r} was registered again while the request was prepared; retry",
            )
        if schema is None and record is not None:
            schema = record.json_schema
        elif schema is None and merged is not None:
            schema = merged.json_schema
        params = GenParams(
            max_new_tokens=max_new,
            min_new_tokens=min(p.min_new_tokens, max_new),
            temperature=p.temperature,
            top_p=p.top_p,
            top_k=p.top_k,
            repetition_penalty=p.repetition_penalty,
            stop=tuple(x for x in p.stop if x),
            seed=p.seed,
            do_sample=p.do_sample,
            json_schema=schema,
            details=p.details,
        )
        # Metric labels name registered adapters only: an unknown name must not grow /metrics.
        if adapter is None:
            label = "__base__"
        else:
            label = adapter if record is not None else "__unregistered__"
        req = GenRequest(
            adapter=adapter,
            input_ids=ids,
            params=params,
            artifact=merged.identity if merged is not None else None,
            stream=body.stream,
            fair_key=fairness.key_of(request.headers.get(fairness.HEADER)),
        )
        try:
            engine.admit(req)
        except EngineError as exc:
            tel.requests.labels(label, str(exc.status)).inc()
            return _error(exc.status, exc.message)
        if body.stream:
            return _Generation(
                _stream(engine, req, label), engine, req, media_type="application/jsonlines"
            )
        # A client that goes away cancels the generation, which aborts it in vLLM.
        task = asyncio.create_task(_collect(engine, req))
        watcher = asyncio.create_task(_cancel_on_disconnect(request, task))
        try:
            await task
        except asyncio.CancelledError:
            return _error(499, "client disconnected")
        except EngineError as exc:
            tel.requests.labels(label, str(exc.status)).inc()
            return _error(exc.status, exc.message)
        finally:
            watcher.cancel()
        _account(engine, req, label)
        return JSONResponse(req.result())


def _path_like(name: str) -> str | None:
    """Why an adapter name is a path, or None."""
    if "/" in name or "\\" in name:
        return "holds a path separator, which no inference component name can"
    if name in (".", ".."):
        return "is a path reference, which no inference component name can be"
    return None


def _adapter_routes(app: FastAPI, engine: Engine) -> None:
    """POST /adapters, DELETE /adapters/{name}: SageMaker's adapter contract."""
    s = engine.settings
    tel = engine.telemetry

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
        # Any non-empty name, as AWS's model-hosting-container-standards takes it: what
        # SageMaker sends as the name is documented nowhere, and refusing one would leave every
        # adapter unloaded while its component reports InService. No path is ever made from
        # it (archives extract into a directory of their own under the work dir). Except a
        # path: a separator or a parent reference is in no inference component's name
        # (``^[a-zA-Z0-9](-*[a-zA-Z0-9])*$``), so it can only be a caller probing paths.
        if (problem := _path_like(req.name)) is not None:
            return _error(400, f"adapter name {req.name[:200]!r} {problem}")
        if not ADAPTER_NAME_RE.match(req.name):
            log.warning(
                "adapter registered under %r, which is not an inference-component name: "
                "requests must name it exactly",
                req.name[:200],
            )
        alias = request.headers.get(ADAPTER_ALIAS) or req.name
        if _inside(Path(req.src), s.work_dir):
            return _error(
                400,
                "src must not be inside the server's work directory (where it extracts "
                "archives it owns and deletes)",
            )
        async with _registering(req.name):
            checking = asyncio.get_running_loop().run_in_executor(
                REGISTRATIONS, _load, engine, req.name, req.src
            )
            try:
                try:
                    # Shielded: a thread cannot be stopped, so past the budget the check runs
                    # on and whatever it extracted is removed when it ends.
                    loaded = await asyncio.wait_for(asyncio.shield(checking), REGISTER_BUDGET_S)
                except TimeoutError:
                    checking.add_done_callback(functools.partial(_discard_late, engine))
                    raise
                owned = _owned_dir(engine, loaded.src)
                try:
                    record, replaced = await engine.register(loaded, pin=req.pin, owned_dir=owned)
                except BaseException:
                    if owned is not None:
                        shutil.rmtree(owned, ignore_errors=True)
                    raise
            except TimeoutError:
                tel.event("adapter_rejected", adapter=req.name, reason="registration budget")
                return _error(
                    424,
                    f"adapter {req.name!r} rejected: checking it took over {REGISTER_BUDGET_S:g} s",
                )
            except (AdapterError, ArtifactError) as exc:
                tel.event("adapter_rejected", adapter=req.name, reason=str(exc))
                return _error(424, f"adapter {req.name!r} rejected: {exc}")
            except EngineError as exc:
                tel.event("adapter_rejected", adapter=req.name, reason=exc.message)
                return _error(exc.status, f"adapter {req.name!r} rejected: {exc.message}")
            except FileNotFoundError as exc:
                return _error(404, f"adapter {req.name!r}: source not found: {exc}")
            except CapacityError as exc:
                return _error(409, str(exc))
        tel.event(
            "adapter_register",
            adapter=req.name,
            pinned=req.pin,
            replaced=replaced,
            version=record.version,
            lora_id=record.lora_id,
        )
        # The package's answer for every successful register, a new version included
        # (transforms/register.py); ``replaced`` says which it was.
        msg = ResponseMessage.ADAPTER_REGISTERED.format(alias=alias)
        return JSONResponse(
            {"message": msg, "replaced": replaced, **record.describe(engine.registry.tier(record))}
        )

    @app.delete("/adapters/{name:path}")
    async def unregister(name: str, request: Request) -> Response:
        if not name:
            # AWS's package routes only DELETE /adapters/{adapter_name}: without a name there
            # is no such route, and the method is not allowed on the collection.
            return JSONResponse(
                {"error": "DELETE needs an adapter name: DELETE /adapters/{name}"},
                status_code=405,
                headers={"Allow": "GET, POST"},
            )
        alias = request.headers.get(ADAPTER_ALIAS) or name
        # Behind the name's registration: a DELETE during an update removes the new version.
        async with _registering(name):
            try:
                await engine.unregister(name)
            except KeyError:
                return _error(404, ResponseMessage.ADAPTER_NOT_FOUND.format(alias=alias))
        return JSONResponse({"message": ResponseMessage.ADAPTER_UNREGISTERED.format(alias=alias)})


def _status_routes(app: FastAPI, engine: Engine) -> None:
    """What the server holds: GET /adapters (tiers, pins, memory), GET /metrics (the
    runtime's and vLLM's) and GET /trace (the live trace)."""
    tel = engine.telemetry

    @app.get("/adapters")
    async def list_adapters() -> Response:
        if not engine.ready.is_set():
            return _error(503, "base model loading")
        with contextlib.suppress(Exception):
            await engine.refresh_tiers()
        return JSONResponse(
            {
                "adapters": engine.registry.list(),
                "tiers": engine.registry.tier_counts(),
                "max_loras": engine.settings.max_loras,
                "max_cpu_loras": engine.settings.max_cpu_loras,
                "base": engine.base_info,
                "memory": engine.memory(),
            }
        )

    @app.get("/metrics")
    async def metrics() -> Response:
        if engine.ready.is_set():
            engine.memory()  # refreshes the device-memory gauges
        # The runtime's registry, then vLLM's own (KV usage, TTFT, TPOT, queue time,
        # preemptions, prefix-cache hits, LoRA), which its stat logger records in
        # prometheus_client's global registry in this process.
        return PlainTextResponse(tel.render_with_engine(), media_type="text/plain; version=0.0.4")

    @app.get("/trace")
    async def trace(since: int = 0, limit: int = 200) -> Response:
        return JSONResponse({"events": tel.trace(since, max(1, min(limit, 1000)))})


#: SageMaker's rule for inference-component names (CreateInferenceComponent), which is what it
#: is expected to pass as the adapter identifier; another name is accepted and logged.
ADAPTER_NAME_RE = re.compile(r"^(?=.{1,63}$)[a-zA-Z0-9](-*[a-zA-Z0-9])*$")
REGISTER_BODY_BYTES = 64 * 1024
#: Characters one token can hold at most, for the bound checked before tokenizing.
CHARS_PER_TOKEN = 32
#: What checking and loading one adapter may take before its registration is refused.
REGISTER_BUDGET_S = 120.0
#: Times a request is tokenized again when its adapter is registered anew meanwhile.
RECORD_ATTEMPTS = 3
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


def _discard_late(engine: Engine, done: asyncio.Future) -> None:
    """A check that finished after its request gave up: its extracted files go."""
    if done.cancelled() or done.exception() is not None:
        return
    owned = _owned_dir(engine, done.result().src)
    if owned is not None:
        shutil.rmtree(owned, ignore_errors=True)


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
            extract(
                path,
                dest,
                max_total_bytes=engine.settings.max_artifact_bytes,
                max_ratio=engine.settings.max_expansion_ratio,
            )
            return engine.check(name, dest)
        except Exception:
            shutil.rmtree(dest.parent, ignore_errors=True)
            raise
    return engine.check(name, path)


def _inside(path: Path, directory: Path) -> bool:
    try:
        return path.resolve().is_relative_to(directory.resolve())
    except (OSError, ValueError):
        return False


class _Generation(StreamingResponse):
    """A streamed generation that releases its admission even when its body never starts
    (Starlette cancels the response at once for a client already gone, and the generator's
    own ``finally`` then never runs)."""

    def __init__(self, content: Any, engine: Engine, req: GenRequest, **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self._engine, self._req = engine, req

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self._engine.release(self._req)


#: Per-name registration locks, with how many registrations hold or wait for each: a lock
#: leaves the table with its last user, so the table holds only names being registered (it
#: grew by one lock per name ever registered).
_REGISTERING: dict[str, tuple[asyncio.Lock, int]] = {}


@contextlib.asynccontextmanager
async def _registering(name: str):
    """One registration per name at a time: two updates of one adapter racing would leave the
    older one registered."""
    lock, users = _REGISTERING.get(name, (asyncio.Lock(), 0))
    _REGISTERING[name] = (lock, users + 1)
    try:
        async with lock:
            yield
    finally:
        lock, users = _REGISTERING[name]
        if users == 1:
            del _REGISTERING[name]
        else:
            _REGISTERING[name] = (lock, users - 1)


async def _collect(engine: Engine, req: GenRequest) -> None:
    async for _ in engine.generate(req):
        pass


def _account(engine: Engine, req: GenRequest, label: str) -> None:
    tel = engine.telemetry
    tel.requests.labels(label, "200").inc()
    tel.latency.labels(label).observe(time.perf_counter() - req.arrival)
    tel.tokens.labels(label, "input").inc(len(req.input_ids))
    tel.tokens.labels(label, "output").inc(req.output_tokens)


async def _cancel_on_disconnect(request: Request, task: asyncio.Task) -> None:
    """Cancel the generation once the client disconnects. The body has been read, so the next
    ASGI message is the disconnect (uvicorn sends nothing else to a request whose body is
    done)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            task.cancel()
            return


async def _stream(engine: Engine, req: GenRequest, label: str):
    """The response body of a streamed request: a JSON line per piece of text, then a summary
    line. When the client disconnects, Starlette closes this generator, which closes the
    engine's and aborts the request in vLLM."""
    tokens = engine.generate(req)
    try:
        async for text in tokens:
            yield json.dumps({"token": text}) + "\n"
    except EngineError as exc:
        engine.telemetry.requests.labels(label, str(exc.status)).inc()
        yield json.dumps({"error": exc.message, "status": exc.status}) + "\n"
        return
    finally:
        await tokens.aclose()
    _account(engine, req, label)
    yield json.dumps({"done": True, **req.result()}) + "\n"
