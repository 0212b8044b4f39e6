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

import re
from collections.abc import Generator
from typing import Any

import httpx
from botocore.auth import SigV4Auth as _BotocoreSigV4
from botocore.awsrequest import AWSRequest

#: Headers the openai client sets that must not be signed: the API key it insists on sending
#: would otherwise travel as a second Authorization header.
_DROP = ("authorization",)


#: An API Gateway address names its region: ``https://ID.execute-api.REGION.amazonaws.com``.
_API_HOST = re.compile(r"\.execute-api\.([a-z]{2}(?:-[a-z]+)+-\d)\.amazonaws\.com(?:\.cn)?$")


def region_of(url: str) -> str | None:
    """The region an execute-api URL names, or None (a custom domain, the local gateway)."""
    host = httpx.URL(url).host
    found = _API_HOST.search(host)
    return found[1] if found else None


class SigV4Auth(httpx.Auth):
    """Signs each request with the session's credentials (refreshed per request), for the
    region the request's own URL names: a signature for another region is refused with 403,
    and the shell's default region is nobody's choice for a router deployed elsewhere."""

    requires_request_body = True

    def __init__(
        self, session: Any, region: str | None = None, service: str = "execute-api"
    ) -> None:
        self.session = session
        self.region = region
        self.service = service

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        credentials = self.session.get_credentials()
        if credentials is None:
            raise RuntimeError("no AWS credentials in the boto3 session to sign with")
        region = self.region or region_of(str(request.url)) or self.session.region_name
        if region is None:
            raise RuntimeError(
                f"no region to sign {request.url.host} for: pass region= (a custom domain "
                "names none) or set the session's region"
            )
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _DROP}
        aws = AWSRequest(
            method=request.method, url=str(request.url), data=request.content, headers=headers
        )
        _BotocoreSigV4(credentials.get_frozen_credentials(), self.service, region).add_auth(aws)
        for name in _DROP:
            request.headers.pop(name, None)
        request.headers.update(dict(aws.headers.items()))
        yield request
