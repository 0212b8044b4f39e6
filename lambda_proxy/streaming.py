"""Streamed answers: server-sent events from SageMaker's ``InvokeEndpointWithResponseStream``,
for the native route and the OpenAI-compatible ones.

A stream is planned the way a buffered answer is (``service``: identity first, the request's
schema, the quota, the cache) and then SageMaker's stream is opened (``Stream.open``) before
any byte is answered, so every refusal, and a stream SageMaker will not open (a component not
ready, throttling), is an ordinary JSON error with its status code and ``Retry-After``. Once
open, the container's JSON lines become events:

- native: ``event: token`` with ``{"text": ...}`` per piece, then ``event: done`` with the
  buffered route's whole answer (output, usage, artifact, cache status, timings), or
  ``event: error``;
- OpenAI: ``chat.completion.chunk`` / ``text_completion`` chunks as ``data:`` lines, the last
  with its ``finish_reason`` (and a usage chunk when ``stream_options.include_usage``), then
  ``data: [DONE]``; an error is ``data: {"error": {...}}``.

A reader thread pulls the event stream; the writer sends an SSE comment every
``KEEPALIVE_S`` while no token comes, because API Gateway ends a stream that stays idle (30 s
on edge-optimized endpoints). ``cancel`` (the client went away) closes SageMaker's stream.
A deterministic answer is cached when the stream completes, and a cached one is streamed back
in one piece.
"""

from __future__ import annotations

import dataclasses
import json
import queue
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit

from contracts import errors
from contracts.fairness import custom_attributes
from contracts.routing import Route
from lambda_proxy import handler, openai_api, service, usage
from lambda_proxy.sagemaker import InvokeError, open_stream, stream_lines
from lambda_proxy.service import Call, RouterError
from lambda_proxy.telemetry import count_now, logger

KEEPALIVE_S = 15.0
_END = object()
#: The usage status of a stream whose client left before its end (nginx's "client closed
#: request", the status proxies log for it).
ABANDONED = 499


@dataclass
class StreamPlan:
    """Everything a stream needs once it has been admitted."""

    kind: str  # native | chat | completion
    model: str
    prep: service.Prepared
    status: str  # cache status: hit | miss | bypass
    hit: dict[str, Any] | None
    t0: float
    include_usage: bool = False
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    #: API Gateway's request id.
    request_id: str | None = None
    #: Who asked and the adapter's route: the stream's usage record (``lambda_proxy.usage``).
    caller: Any = None
    route: Route | None = None
    #: Pieces sent to the client so far, and whether the stream's usage record is written.
    streamed: int = 0
    recorded: bool = False

    def record_failure(self, status: int, input_tokens: int = 0, output_tokens: int = 0) -> None:
        """The stream's one usage record when it ends without an answer (refused, failed,
        abandoned)."""
        ms = (time.perf_counter() - self.t0) * 1000
        failed = usage.of_failure(
            self.caller, self.route, self.model, "stream", status, ms, self.request_id
        )
        usage.record(
            dataclasses.replace(failed, input_tokens=input_tokens, output_tokens=output_tokens)
        )
        self.recorded = True


def refusal(kind: str, exc: RouterError, request_id: str | None) -> tuple[int, dict, bytes]:
    """A stream that will not be served, as the JSON error its API answers with: every stream
    refusal (its checks, or a SageMaker stream that would not open) is rendered here."""
    body = handler.error_body(exc, request_id) if kind == "native" else openai_api.error_body(exc)
    headers = {"Content-Type": "application/json", **exc.headers}
    return exc.status, headers, json.dumps(body).encode()


def plan(kind: str, call: Call, adapter: str | None, t0: float) -> StreamPlan:
    """The stream's checks, in its API's order; raises ``RouterError`` when it is refused.
    ``adapter``: the native route's (its path names it); an OpenAI request's body does."""
    if kind == "native" and adapter is not None:
        caller, route, req = service.check_native(call, adapter)
        return _admit(kind, call, adapter, caller, route, req, t0)
    req = openai_api.parse(
        call, openai_api.ChatRequest if kind == "chat" else openai_api.CompletionRequest
    )
    caller, route, native = openai_api.authorize(call, req, openai_api.prompt_of(req))
    admitted = _admit(kind, call, req.model, caller, route, native, t0, session=req.user)
    admitted.include_usage = bool((req.stream_options or {}).get("include_usage"))
    return admitted


def _admit(
    kind: str,
    call: Call,
    adapter: str,
    caller: Any,
    route: Route,
    req: Any,
    t0: float,
    session: str | None = None,
) -> StreamPlan:
    try:
        prep = service.prepare(call, adapter, caller, route, req, session)
    except RouterError as exc:  # refused at its quota: usage, as a buffered refusal is
        ms = (time.perf_counter() - t0) * 1000
        usage.record(
            usage.of_failure(caller, route, adapter, "stream", exc.status, ms, call.request_id)
        )
        raise
    hit, status = service.lookup(prep)
    return StreamPlan(
        kind,
        adapter,
        prep,
        status,
        hit,
        t0,
        request_id=call.request_id,
        caller=caller,
        route=route,
    )


