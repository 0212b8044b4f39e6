"""A generation runs once: against a slow local endpoint that counts invocations, the router's
client neither repeats a request that may be generating nor gives up before its deadline."""

from __future__ import annotations

import json
import time

import pytest

from lambda_proxy.sagemaker import InvokeError, invoke, make_client
from tests.fakes import HttpEndpoint


class SlowEndpoint(HttpEndpoint):
    """InvokeEndpoint's REST shape: sleeps ``delay`` s per call, throttles the first ``throttle``."""

    def __init__(self, delay: float, throttle: int = 0) -> None:
        def respond(calls: int, _body: bytes) -> tuple[int, dict[str, str], bytes]:
            if calls <= throttle:
                body = json.dumps({"message": "Rate exceeded"}).encode()
                return 400, {"x-amzn-ErrorType": "ThrottlingException"}, body
            time.sleep(delay)
            return 200, {}, json.dumps({"generated_text": "done", "n": calls}).encode()

        super().__init__(respond)


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
