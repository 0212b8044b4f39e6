"""Every Redis key the router writes, in one place: the response cache, the quotas, a canary's
switches and windows, and a shadow canary's paired sums. Whoever reads or writes one takes its
name from here, so two parts never disagree on a name, and a version bump (``v1``, ``v2``) is
one edit. The cache's eviction policy (``volatile-lru``) takes only keys with a TTL: a canary's
switches are written without one, so they are never evicted.
"""

from __future__ import annotations

from dataclasses import dataclass


def cache_prefix(adapter: str) -> str:
    """Every cached answer of one adapter starts with this (to drop them all at once)."""
    return f"lora:v1:{adapter}:"


def quota_bucket(tenant: str, scope: str, kind: str) -> str:
    """A tenant's token bucket: ``scope`` an adapter or ``*`` (every adapter), ``kind`` ``req``
    or ``tok``."""
    return f"lora:quota:v2:{tenant}:{scope}:{kind}"


@dataclass(frozen=True)
class CanaryKeys:
    """The keys of one canary version (an adapter's ``canary.version``)."""

    base: str

    @classmethod
    def of(cls, adapter: str, version: str) -> CanaryKeys:
        return cls(f"lora:canary:v1:{adapter}:{version}")

    def switch(self, name: str) -> str:
        """A decision: ``off`` (rolled back), ``split`` (promoted), ``held`` (a promotion the
        catalog holds); no TTL."""
        return f"{self.base}:{name}"

    @property
    def off(self) -> str:
        return self.switch("off")

    @property
    def split(self) -> str:
        return self.switch("split")

    @property
    def read(self) -> str:
        """Set once the canary's decisions were read back from the Model Registry."""
        return f"{self.base}:read"

    @property
    def draws(self) -> str:
        """The count of new sessions drawn, for the weighted split."""
        return f"{self.base}:n"

    def session(self, digest: str) -> str:
        """A session key's assignment (stable or canary), per tenant."""
        return f"{self.base}:s:{digest}"

    def window(self, index: int) -> str:
        """The 5xx rule's counts in one window of ``window_s``."""
        return f"{self.base}:w:{index}"

    def window_callers(self, index: int) -> str:
        return f"{self.window(index)}:callers"

    @property
    def pairs(self) -> str:
        """The shadow test's sums over every pair."""
        return f"{self.base}:pairs"

    @property
    def voice_prefix(self) -> str:
        """Each voice's own sums are ``voice_prefix + who``."""
        return f"{self.base}:pairs:"

    def voice_pairs(self, who: str) -> str:
        return f"{self.voice_prefix}{who}"

    @property
    def callers(self) -> str:
        """The voices that paired an input, with their pair counts."""
        return f"{self.base}:callers"

    @property
    def seen(self) -> str:
        """The inputs each voice has paired (a voice pairs an input once)."""
        return f"{self.base}:seen"
