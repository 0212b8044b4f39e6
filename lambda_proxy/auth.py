"""Who is calling, and may they use this adapter.

API Gateway's AWS_IAM authorization has already verified the SigV4 signature; the request
context carries the caller's ARN. A tenant is always account-qualified, ``ACCOUNT:NAME``: the
role name of an assumed role (``arn:aws:sts::ACCOUNT:assumed-role/ROLE/SESSION``) or of a role,
with the account it belongs to, so ``clinic-north`` in another account is someone else. An IAM
user is a tenant of its own kind, ``ACCOUNT:user/NAME``: IAM lets a user and a role share a
name, and they must not share answers or a quota. In the catalog a bare tenant name means that
role name in this environment's own account (the API owner's, ``requestContext.accountId``),
``user/NAME`` that user; another account's tenant is written ``ACCOUNT:NAME`` (or
``ACCOUNT:user/NAME``) and ``ACCOUNT:*`` admits every caller of that account, ``*`` every caller
of this one. A role's ARN matches by account and name, whatever its path (an assumed-role
session carries none: ``contracts.principals``); any other principal ARN matches exactly.

An authorizer claim ``tenant`` replaces the IAM-derived tenant only where the environment
configures such an authorizer (``trust_tenant_claim``); otherwise it is ignored. A claim must
be an IAM name (letters, digits and ``+=,.@_-``, 1 to 64 characters) and is qualified with the
caller's own account, never the API owner's: another account's caller claiming
``clinic-north`` is that account's ``clinic-north``. A claim that is not a name refuses the
caller. Access is never implicit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from contracts.principals import caller_keys, match_key
from contracts.routing import Route

_ASSUMED = re.compile(
    r"^arn:(?P<p>aws[a-z-]*):sts::(?P<acct>\d{12}):assumed-role/(?P<role>[^/]+)/.+$"
)
_IAM = re.compile(
    r"^arn:aws[a-z-]*:iam::(?P<acct>\d{12}):(?P<kind>role|user)/(?:.*/)?(?P<name>[^/]+)$"
)
_ACCOUNT = re.compile(r"^\d{12}$")
#: IAM's name characters (the ``RoleName`` and ``UserName`` patterns in botocore's IAM model).
_CLAIM = re.compile(r"^[\w+=,.@-]{1,64}$", re.ASCII)


@dataclass(frozen=True)
class Caller:
    arn: str
    principals: frozenset[str]  # the ARN plus the role ARN it stands for
    account: str | None
    tenant: str | None  # ACCOUNT:NAME
    own_account: str | None  # the API owner's account: where bare catalog tenant names live


def caller_from_event(
    event: dict[str, Any], *, trust_tenant_claim: bool = False, own_account: str | None = None
) -> Caller | None:
    ctx = event.get("requestContext") or {}
    if not isinstance(ctx, dict):
        return None
    identity = ctx.get("identity") or {}
    arn = identity.get("userArn") if isinstance(identity, dict) else None
    if not isinstance(arn, str) or not arn.startswith("arn:"):
        return None
    owner = ctx.get("accountId")
    own = owner if isinstance(owner, str) and _ACCOUNT.match(owner) else own_account
    principals = set(caller_keys(arn))
    account = tenant = None
    if m := _ASSUMED.match(arn):
        account, tenant = m["acct"], f"{m['acct']}:{m['role']}"
    elif (n := _IAM.match(arn)) is not None:
        name = n["name"] if n["kind"] == "role" else f"user/{n['name']}"
        account, tenant = n["acct"], f"{n['acct']}:{name}"
    if trust_tenant_claim:
        authorizer = ctx.get("authorizer") or {}
        claims = authorizer.get("claims") if isinstance(authorizer, dict) else None
        claim = claims.get("tenant") if isinstance(claims, dict) else None
        if claim is not None:
            if not isinstance(claim, str) or not _CLAIM.match(claim) or account is None:
                return None  # not a name, or no account of the caller's own to qualify it with
            tenant = f"{account}:{claim}"
    return Caller(
        arn=arn, principals=frozenset(principals), account=account, tenant=tenant, own_account=own
    )


def qualified(tenant: str, own_account: str | None) -> str | None:
    """A catalog tenant as ``ACCOUNT:NAME`` (``*`` becomes ``OWN:*``); None when unknowable."""
    if tenant == "*":
        return f"{own_account}:*" if own_account else None
    if ":" in tenant:
        return tenant
    return f"{own_account}:{tenant}" if own_account else None


def listed(caller: Caller, principals: tuple[str, ...] | list[str]) -> bool:
    """Whether the caller is one of these catalog principal ARNs (``contracts.principals``)."""
    return any(match_key(p) in caller.principals for p in principals)


def allowed(caller: Caller, route: Route) -> bool:
    if listed(caller, route.principals):
        return True
    if caller.tenant is None or caller.account is None:
        return False
    for entry in route.tenants:
        q = qualified(str(entry), caller.own_account)
        if q is not None and q in (caller.tenant, f"{caller.account}:*"):
            return True
    return False


def voice(caller: Caller, route: Route) -> str:
    """Who the caller is as evidence about a canary: the catalog entry that admits it. A
    tenant or a principal ARN the entry names is a voice of its own; every caller a wildcard
    admits (``ACCOUNT:*``, ``*``) is its account's one voice, as is a caller the entry does not
    name (an operator). A partner account's roles are then one voice, not as many as it
    makes, and ``min_callers`` counts what the catalog counts. Every caller of another account
    than the API owner's is that account's one voice, whichever entries admit it: a partner
    named as ``ACCOUNT:*``, ``ACCOUNT:etl`` and a role ARN is still one partner."""
    own = caller.own_account
    if caller.account is not None and own is not None and caller.account != own:
        return f"{caller.account}:*"
    for principal in route.principals:
        if match_key(principal) in caller.principals:
            return match_key(principal)
    if caller.tenant is not None:
        for entry in route.tenants:
            if qualified(str(entry), caller.own_account) == caller.tenant:
                return caller.tenant
    return f"{caller.account or caller.arn}:*"
