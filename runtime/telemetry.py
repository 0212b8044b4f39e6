"""Prometheus metrics and the live trace (one JSON log line per adapter load/promotion/eviction).

Each server owns its own ``CollectorRegistry`` so several servers (tests, benchmarks) can live
in one process. The trace is also kept in a bounded ring buffer that ``GET /trace`` serves,
which is what the playground's live-trace panel polls.
"""

from __future__ import annotations

import collections
import contextlib
import json
import logging
import os
import threading
import time
from typing import Any

from prometheus_client import (
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

log = logging.getLogger("runtime.trace")

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class Telemetry:
    def __init__(self, trace_capacity: int = 2000) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "lora_requests", "Invocations by adapter and outcome", ["adapter", "status"], registry=r
        )
        self.latency = Histogram(
            "lora_request_latency_seconds",
            "End-to-end invocation latency",
            ["adapter"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.tokens = Counter("lora_tokens", "Tokens by adapter", ["adapter", "kind"], registry=r)
        self.load_latency = Histogram(
            "lora_adapter_load_seconds",
            "Adapter load latency by source tier",
            ["tier"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.cache_events = Counter(
            "lora_adapter_cache_events",
            "Adapter cache hits, misses and evictions",
            ["event", "tier"],
            registry=r,
        )
        self.adapters = Gauge("lora_adapters", "Registered adapters by tier", ["tier"], registry=r)
        self.device_memory = Gauge(
            "lora_device_memory_bytes", "Accelerator memory", ["kind"], registry=r
        )
        self.host_memory = Gauge("lora_host_memory_bytes", "Resident set size", registry=r)
        self.queue_depth = Gauge(
            "lora_queue_depth", "Requests admitted and not finished", registry=r
        )
        self.stopped = Counter(
            "lora_rows_stopped",
            "Requests aborted before finishing, by reason",
            ["reason"],
            registry=r,
        )
        self.first_token = Histogram(
            "lora_time_to_first_token_seconds",
            "From arrival to the first generated token",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self._trace: collections.deque[dict[str, Any]] = collections.deque(maxlen=trace_capacity)
        self._seq = 0
        self._lock = threading.Lock()

    def event(self, event: str, **fields: Any) -> dict[str, Any]:
        """Record one live-trace event: a JSON log line plus the ring buffer."""
        with self._lock:
            self._seq += 1
            record = {"seq": self._seq, "ts": round(time.time(), 3), "event": event, **fields}
            self._trace.append(record)
        log.info(json.dumps(record, default=str))
        return record

    def trace(self, since: int = 0, limit: int = 200) -> list[dict[str, Any]]:
        with self._lock:
            return [e for e in self._trace if e["seq"] > since][-limit:]

    def render(self) -> bytes:
        self.host_memory.set(host_rss_bytes())
        return generate_latest(self.registry)

    def render_with_engine(self) -> bytes:
        """This server's metrics and vLLM's: its ``PrometheusStatLogger`` registers ``vllm:*``
        in prometheus_client's global ``REGISTRY`` (with the process collectors); the names
        never meet ours (``lora_*``)."""
        return self.render() + generate_latest(REGISTRY)


def drop_unbounded_vllm_metrics(llm: object) -> int:
    """Unregister vLLM's ``vllm:lora_requests_info``; how many gauges were dropped.

    Its labels are the comma-joined, ordered names of the adapters with a waiting or running
    request (``vllm/v1/metrics/loggers.py``, PrometheusStatLogger), so every new mix of adapters
    is a child series that is never removed: memory and scrape size grow without bound under
    diverse traffic, against this server's own rule of bounded labels. vLLM's ``record`` skips a
    gauge that is None; what the gauge meant to say, per adapter, is in this server's own
    ``lora_*`` metrics. Upstream has deprecated the metric (vLLM PR #45411)."""
    manager = getattr(llm, "logger_manager", None)
    dropped = 0
    for stat_logger in getattr(manager, "stat_loggers", None) or []:
        gauge = getattr(stat_logger, "gauge_lora_info", None)
        if gauge is None:
            continue
        with contextlib.suppress(KeyError):
            REGISTRY.unregister(gauge)
        stat_logger.gauge_lora_info = None
        dropped += 1
    return dropped


def host_rss_bytes() -> int:
    """Resident set size of this process, from /proc (Linux, the container's OS)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def host_total_bytes() -> int:
    """The memory the kernel reports in /proc/meminfo (the host's, also inside a container)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def gpu_memory() -> tuple[int, int] | None:
    """(used, total) bytes of GPU 0 from NVML, or None without it. vLLM's engine process holds
    the device; asking torch here would create a second CUDA context in the server process."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        info = pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(0))
    except pynvml.NVMLError:
        return None
    return int(info.used), int(info.total)
