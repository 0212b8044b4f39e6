"""A shadow canary's decision, written into its version's Model Registry record.

``training.publish`` registers every version of an adapter as a model package in the adapter's
group (``contracts.registry``); ``make release`` deploys only approved ones. When the paired
quality test (``lambda_proxy.shadow``) promotes a canary or rolls it back, the router writes
the decision and its evidence into that version's package, so the record that approved the
version also says how it did against stable on live inputs:

- ``ModelLifeCycle``: stage ``shadow-canary``, status ``promoted``, ``held`` or
  ``rolled-back``, and the decision's reason as the stage's description (up to 1,024
  characters of any text);
- customer metadata, one key per figure: ``shadow-decision``, ``shadow-pairs``,
  ``shadow-look``, ``shadow-alpha``, ``shadow-z``, ``shadow-decided-at`` and, per signal,
  ``shadow-SIGNAL`` (``stable 0.950 canary 0.900 diff -0.050 lower -0.080 upper -0.020
  margin 0.05``). A value holds at most 256 characters of letters, digits, spaces and
  ``_ . : / = + - @`` (botocore's sagemaker model, shapes ``CustomerMetadataKey`` and
  ``CustomerMetadataValue``), which rules out JSON. AWS's API reference does not say whether
  ``UpdateModelPackage`` merges ``CustomerMetadataProperties`` into the package's or replaces
  them, so the update sends the package's own metadata (its compatibility tuple and archive
  identity, which the release reads back) with these keys: the result is the same either way.

A version with no package (a local platform, a canary published without a registry) is logged
and skipped: the decision itself was already made and logged, and the Redis switch holds its
evidence. Written on boto3's SageMaker client, as ``training.registry`` is.
"""

from __future__ import annotations

import re
import threading
import time
from typing import Any

from contracts.registry import METADATA_MAX, SHADOW_STAGE, SHADOW_STATUS, find
from lambda_proxy.shadow import Decision

#: ModelLifeCycle.StageDescription's limit (botocore's sagemaker model).
DESCRIPTION_MAX = 1024
#: Characters a metadata value may hold (CustomerMetadataValue's pattern), besides letters,
#: digits and spaces.
_UNSAFE = re.compile(r"[^\w\s.:/=+\-@]")


def _safe(text: str) -> str:
    return _UNSAFE.sub(" ", text)[:256].strip() or "-"


def metadata(decision: Decision, status: str) -> dict[str, str]:
    """The decision's figures as customer metadata (see the module's docstring)."""
    out = {
        "shadow-decision": status,
        "shadow-pairs": decision.pairs_text,
        "shadow-look": str(decision.look),
        "shadow-alpha": f"{decision.alpha:.6g}",
        "shadow-z": f"{decision.z:.4f}",
        "shadow-decided-at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    for b in decision.bounds:
        out[f"shadow-{b.signal}"] = _safe(
            f"stable {b.stable_mean:.3f} canary {b.canary_mean:.3f} diff {b.diff_mean:+.3f} "
            f"lower {b.lower:+.3f} upper {b.upper:+.3f} margin {b.margin:g}"
        )
    return out


def rule_metadata(reason: str, status: str) -> dict[str, str]:
    """A 5xx rule's rollback as customer metadata: the rule and its reason."""
    return {
        "shadow-decision": status,
        "shadow-rule": "5xx",
        "shadow-reason": _safe(reason),
        "shadow-decided-at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def overwrites(status: str, recorded: str | None) -> bool:
    """Whether a decision may be written over what the package records: anything over no
    decision; a rollback over a promotion (a promoted or held canary the 5xx rule or a later
    look rolls back: read back as promoted, it would serve again); nothing over a rollback,
    which is final for its version, nor one promotion over another."""
    if recorded is None:
        return True
    return recorded != SHADOW_STATUS["rollback"] and status == SHADOW_STATUS["rollback"]


class DecisionConflictError(Exception):
    """A package records a decision already; a second one is not written over it."""

    def __init__(self, arn: str, recorded: str, new: str) -> None:
        super().__init__(f"{arn} already records {recorded!r}; {new!r} is not written over it")
        self.arn, self.recorded, self.new = arn, recorded, new


class Recorder:
    """Writes decisions into the Model Registry through a SageMaker control-plane client,
    made on first use (most router processes never decide anything)."""

    def __init__(self, region: str | None, client: Any = None) -> None:
        self._region = region
        self._client = client
        self._lock = threading.Lock()

    @property
    def client(self) -> Any:
        with self._lock:
            if self._client is None:
                import boto3
                from botocore.config import Config

                # Short: a record runs on one of the process's two mirror threads.
                self._client = boto3.client(
                    "sagemaker",
                    region_name=self._region,
                    config=Config(
                        connect_timeout=2,
                        read_timeout=10,
                        retries={"mode": "standard", "total_max_attempts": 3},
                    ),
                )
            return self._client

    def decided(self, group: str, version: str) -> str | None:
        """The decision recorded for ``version`` (a ``SHADOW_STATUS`` value), or None: what a
        router reads back when Redis holds no switch for the canary (a cold start after the
        cache restarted empty)."""
        package = find(self.client, group, version)
        return package.decision if package is not None else None

    def record(self, group: str, version: str, decision: Decision | str, status: str) -> str | None:
        """Write the decision into ``version``'s package in ``group``; its ARN, or None when
        the version has no package. ``decision``: the paired test's, or the 5xx rule's reason
        (a rollback). A package that records a decision already keeps it
        unless this one may be written over it (``overwrites``: only a rollback over a
        promotion), else ``DecisionConflictError``. Errors are the caller's (it logs and
        counts them)."""
        if isinstance(decision, str):
            figures, reason = rule_metadata(decision, status), decision
        else:
            figures, reason = metadata(decision, status), decision.reason
        package = find(self.client, group, version)
        if package is None:
            return None
        if not overwrites(status, package.decision):
            raise DecisionConflictError(package.arn, package.decision or "", status)
        properties = {**package.metadata, **figures}
        if len(properties) > METADATA_MAX:
            raise ValueError(
                f"{package.arn} would hold {len(properties)} metadata entries, over "
                f"UpdateModelPackage's {METADATA_MAX}"
            )
        self.client.update_model_package(
            ModelPackageArn=package.arn,
            ModelLifeCycle={
                "Stage": SHADOW_STAGE,
                "StageStatus": status,
                "StageDescription": reason[:DESCRIPTION_MAX],
            },
            CustomerMetadataProperties=properties,
        )
        return package.arn
