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
