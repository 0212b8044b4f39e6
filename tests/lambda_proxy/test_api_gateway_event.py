"""The router on events shaped as API Gateway sends them, not as the other tests abbreviate them.

API Gateway's REST proxy event (its developer guide, "Input format of a Lambda function for
proxy integration") names the API owner in ``requestContext.accountId`` and the SigV4 caller in
``requestContext.identity`` (``accountId``, ``caller``, ``userArn``), with the stage (``live``,
``infra/router.py``), the resource path the route table declares and its path parameters. The
owner and the callers are usually different accounts: a platform account serving its own teams'
roles and a partner account's. Here the function runs in the owner's account and every caller
is named against it.
"""

from __future__ import annotations

import copy
import json
import uuid
from typing import Any

import pytest

from contracts.api import route_of
from contracts.settings import RouterSettings
from lambda_proxy import handler as h
from lambda_proxy import service
from tests.lambda_proxy.conftest import TABLE, Context, model_answer

OWNER, TEAM, PARTNER, STRANGER = "444455556666", "444455556666", "777788889999", "123123123123"


def api_gateway_event(method: str, path: str, body: Any, caller_arn: str) -> dict[str, Any]:
    """A REST proxy event with every field API Gateway sends for an AWS_IAM-signed request."""
    route, params = route_of(method, path) or (None, None)
    assert route is not None, f"{method} {path} is no route"
    account = caller_arn.split(":")[4]
    principal = caller_arn.split(":", 5)[5]
    return {
        "resource": route.path,
        "path": path,
        "httpMethod": method,
        "headers": {
            "Content-Type": "application/json",
            "Host": "abc123.execute-api.eu-west-1.amazonaws.com",
            "User-Agent": "Boto3/1.40 md/Botocore#1.40 ua/2.1 os/linux",
            "X-Amz-Date": "20261207T120000Z",
            "X-Amz-Security-Token": "IQoJb3JpZ2luX2Vj...",
            "X-Amzn-Trace-Id": "Root=1-6751a1b0-0123456789abcdef01234567",
            "X-Forwarded-For": "203.0.113.7",
        },
        "multiValueHeaders": {"Content-Type": ["application/json"]},
        "queryStringParameters": None,
        "multiValueQueryStringParameters": None,
        "pathParameters": params or None,
        "stageVariables": None,
        "requestContext": {
            "resourceId": "a1b2c3",
            "resourcePath": route.path,
            "httpMethod": method,
            "extendedRequestId": "CcHnKF3_oAMEb8Q=",
            "requestTime": "07/Dec/2026:12:00:00 +0000",
            "path": f"/live{path}",
            "accountId": OWNER,
            "protocol": "HTTP/1.1",
            "stage": "live",
            "domainPrefix": "abc123",
            "requestTimeEpoch": 1796644800000,
            "requestId": str(uuid.uuid4()),
            "identity": {
                "cognitoIdentityPoolId": None,
                "accountId": account,
                "cognitoIdentityId": None,
                "caller": f"AROAEXAMPLEID:{principal.rsplit('/', 1)[-1]}",
                "sourceIp": "203.0.113.7",
                "principalOrgId": "o-exampleorg",
                "accessKey": "ASIAEXAMPLEKEY",
                "cognitoAuthenticationType": None,
                "cognitoAuthenticationProvider": None,
                "userArn": caller_arn,
                "userAgent": "Boto3/1.40",
                "user": f"AROAEXAMPLEID:{principal.rsplit('/', 1)[-1]}",
            },
            "domainName": "abc123.execute-api.eu-west-1.amazonaws.com",
            "apiId": "abc123",
        },
        "body": None if body is None else json.dumps(body),
        "isBase64Encoded": False,
    }


@pytest.fixture
def owned(sagemaker, redis_client):
    """The router as the owner's function: its ARN names the owner's account."""
    client, stub = sagemaker
    table = copy.deepcopy(TABLE)
    table["adapters"]["medical"]["tenants"] = ["clinic-north", f"{PARTNER}:*"]
    from lambda_proxy.cache import ResponseCache

    settings = RouterSettings(routing_table=table, max_new_tokens_cap=256)
    service.configure(service.Dependencies(settings, ResponseCache(redis_client, 3600), client))
    yield stub
    service.configure(None)


def _call(ev: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    ctx = Context(invoked_function_arn=f"arn:aws:lambda:eu-west-1:{OWNER}:function:r:live")
    out = h.handler(ev, ctx)
    return out["statusCode"], json.loads(out["body"])


def _generate(arn: str, adapter: str = "medical") -> dict[str, Any]:
    body = {"inputs": f"pt 45yo m c/o sob {uuid.uuid4().hex}", "parameters": {"max_new_tokens": 8}}
    return api_gateway_event("POST", f"/v1/adapters/{adapter}/generate", body, arn)


def _answers(stub) -> None:
    artifact = {"name": "medical", "version": "1.0.0", "sha256": "0" * 64}
    stub.add_response("invoke_endpoint", model_answer(artifact=artifact))


def test_a_team_role_of_the_owners_account_is_its_bare_tenant_name(owned) -> None:
    _answers(owned)
    status, out = _call(_generate(f"arn:aws:sts::{TEAM}:assumed-role/clinic-north/alice"))
    assert status == 200 and out["usage"]["output_tokens"] == 6, out


def test_a_partner_account_named_with_its_account_is_served(owned) -> None:
    _answers(owned)
    status, _ = _call(_generate(f"arn:aws:sts::{PARTNER}:assumed-role/any-role/job-7"))
    assert status == 200


@pytest.mark.parametrize(
    "arn",
    [
        f"arn:aws:sts::{STRANGER}:assumed-role/clinic-north/x",  # the name, another account
        f"arn:aws:iam::{STRANGER}:user/clinic-north",
        f"arn:aws:sts::{TEAM}:assumed-role/clinic-south/bob",  # the owner's, not named
    ],
)
def test_a_caller_nobody_named_meets_one_answer_for_missing_and_not_yours(owned, arn) -> None:
    status, out = _call(_generate(arn))
    assert (status, out["code"]) == (404, "UnknownAdapter")


def test_listing_and_the_openai_door_read_the_same_event(owned) -> None:
    partner = f"arn:aws:sts::{PARTNER}:assumed-role/any-role/job-7"
    status, out = _call(api_gateway_event("GET", "/v1/models", None, partner))
    assert status == 200
    # ``public`` admits "*": every role of the owner's account, not every account.
    assert {m["id"] for m in out["data"]} == {"medical"}
    _answers(owned)
    chat = {"model": "medical", "messages": [{"role": "user", "content": "pt c/o sob"}]}
    status, out = _call(api_gateway_event("POST", "/v1/chat/completions", chat, partner))
    assert status == 200 and out["object"] == "chat.completion", out
