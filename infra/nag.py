"""cdk-nag 3 packs on every synth, and the reviewed list of acknowledgements.

Every acknowledgement lives in ``ACKNOWLEDGEMENTS`` with the finding id and the reason, so a
new one is a visible, reviewed change (tests/infra/test_nag.py lists them). Findings that are
not acknowledged make synth fail.
"""

from __future__ import annotations

from aws_cdk import Acknowledgment, App, Stack, Token, Validations
from cdk_nag import AwsSolutionsChecks, HIPAASecurityChecks, NIST80053R5Checks
from constructs import IConstruct

#: (construct path suffix, finding id, reason). The path suffix scopes the acknowledgement to the
#: construct that needs it, never to a whole stack.
ACKNOWLEDGEMENTS: list[tuple[str, str, str]] = []


_PACKS = ("AwsSolutions", "HIPAA.Security", "NIST.800.53.R5")


def acknowledge(scope: IConstruct, finding: str, reason: str) -> None:
    """Acknowledge one finding on one construct, with the reason recorded for review.

    ``finding`` is the rule id as cdk-nag prints it, e.g. ``AwsSolutions-IAM5[Resource::*]``;
    the pack prefix the validation framework expects is added here.
    """
    pack = next((p for p in _PACKS if finding.startswith(p + "-")), None)
    if pack is None:
        raise ValueError(f"unknown cdk-nag pack in finding {finding!r}")
    if len(reason) < 40:
        raise ValueError(f"acknowledgement of {finding} needs a real reason, got {reason!r}")
    ACKNOWLEDGEMENTS.append((scope.node.path, finding, reason))
    Validations.of(scope).acknowledge(Acknowledgment(id=f"{pack}::{finding}", reason=reason))


def nag_account(stack: Stack) -> str:
    """The account as cdk-nag prints it inside an ARN the stack formed (``format_arn``): the
    literal account of a stack whose environment names one, ``<AWS::AccountId>`` otherwise.

    An acknowledgement's id must be the finding's text exactly; one written with
    ``<AWS::AccountId>`` stops matching, and synth fails, once the environment sets ``account``.
    """
    return "<AWS::AccountId>" if Token.is_unresolved(stack.account) else stack.account


def nag_arn(stack: Stack, arn: str) -> str:
    """Any ARN as cdk-nag prints it in a finding id: pseudo parameters as ``<AWS::Name>``,
    literal values as they are."""
    resolved = stack.resolve(arn)
    if isinstance(resolved, str):
        return resolved
    parts = resolved["Fn::Join"][1]
    return "".join(p if isinstance(p, str) else f"<{p['Ref']}>" for p in parts)


def add_nag_packs(app: App) -> None:
    Validations.of(app).add_plugins(
        AwsSolutionsChecks(app), HIPAASecurityChecks(app), NIST80053R5Checks(app)
    )


def checkov_skip(resource: IConstruct, **checks: str) -> None:
    """Suppress checkov checks on one CloudFormation resource, each with its reason.

    checkov reads ``Metadata.checkov.skip`` of a resource (checkov docs, "Suppressing and
    skipping policies": CloudFormation metadata ``checkov: skip: [{id, comment}]``).
    """
    for check, reason in checks.items():
        if len(reason) < 40:
            raise ValueError(f"checkov suppression {check} needs a real reason, got {reason!r}")
    cfn = resource
    existing = (cfn.get_metadata("checkov") or {}).get("skip", [])  # type: ignore[attr-defined]
    skips = [*existing, *({"id": c, "comment": r} for c, r in checks.items())]
    cfn.add_metadata("checkov", {"skip": skips})  # type: ignore[attr-defined]
