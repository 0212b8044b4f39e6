"""The tiered adapter cache: device slots, host memory, local disk, with LRU eviction.

An adapter is registered from a directory (the disk tier); its weights are read into host
memory (bounded by ``max_cpu_loras``) and installed into one of ``max_loras`` device slots when
a batch needs it. Eviction is least-recently-used, by slot count and by a device-memory
headroom threshold; pinned adapters and adapters in use by admitted requests are never evicted.

Thread model: registration validates on the caller's thread (disk I/O, no model access) and
then swaps the record in under the lock; only the engine thread installs weights into the
model (``acquire``), between forward passes.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from runtime.adapters import AdapterError, BaseIdentity, LoadedAdapter, PromptFormat, load_adapter
from runtime.lora import MultiLoraLinear, SlotWeights
from runtime.telemetry import Telemetry


class CapacityError(RuntimeError):
    """No device slot can be freed right now (all pinned or in use)."""


@dataclass
class Record:
    name: str
    src: str
    pinned: bool
    version: str | None
    rank: int
    alpha: float
    targets: tuple[str, ...]
    nbytes: int
    host: LoadedAdapter | None = field(default=None, repr=False)
    slot: int | None = None
    inflight: int = 0
    last_used: float = 0.0
    last_load_ms: dict[str, float] = field(default_factory=dict)
    removed: bool = False
    #: The artifact's own name, version and weights sha256 (``adapters.artifact_identity``).
    identity: dict = field(default_factory=dict)
    #: A directory the server extracted this adapter into: removed once no request uses it.
    owned_dir: Path | None = None
    #: The shape plain-text ``inputs`` are given for this adapter (None: raw text).
    prompt: PromptFormat | None = None

    @property
    def tier(self) -> str:
        if self.slot is not None:
            return "device"
        return "host" if self.host is not None else "disk"

    def describe(self) -> dict:
        return {
            "name": self.name,
            "version": self.version,
            "artifact": self.identity,
            "tier": self.tier,
            "pinned": self.pinned,
            "inflight": self.inflight,
            "rank": self.rank,
            "alpha": self.alpha,
            "targets": list(self.targets),
            "bytes": self.nbytes,
            "last_load_ms": self.last_load_ms,
            "prompt_format": "chat" if self.prompt else "raw",
            "src": self.src,
        }


MemoryProbe = Callable[[], tuple[int, int] | None]


def cuda_memory() -> tuple[int, int] | None:
    if not torch.cuda.is_available():
        return None
    free, total = torch.cuda.mem_get_info()
    return total - free, total


class AdapterCache:
    def __init__(
        self,
        *,
        base: BaseIdentity,
        layers: dict[str, MultiLoraLinear],
        device: torch.device,
        dtype: torch.dtype,
        max_loras: int,
        max_cpu_loras: int,
        vram_headroom: float,
        telemetry: Telemetry,
        memory_probe: MemoryProbe = cuda_memory,
    ) -> None:
        self.base = base
        self.layers = layers
        self.device = device
        self.dtype = dtype
        self.max_loras = max_loras
        self.max_cpu_loras = max_cpu_loras
        self.vram_headroom = vram_headroom
        self.telemetry = telemetry
        self.memory_probe = memory_probe
        self.records: dict[str, Record] = {}
        self.slots: list[Record | None] = [None] * max_loras
        self.lock = threading.RLock()

    # ------------------------------------------------------------------ registration
    def validate(self, name: str, src: Path) -> LoadedAdapter:
        """Read and check an adapter without touching the registry (caller's thread)."""
        t0 = time.perf_counter()
        # The weights stay float32 (``load_adapter`` reads them so) on any base dtype: PEFT
        # computes LoRA in float32 on a bfloat16 or float16 base (runtime.lora).
        loaded = load_adapter(name, src, self.base)
        ms = (time.perf_counter() - t0) * 1000
        self.telemetry.load_latency.labels("disk").observe(ms / 1000)
        self.telemetry.event("adapter_load", adapter=name, source="disk", target="host",
                             latency_ms=round(ms, 2), bytes=loaded.nbytes)  # fmt: skip
        return loaded

    def register(
        self, loaded: LoadedAdapter, *, pin: bool, owned_dir: Path | None = None
    ) -> tuple[Record, bool]:
        """Swap a validated adapter in; returns (record, replaced). The old one stays until now."""
        with self.lock:
            old = self.records.get(loaded.name)
            if pin and not (old and old.pinned):
                # At least one device slot stays unpinned, or every other adapter would wait
                # for a slot that never frees.
                pinned = sum(1 for r in self.records.values() if r.pinned)
                if pinned + 1 > self.max_loras - 1:
                    raise CapacityError(
                        f"cannot pin {loaded.name!r}: {pinned} adapters already pinned, and of "
                        f"the {self.max_loras} device slots (OPTION_MAX_LORAS) one stays unpinned"
                    )
            rec = Record(
                name=loaded.name, src=loaded.src, pinned=pin, version=loaded.version,
                rank=loaded.rank, alpha=loaded.alpha, targets=loaded.targets,
                nbytes=loaded.nbytes, host=loaded, last_used=time.monotonic(),
                last_load_ms={}, identity=dict(loaded.identity), owned_dir=owned_dir,
                prompt=loaded.prompt,
            )  # fmt: skip
            if old is not None:
                self._retire(old)  # the new weights go in on next use
            self.records[loaded.name] = rec
            self._trim_host()
            self._gauges()
            return rec, old is not None

    def unregister(self, name: str) -> Record:
        with self.lock:
            rec = self.records.pop(name, None)
            if rec is None:
                raise KeyError(name)
            self._retire(rec)
            self.telemetry.event("adapter_unregister", adapter=name)
            self._gauges()
            return rec

    def get(self, name: str) -> Record | None:
        with self.lock:
            return self.records.get(name)

    def pinned(self, name: str) -> bool:
        with self.lock:
            rec = self.records.get(name)
            return rec is not None and rec.pinned and not rec.removed

    def list(self) -> list[dict]:
        with self.lock:
            return [r.describe() for r in self.records.values()]

    def tier_counts(self) -> dict[str, int]:
        with self.lock:
            counts = {"device": 0, "host": 0, "disk": 0}
            for r in self.records.values():
                counts[r.tier] += 1
            return counts

    # ------------------------------------------------------------------ engine side
    def hold(self, name: str) -> Record:
        """Admit a request: count it in flight so its adapter cannot be evicted or dropped."""
        with self.lock:
            rec = self.records.get(name)
            if rec is None:
                raise KeyError(name)
            rec.inflight += 1
            return rec

    def release(self, rec: Record) -> None:
        with self.lock:
            rec.inflight = max(0, rec.inflight - 1)
            rec.last_used = time.monotonic()
            if rec.removed and rec.inflight == 0:
                self._retire(rec)

    def can_fit(self, names: set[str]) -> bool:
        """Whether these adapters could be device-resident together right now."""
        with self.lock:
            needed = [n for n in names if n in self.records and self.records[n].slot is None]
            free = self.slots.count(None)
            evictable = sum(
                1
                for r in self.slots
                if r is not None and r.name not in names and self._evictable(r)
            )
            return len(needed) <= free + evictable

    def acquire(self, recs: list[Record]) -> tuple[dict[str, float], dict[str, Exception]]:
        """Make every adapter device-resident (engine thread): load ms per adapter, and the
        adapters that could not be loaded (their reload from disk failed) with the reason. One
        adapter's failure is that adapter's alone; the others are still loaded."""
        out: dict[str, float] = {}
        failed: dict[str, Exception] = {}
        with self.lock:
            keep = {r.name for r in recs}
            for rec in recs:
                if rec.name in out or rec.name in failed:
                    continue
                try:
                    out[rec.name] = self._ensure_device(rec, keep)
                except (AdapterError, OSError, ValueError) as exc:
                    failed[rec.name] = exc
                    keep.discard(rec.name)
            return out, failed

    def slot_of(self, rec: Record) -> int:
        assert rec.slot is not None
        return rec.slot

    # ------------------------------------------------------------------ internals
    def _evictable(self, rec: Record | None) -> bool:
        return rec is not None and (rec.removed or not rec.pinned) and rec.inflight == 0

    def _retire(self, rec: Record) -> None:
        """Drop a replaced or unregistered adapter, once no admitted request uses it."""
        rec.removed = True
        if rec.inflight == 0:
            self._clear_slot(rec)
            rec.host = None
            if rec.owned_dir is not None:
                shutil.rmtree(rec.owned_dir, ignore_errors=True)
                rec.owned_dir = None

    def _ensure_device(self, rec: Record, keep: set[str]) -> float:
        if rec.slot is not None:
            rec.last_used = time.monotonic()
            self.telemetry.cache_events.labels("hit", "device").inc()
            return 0.0
        t0 = time.perf_counter()
        source = "host"
        if rec.host is None:
            source = "disk"
            self.telemetry.cache_events.labels("miss", "host").inc()
            rec.host = self.validate(rec.name, Path(rec.src))
        else:
            self.telemetry.cache_events.labels("hit", "host").inc()
        self.telemetry.cache_events.labels("miss", "device").inc()
        self._make_headroom(keep)
        slot = self._free_slot(keep)
        for module, (a, b, scale) in rec.host.weights.items():
            self.layers[module].set_slot(
                slot, SlotWeights(a.to(self.device), b.to(self.device), scale)
            )
        self.slots[slot] = rec
        rec.slot = slot
        rec.last_used = time.monotonic()
        ms = (time.perf_counter() - t0) * 1000
        rec.last_load_ms[source] = round(ms, 3)
        self.telemetry.load_latency.labels(source).observe(ms / 1000)
        self.telemetry.event("adapter_promote", adapter=rec.name, source=source, target="device",
                             slot=slot, latency_ms=round(ms, 3))  # fmt: skip
        self._trim_host()
        self._gauges()
        return ms

    def _free_slot(self, keep: set[str]) -> int:
        if None in self.slots:
            return self.slots.index(None)
        victims = [
            r for r in self.slots if r is not None and r.name not in keep and self._evictable(r)
        ]
        if not victims:
            raise CapacityError("every device slot holds a pinned or in-use adapter")
        victim = min(victims, key=lambda r: r.last_used)
        self._evict(victim, reason="slots")
        assert victim.slot is None
        return self.slots.index(None)

    def _make_headroom(self, keep: set[str]) -> None:
        """Evict LRU device adapters while device memory use is above the headroom threshold."""
        while True:
            usage = self.memory_probe()
            if usage is None or usage[1] == 0 or usage[0] / usage[1] <= self.vram_headroom:
                return
            victims = [
                r for r in self.slots if r is not None and r.name not in keep and self._evictable(r)
            ]
            if not victims:
                return
            self._evict(min(victims, key=lambda r: r.last_used), reason="headroom")

    def _evict(self, rec: Record, reason: str) -> None:
        slot = rec.slot
        self._clear_slot(rec)
        self.telemetry.cache_events.labels("eviction", "device").inc()
        self.telemetry.event("adapter_evict", adapter=rec.name, source="device", target=rec.tier,
                             slot=slot, reason=reason)  # fmt: skip

    def _clear_slot(self, rec: Record) -> None:
        if rec.slot is None:
            return
        for layer in self.layers.values():
            layer.set_slot(rec.slot, None)
        self.slots[rec.slot] = None
        rec.slot = None

    def _trim_host(self) -> None:
        """Keep at most ``max_cpu_loras`` adapters in host memory (device-resident excluded)."""
        hosted = [r for r in self.records.values() if r.host is not None and r.slot is None]
        excess = len(hosted) - self.max_cpu_loras
        for rec in sorted(hosted, key=lambda r: r.last_used)[: max(0, excess)]:
            if rec.pinned:
                continue
            rec.host = None
            self.telemetry.cache_events.labels("eviction", "host").inc()
            self.telemetry.event("adapter_evict", adapter=rec.name, source="host", target="disk",
                                 reason="host_slots")  # fmt: skip

    def _gauges(self) -> None:
        for tier, n in self.tier_counts().items():
            self.telemetry.adapters.labels(tier).set(n)
