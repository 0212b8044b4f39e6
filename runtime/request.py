"""A generation request as the scheduler, the sampler and the engine see it.

The server builds a ``GenRequest``, the scheduler admits it, the engine prefills and decodes
it, the sampler picks its tokens; ``done`` tells the server it finished (or failed:
``error``). ``cancel`` may be called from any thread: the row leaves the batch at the next
decode step.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from runtime.cache import Record


class EngineError(Exception):
    """A request failed; ``status`` is the HTTP status the server answers with."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class GenParams:
    max_new_tokens: int = 128
    min_new_tokens: int = 0
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    repetition_penalty: float = 1.0
    stop: tuple[str, ...] = ()
    seed: int | None = None
    do_sample: bool = False

    @property
    def greedy(self) -> bool:
        return not self.do_sample or self.temperature == 0


class Completion(threading.Event):
    """A request's done flag that also wakes the asyncio side without a waiting thread: the
    server awaits a future that ``set`` resolves, instead of holding a pool thread per request
    (which starved registrations behind open streams)."""

    def __init__(self) -> None:
        super().__init__()
        self._callbacks: list[Callable[[], None]] = []
        self._guard = threading.Lock()

    def add_callback(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` once set (at once if it already is); it runs on the setting thread."""
        with self._guard:
            if not self.is_set():
                self._callbacks.append(fn)
                return
        fn()

    def set(self) -> None:
        with self._guard:
            super().set()
            callbacks, self._callbacks = self._callbacks, []
        for fn in callbacks:
            fn()


@dataclass(eq=False)
class GenRequest:
    adapter: str | None
    input_ids: list[int]
    params: GenParams
    on_token: Callable[[str], None] | None = None
    arrival: float = field(default_factory=time.perf_counter)
    deadline: float = 0.0
    id: int = 0
    # filled by the engine
    record: Record | None = None
    output_ids: list[int] = field(default_factory=list)
    text: str = ""
    emitted: int = 0
    finish_reason: str | None = None
    timings: dict[str, float] = field(default_factory=dict)
    error: EngineError | None = None
    done: Completion = field(default_factory=Completion)
    generator: torch.Generator | None = None
    cancelled: bool = False

    def cancel(self) -> None:
        """The client went away: stop spending decode steps on this row (any thread)."""
        self.cancelled = True

    def result(self) -> dict[str, Any]:
        return {
            "generated_text": self.text,
            "adapter": self.adapter,
            "adapter_version": self.record.version if self.record else None,
            # What the container actually served: the artifact's manifest name and version and
            # its weights' sha256 (None for the base model).
            "artifact": self.record.identity if self.record else None,
            "finish_reason": self.finish_reason,
            "usage": {"input_tokens": len(self.input_ids), "output_tokens": len(self.output_ids)},
            "timings_ms": {k: round(v, 3) for k, v in self.timings.items()},
        }
