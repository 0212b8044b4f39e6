"""Who is calling, and may they use this adapter.

API Gateway's AWS_IAM authorization has already verified the SigV4 signature; the request
context carries the caller's ARN. For an assumed role (arn:aws:sts::ACCOUNT:assumed-role/ROLE/
SESSION) the role's IAM ARN is what catalog entries list, and the role name is the tenant unless
an authorizer claim named ``tenant`` says otherwise. Access is never implicit: an adapter
entry lists tenants, principal ARNs, or "*" for any authenticated caller.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

_ASSUMED = re.compile(
    r"^arn:(?P<p>aws[a-z-]*):sts::(?P<acct>\d{12}):assumed-role/(?P<role>[^/]+)/.+$"
)
_IAM = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:(role|user)/(?:.*/)?(?P<name>[^/]+)$")


@dataclass(frozen=True)
class Caller:
    arn: str
    principals: frozenset[str]  # the ARN plus the role ARN it stands for
    tenant: str | None


def caller_from_event(event: dict[str, Any]) -> Caller | None:
    ctx = event.get("requestContext") or {}
    if not isinstance(ctx, dict):
        return None
    identity = ctx.get("identity") or {}
    arn = identity.get("userArn") if isinstance(identity, dict) else None
    if not isinstance(arn, str) or not arn.startswith("arn:"):
        return None
    principals = {arn}
    tenant = None
    m = _ASSUMED.match(arn)
    if m:
        principals.add(f"arn:{m['p']}:iam::{m['acct']}:role/{m['role']}")
        tenant = m["role"]
    elif (n := _IAM.match(arn)) is not None:
        tenant = n["name"]
    authorizer = ctx.get("authorizer") or {}
    claims = authorizer.get("claims") if isinstance(authorizer, dict) else None
    if isinstance(claims, dict) and isinstance(claims.get("tenant"), str):
        tenant = claims["tenant"]
    return Caller(arn=arn, principals=frozenset(principals), tenant=tenant)


def allowed(caller: Caller, route: dict[str, Any]) -> bool:
    tenants = route.get("tenants") or []
    if "*" in tenants:
        return True
    if caller.tenant is not None and caller.tenant in tenants:
        return True
    return any(p in (route.get("principals") or []) for p in caller.principals)
