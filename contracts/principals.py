"""How an IAM principal ARN named in the catalog is matched against a caller.

The router sees a caller as API Gateway's ``requestContext.identity.userArn``. For a role that
is the STS session, ``arn:aws:sts::ACCOUNT:assumed-role/ROLE/SESSION``, which never carries the
role's path ("The sts assumed-role ARN doesn't include the path of the role", the review of
hashicorp/terraform-provider-aws#19957; STS's ``AssumedRoleUser.Arn`` is that session ARN),
while the role ARN an operator copies from the console does: every IAM Identity Center role
lives under ``aws-reserved/sso.amazonaws.com/``. A role's name is unique in its account whatever
its path (IAM's friendly names, reference_identifiers in the IAM user guide), so a role is
matched by its partition, account and name. An IAM user's ``userArn`` keeps its path, and any
other ARN (an assumed-role session, a federated user) is matched exactly as written.

The catalog check (``make check``) and the router both read this module, so what ``make check``
says about a listed ARN is what the router does.
"""

from __future__ import annotations

import re

_ROLE = re.compile(
    r"^arn:(?P<p>aws[a-z-]*):iam::(?P<acct>\d{12}):role/(?P<path>(?:[^/]+/)*)(?P<name>[^/]+)$"
)
_ASSUMED = re.compile(
    r"^arn:(?P<p>aws[a-z-]*):sts::(?P<acct>\d{12}):assumed-role/(?P<name>[^/]+)/.+$"
)


def match_key(arn: str) -> str:
    """The form in which ``arn`` is compared: a role (with or without a path) and its
    assumed-role sessions as ``arn:P:iam::ACCOUNT:role/NAME``; anything else unchanged."""
    if (m := _ROLE.match(arn)) is not None:
        return f"arn:{m['p']}:iam::{m['acct']}:role/{m['name']}"
    return arn


def caller_keys(arn: str) -> frozenset[str]:
    """What a caller's ARN matches: itself, and for an assumed-role session its role."""
    keys = {arn, match_key(arn)}
    if (m := _ASSUMED.match(arn)) is not None:
        keys.add(f"arn:{m['p']}:iam::{m['acct']}:role/{m['name']}")
    return frozenset(keys)


def how_matched(arn: str) -> str:
    """One sentence for ``make check``: how the router will match ``arn``."""
    if (m := _ROLE.match(arn)) is not None:
        path = f" (its path /{m['path']} is ignored: assumed-role sessions carry none)"
        return (
            f"role {m['name']!r} of account {m['acct']}, any of its sessions"
            f"{path if m['path'] else ''}"
        )
    if _ASSUMED.match(arn):
        return "this one role session only, exactly as written"
    return "exactly as written"
