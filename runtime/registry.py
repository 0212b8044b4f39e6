"""The adapter registry: which adapters are registered, under which vLLM LoRA id, and where
vLLM holds each one.

SageMaker registers an adapter component's directory with ``POST /adapters``; the runtime
checks it (``runtime.adapters``) and gives it to vLLM as a ``LoRARequest``. The tiers are
vLLM's:

- **device**: the ``max_loras`` slots a batch's adapters occupy, preallocated at max rank.
  vLLM fills them per step and does not report which adapters hold them, so no adapter is
  reported in this tier;
- **host**: vLLM's LRU cache of loaded adapters in host memory (``max_cpu_loras``), which
  ``list_loras`` reports; a pinned adapter is loaded back into it when vLLM evicts it;
- **disk**: registered and extracted, not loaded; vLLM loads it from ``src`` when a request
  needs it, evicting the least recently used host adapter.

Every registration gets a fresh LoRA id *and* a fresh vLLM LoRA name. vLLM's prefix cache keys a
block by the adapter's name and path (``kv_cache_utils._gen_lora_extra_hash_keys``); a new
version registered under the same name and directory would otherwise be served the previous
version's cached KV blocks (vLLM issues 42125, 30931). The replaced version stays in vLLM until
its last in-flight request ends, then it is removed and its directory deleted.
"""

from __future__ import annotations

import itertools
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contracts.manifests import PromptFormat
from runtime.adapters import LoadedAdapter


class CapacityError(RuntimeError):
    """The request would leave no device slot for unpinned adapters."""


@dataclass
class AdapterRecord:
    name: str
    lora_id: int
    #: The name vLLM knows this registration by: ``NAME@ID`` (never reused, see the module doc).
    lora_name: str
    src: str
    pinned: bool
    version: str | None
    rank: int
    alpha: float
    targets: tuple[str, ...]
    nbytes: int
    #: The artifact's own name, version and weights sha256 (``adapters.artifact_identity``).
    identity: dict = field(default_factory=dict)
    #: The shape plain-text ``inputs`` (and chats without a system turn) get for this adapter.
    prompt: PromptFormat | None = None
    #: The JSON schema the adapter's manifest names as its requests' default, if any.
    json_schema: dict[str, Any] | None = None
    inflight: int = 0
    removed: bool = False
    last_used: float = 0.0
    last_load_ms: dict[str, float] = field(default_factory=dict)
    #: A directory the server extracted this adapter into: removed once no request uses it.
    owned_dir: Path | None = None

    def describe(self, tier: str) -> dict[str, Any]:
        return {
            "name": self.name,
            "version": self.version,
            "artifact": self.identity,
            "tier": tier,
            "pinned": self.pinned,
            "inflight": self.inflight,
            "rank": self.rank,
            "alpha": self.alpha,
            "targets": list(self.targets),
            "bytes": self.nbytes,
            "last_load_ms": self.last_load_ms,
            "prompt_format": "chat" if self.prompt else "raw",
            "json_schema": self.json_schema is not None,
            "lora_id": self.lora_id,
            "src": self.src,
        }


class AdapterRegistry:
    """Names to records, in-flight counts and retirement; vLLM calls are the engine's."""

    def __init__(self, *, max_cpu_loras: int) -> None:
        self.max_cpu_loras = max_cpu_loras
        self.records: dict[str, AdapterRecord] = {}
        #: Replaced or unregistered records whose requests are still running.
        self.retiring: list[AdapterRecord] = []
        #: The LoRA ids vLLM last reported in host memory (``list_loras``).
        self.host_ids: set[int] = set()
        self._ids = itertools.count(1)
        self.lock = threading.RLock()

    def check_pin(self, name: str, pin: bool) -> None:
        """Pins keep adapters in vLLM's host tier; at least one of its ``max_cpu_loras``
        places stays unpinned, so the others can still be loaded for their requests."""
        with self.lock:
            old = self.records.get(name)
            if not pin or (old is not None and old.pinned):
                return
            pinned = sum(1 for r in self.records.values() if r.pinned)
            if pinned + 1 > self.max_cpu_loras - 1:
                raise CapacityError(
                    f"cannot pin {name!r}: {pinned} adapters already pinned, and of the "
                    f"{self.max_cpu_loras} host places (OPTION_MAX_CPU_LORAS) one stays unpinned"
                )

    def new_record(
        self,
        loaded: LoadedAdapter,
        *,
        pin: bool,
        owned_dir: Path | None,
        json_schema: dict[str, Any] | None,
    ) -> AdapterRecord:
        lora_id = next(self._ids)
        return AdapterRecord(
            name=loaded.name,
            lora_id=lora_id,
            lora_name=f"{loaded.name}@{lora_id}",
            src=loaded.src,
            pinned=pin,
            version=loaded.version,
            rank=loaded.rank,
            alpha=loaded.alpha,
            targets=loaded.targets,
            nbytes=loaded.nbytes,
            identity=dict(loaded.identity),
            prompt=loaded.prompt,
            json_schema=json_schema,
            last_used=time.monotonic(),
            owned_dir=owned_dir,
        )

    def swap_in(self, rec: AdapterRecord) -> AdapterRecord | None:
        """Make ``rec`` the adapter under its name; returns the record it replaced (retiring)."""
        with self.lock:
            old = self.records.get(rec.name)
            self.records[rec.name] = rec
            if old is not None:
                old.removed = True
                self.retiring.append(old)
            return old

    def remove(self, name: str) -> AdapterRecord:
        with self.lock:
            rec = self.records.pop(name, None)
            if rec is None:
                raise KeyError(name)
            rec.removed = True
            self.retiring.append(rec)
            return rec

    def get(self, name: str) -> AdapterRecord | None:
        with self.lock:
            return self.records.get(name)

    def hold(self, name: str) -> AdapterRecord:
        """Admit a request: counted in flight, so its adapter is not removed under it."""
        with self.lock:
            rec = self.records.get(name)
            if rec is None:
                raise KeyError(name)
            rec.inflight += 1
            return rec

    def release(self, rec: AdapterRecord) -> None:
        with self.lock:
            rec.inflight = max(0, rec.inflight - 1)
            rec.last_used = time.monotonic()

    def drained(self) -> list[AdapterRecord]:
        """Retiring records no request uses any more: the caller removes them from vLLM."""
        with self.lock:
            done = [r for r in self.retiring if r.inflight == 0]
            self.retiring = [r for r in self.retiring if r.inflight > 0]
            return done

    def tier(self, rec: AdapterRecord) -> str:
        return "host" if rec.lora_id in self.host_ids else "disk"

    def list(self) -> list[dict[str, Any]]:
        with self.lock:
            return [r.describe(self.tier(r)) for r in self.records.values()]

    def tier_counts(self) -> dict[str, int]:
        with self.lock:
            counts = {"device": 0, "host": 0, "disk": 0}
            for r in self.records.values():
                counts[self.tier(r)] += 1
            return counts


def delete_owned(rec: AdapterRecord) -> None:
    if rec.owned_dir is not None:
        shutil.rmtree(rec.owned_dir, ignore_errors=True)
        rec.owned_dir = None
