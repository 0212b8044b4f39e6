"""The SigV4 httpx auth signs exactly as botocore signs for execute-api, without the openai
client's placeholder API key."""

from __future__ import annotations

import boto3
import httpx

from lambda_proxy.client import SigV4Auth


def test_requests_are_signed_for_execute_api_and_the_api_key_is_dropped() -> None:
    session = boto3.Session(
        aws_access_key_id="AKIDEXAMPLE", aws_secret_access_key="secret", region_name="eu-west-1"
    )
    seen = {}

    def app(request: httpx.Request) -> httpx.Response:
        seen.update(request.headers)
        return httpx.Response(200, json={})

    client = httpx.Client(auth=SigV4Auth(session), transport=httpx.MockTransport(app))
    client.post(
        "https://abc.execute-api.eu-west-1.amazonaws.com/live/v1/chat/completions",
        json={"model": "m"},
        headers={"Authorization": "Bearer unused"},
    )
    auth = seen["authorization"]
    assert auth.startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
    assert "/eu-west-1/execute-api/aws4_request" in auth and "Bearer" not in auth
    assert "x-amz-date" in seen


def test_the_signing_region_is_the_one_the_routers_url_names_not_the_shells() -> None:
    """A shell whose default region is another (or none) still signs for the router's own
    region: a signature for another region is refused with 403 by API Gateway."""
    seen = {}

    def app(request: httpx.Request) -> httpx.Response:
        seen.update(request.headers)
        return httpx.Response(200, json={})

    for shell_region in (None, "us-east-1"):
        session = boto3.Session(
            aws_access_key_id="AKIDEXAMPLE",
            aws_secret_access_key="secret",
            region_name=shell_region,
        )
        client = httpx.Client(auth=SigV4Auth(session), transport=httpx.MockTransport(app))
        client.post("https://abc.execute-api.ap-southeast-2.amazonaws.com/live/v1/models", json={})
        assert "/ap-southeast-2/execute-api/aws4_request" in seen["authorization"]


def test_a_url_that_names_no_region_and_a_session_without_one_is_refused(
    monkeypatch, tmp_path
) -> None:
    import pytest

    for var in ("AWS_DEFAULT_REGION", "AWS_REGION"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    session = boto3.Session(aws_access_key_id="AKIDEXAMPLE", aws_secret_access_key="secret")
    assert session.region_name is None
    client = httpx.Client(
        auth=SigV4Auth(session),
        transport=httpx.MockTransport(lambda r: httpx.Response(200, json={})),
    )
    with pytest.raises(RuntimeError, match=r"no region to sign api\.example\.com for"):
        client.get("https://api.example.com/v1/models")
