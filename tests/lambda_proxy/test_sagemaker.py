"""A generation runs once: against a slow local endpoint that counts invocations, the router's
client neither repeats a request that may be generating nor gives up before its deadline."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from lambda_proxy.sagemaker import InvokeError, invoke, make_client


class SlowEndpoint:
    """InvokeEndpoint's REST shape: sleeps ``delay`` s per call, throttles the first ``throttle``."""

    def __init__(self, delay: float, throttle: int = 0) -> None:
        self.delay, self.throttle, self.calls = delay, throttle, 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                outer.calls += 1
                if outer.calls <= outer.throttle:
                    body = json.dumps({"message": "Rate exceeded"}).encode()
                    self.send_response(400)
                    self.send_header("x-amzn-ErrorType", "ThrottlingException")
                else:
                    time.sleep(outer.delay)
                    body = json.dumps({"generated_text": "done", "n": outer.calls}).encode()
                    self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self.wfile.write(body)

            def log_message(self, *_: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()


@pytest.fixture
def endpoint(request):
    ep = SlowEndpoint(*request.param)
    yield ep
    ep.close()


@pytest.mark.parametrize("endpoint", [(1.4, 0)], indirect=True)
def test_a_generation_longer_than_half_the_deadline_runs_once_and_answers(endpoint) -> None:
    client = make_client(endpoint.url, "us-east-1", deadline_s=2.5)
    out = invoke(client, "ep", "ic", {"inputs": "x"}, deadline_s=2.5)
    assert out["generated_text"] == "done"
    assert endpoint.calls == 1


@pytest.mark.parametrize("endpoint", [(3.0, 0)], indirect=True)
def test_a_generation_past_the_deadline_is_a_504_and_is_not_sent_again(endpoint) -> None:
    client = make_client(endpoint.url, "us-east-1", deadline_s=1.0)
    t0 = time.monotonic()
    with pytest.raises(InvokeError) as err:
        invoke(client, "ep", "ic", {"inputs": "x"}, deadline_s=1.0)
    assert err.value.status == 504 and err.value.code == "Timeout"
    assert time.monotonic() - t0 < 2.0, "the client gave up at the deadline"
    time.sleep(0.2)
    assert endpoint.calls == 1


@pytest.mark.parametrize("endpoint", [(0.0, 2)], indirect=True)
def test_throttling_never_reached_a_container_and_is_retried(endpoint) -> None:
    client = make_client(endpoint.url, "us-east-1", deadline_s=10.0)
    out = invoke(client, "ep", "ic", {"inputs": "x"}, deadline_s=10.0)
    assert out["generated_text"] == "done" and endpoint.calls == 3


def test_a_refused_connection_is_retried_then_reported() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here once closed
    client = make_client(f"http://127.0.0.1:{port}", "us-east-1", deadline_s=5.0)
    with pytest.raises(InvokeError) as err:
        invoke(client, "ep", "ic", {"inputs": "x"}, deadline_s=5.0)
    assert err.value.status == 502 and "cannot reach SageMaker" in err.value.message
