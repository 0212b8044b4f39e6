"""For callers of the deployed router: SigV4 signing for httpx, so the official ``openai`` client
(and any httpx client) can call the IAM-authorized API.

    import boto3, openai
    from lambda_proxy.client import SigV4Auth

    client = openai.OpenAI(base_url=ROUTER_URL + "v1", api_key="unused",
                           http_client=httpx.Client(auth=SigV4Auth(boto3.Session())))
    client.chat.completions.create(model="medical-shorthand-r8", messages=[...])

API Gateway's ``AWS_IAM`` authorization checks a SigV4 signature for the ``execute-api``
service; botocore's ``SigV4Auth`` computes it. This module is for callers: nothing in the
router imports it, so its httpx dependency is the caller's, not the Lambda's.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import httpx
from botocore.auth import SigV4Auth as _BotocoreSigV4
from botocore.awsrequest import AWSRequest

#: Headers the openai client sets that must not be signed: the API key it insists on sending
#: would otherwise travel as a second Authorization header.
_DROP = ("authorization",)


class SigV4Auth(httpx.Auth):
    """Signs each request with the session's credentials (refreshed per request)."""

    requires_request_body = True

    def __init__(
        self, session: Any, region: str | None = None, service: str = "execute-api"
    ) -> None:
        self.session = session
        self.region = region or session.region_name or "us-east-1"
        self.service = service

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        credentials = self.session.get_credentials()
        if credentials is None:
            raise RuntimeError("no AWS credentials in the boto3 session to sign with")
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _DROP}
        aws = AWSRequest(
            method=request.method, url=str(request.url), data=request.content, headers=headers
        )
        _BotocoreSigV4(credentials.get_frozen_credentials(), self.service, self.region).add_auth(
            aws
        )
        for name in _DROP:
            request.headers.pop(name, None)
        request.headers.update(dict(aws.headers.items()))
        yield request