class Stream:
    """One admitted stream: ``events()`` yields SSE bytes; ``cancel()`` may come from any
    thread (the client went away)."""

    def __init__(self, plan: StreamPlan) -> None:
        self.plan = plan
        self._queue: queue.Queue[Any] = queue.Queue()
        self._cancelled = threading.Event()
        self._body: Any = None
        self._lock = threading.Lock()

    def open(self) -> None:
        """SageMaker's stream, opened before the answer starts (a cached answer needs none);
        raises ``InvokeError`` when it cannot be."""
        if self.plan.hit is not None:
            return
        d = service.deps()
        s = d.settings
        prep = self.plan.prep
        try:
            self._body = open_stream(
                d.stream_client,
                s.routing_table.endpoint,
                prep.component,
                prep.payload,
                deadline_s=s.stream_deadline_s,
                attributes=custom_attributes(prep.who) if prep.who else None,
            )
        except InvokeError as exc:
            if prep.fallback is None or exc.code not in service.CANARY_ABSENT:
                raise
            # The canary's component is not there (a release halfway): stable answers.
            self.plan.prep = prep.fallback
            self._body = open_stream(
                d.stream_client,
                s.routing_table.endpoint,
                prep.fallback.component,
                prep.fallback.payload,
                deadline_s=s.stream_deadline_s,
                attributes=custom_attributes(prep.who) if prep.who else None,
            )

    def refusal(self, exc: InvokeError) -> tuple[int, dict[str, str], bytes]:
        """A stream that could not be opened, as the JSON error its API answers with."""
        p = self.plan
        # Outside the handler's lock: counted at once, not in its metric buffer.
        service.count_canary(p.prep, exc, count=count_now)
        p.record_failure(exc.status)
        failure = service.invoke_failure(p.model, exc, p.request_id, count=count_now)
        return refusal(p.kind, failure, p.request_id)

    # -- the reader ------------------------------------------------------------------------
    def _read(self) -> None:
        try:
            with self._lock:
                body = self._body
                if self._cancelled.is_set():
                    body.close()
                    return
            for line in stream_lines(body):
                self._queue.put(line)
        except InvokeError as exc:
            self._queue.put(exc)
        except Exception as exc:  # a closed stream after cancel, or a bug: end the stream
            if not self._cancelled.is_set():
                logger.exception("stream reader failed")
                self._queue.put(
                    InvokeError(502, "the model stream failed", "StreamError", str(exc))
                )
        finally:
            self._queue.put(_END)

    def cancel(self) -> None:
        self._cancelled.set()
        with self._lock:
            body = self._body
        if body is not None:
            try:
                # A read blocked in another thread does not wake on close(); urllib3 2.3+
                # has shutdown() for exactly that.
                raw = getattr(body, "_raw_stream", None)
                if hasattr(raw, "shutdown"):
                    raw.shutdown()
                body.close()
            except Exception as exc:  # closing a broken connection: nothing left to free
                logger.debug("closing the model stream: %s", exc)
        self._queue.put(_END)

    def finish(self) -> None:
        """The stream is over for its client: when it left before the answer's end, its usage
        is written here, with ``ABANDONED`` as its status, the pieces it
        was sent as its output tokens and the prompt's estimate as its input: the model ran
        and the quota was charged, so the endpoint's cost is this tenant's share too."""
        p = self.plan
        if not p.recorded:
            p.record_failure(ABANDONED, p.prep.prompt_tokens, p.streamed)

    # -- the writer ------------------------------------------------------------------------
    def events(self) -> Iterator[bytes]:
        plan = self.plan
        fmt = _Format(plan)
        if plan.hit is not None:
            yield from fmt.whole(plan.hit)
            return
        yield from fmt.opening()
        threading.Thread(target=self._read, name="sagemaker-stream", daemon=True).start()
        deadline = time.monotonic() + service.deps().settings.stream_deadline_s
        t_model = time.perf_counter()
        while not self._cancelled.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                self.cancel()
                yield from fmt.error(
                    InvokeError(504, "the stream exceeded its deadline", "Timeout")
                )
                return
            try:
                item = self._queue.get(timeout=min(KEEPALIVE_S, left))
            except queue.Empty:
                if time.monotonic() < deadline:
                    yield b": keep-alive\n\n"
                continue
            if item is _END:
                if not self._cancelled.is_set():
                    yield from fmt.error(
                        InvokeError(502, "the model stream ended early", "StreamError")
                    )
                return
            if isinstance(item, InvokeError):
                yield from fmt.error(item)
                return
            text = _token_text(item)
            if text:
                yield from fmt.token(text)
            if "error" in item or item.get("done") or item.get("generated_text") is not None:
                # The last line: an answer only when it is a complete one.
                try:
                    item = service.complete_answer(item)
                except InvokeError as exc:
                    yield from fmt.error(exc)
                    return
                model_ms = (time.perf_counter() - t_model) * 1000
                count_now("ModelLatency", model_ms, MetricUnit.Milliseconds)
                service.count_canary(plan.prep, None, count=count_now)
                service.remember(plan.prep, plan.status, item, count=count_now)
                yield from fmt.done(item, model_ms)
                return


def _token_text(line: dict[str, Any]) -> str:
    """A streamed piece: ours is ``{"token": "text"}``; AWS's LMI image streams
    ``{"token": {"text": ...}}``."""
    token = line.get("token")
    if isinstance(token, dict):
        token = token.get("text")
    return token if isinstance(token, str) else ""


def sse(data: Any, event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    payload = data if isinstance(data, str) else json.dumps(data)
    return f"{head}data: {payload}\n\n".encode()


class _Format:
    """The events of one stream in its API's shape."""

    def __init__(self, plan: StreamPlan) -> None:
        self.plan = plan
        self.created = int(time.time())
        self.prefix = "chatcmpl" if plan.kind == "chat" else "cmpl"

    def _chunk(self, choice: dict[str, Any], **extra: Any) -> bytes:
        obj = "chat.completion.chunk" if self.plan.kind == "chat" else "text_completion"
        return sse(
            {
                "id": f"{self.prefix}-{self.plan.id}",
                "object": obj,
                "created": self.created,
                "model": self.plan.model,
                "choices": [choice],
                **extra,
            }
        )

    def _piece(self, text: str | None, finish: str | None = None) -> dict[str, Any]:
        if self.plan.kind == "chat":
            delta = {} if text is None else {"content": text}
            return {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
        return {"index": 0, "text": text or "", "finish_reason": finish, "logprobs": None}

    def opening(self) -> Iterator[bytes]:
        if self.plan.kind == "chat":
            yield self._chunk(
                {
                    "index": 0,
                    "delta": {"role": "assistant", "content": ""},
                    "finish_reason": None,
                    "logprobs": None,
                }
            )

    def token(self, text: str) -> Iterator[bytes]:
        self.plan.streamed += 1
        if self.plan.kind == "native":
            yield sse({"text": text}, event="token")
        else:
            yield self._chunk(self._piece(text))

    def done(self, result: dict[str, Any], model_ms: float) -> Iterator[bytes]:
        p = self.plan
        native = service.answer(
            p.model, p.prep.version, result, p.status, p.t0, model_ms, p.request_id
        )
        usage.record(usage.of_answer(p.caller, p.route, p.model, native, "stream"))
        p.recorded = True
        if p.kind == "native":
            yield sse(native, event="done")
            return
        yield self._chunk(self._piece(None, openai_api.finish(native.get("finish_reason"))))
        if p.include_usage:
            obj = "chat.completion.chunk" if p.kind == "chat" else "text_completion"
            yield sse(
                {
                    "id": f"{self.prefix}-{p.id}",
                    "object": obj,
                    "created": self.created,
                    "model": p.model,
                    "choices": [],
                    "usage": openai_api.usage(native),
                }
            )
        yield sse("[DONE]")

    def whole(self, hit: dict[str, Any]) -> Iterator[bytes]:
        """A cached answer, as a stream of one piece."""
        yield from self.opening()
        text = hit.get("generated_text") or ""
        if text:
            yield from self.token(text)
        yield from self.done(hit, 0.0)

    def error(self, exc: InvokeError) -> Iterator[bytes]:
        # After the 200 status: API Gateway logs a success, so the failure is counted here.
        count_now(f"StreamError{exc.status}")
        self.plan.record_failure(exc.status)
        service.count_canary(self.plan.prep, exc, count=count_now)
        if exc.status >= 500:  # API Gateway's 5XXError never sees it: alarmed on this one
            count_now("StreamServerError")
        where = {
            "adapter": self.plan.model,
            "code": exc.code,
            "status": exc.status,
            "detail": exc.detail,
            "request_id": self.plan.request_id,
        }
        logger.warning("stream failed", extra=where)
        if self.plan.kind == "native":
            yield sse({"error": exc.message, "status": exc.status, "code": exc.code}, event="error")
            return
        yield sse(
            {
                "error": {
                    "message": exc.message,
                    "type": errors.openai_type(exc.status),
                    "param": None,
                    "code": exc.code,
                }
            }
        )
        yield sse("[DONE]")
