"""Lambda execution environments for the local gateway: buffered requests in parallel, each
environment a process of its own serving one request at a time, as Lambda runs the function.

Powertools keeps the resolver's current event in a class attribute, and its metrics' buffer
and its logger's keys per process, so one process can run the router's handler for only one
request at a time (``lambda_proxy.web.HANDLER_LOCK``). On Lambda that is no limit: each
execution environment serves one request, and Lambda starts more of them, up to the
function's reserved concurrency. The gateway used to be one environment for everyone, so a
tenant keeping 8 buffered requests in flight put a quiet tenant's request behind all 8 of them
(16-token requests went from 1.5-4.2 s to 61-83 s). Here each buffered request goes
to a pool of worker processes, started on demand (a cold start) up to ``size``, each
configured as the function configures itself: the same variables, the same routing table and
endpoint, the same Redis.

Environments share only what the deployed function's environments share, Redis (the response
cache, the quotas, the canaries' state), so the pool needs one; without Redis the gateway's
in-process cache is one process's and the gateway stays one environment.

The standard library's ``ProcessPoolExecutor`` is the pool (spawned, not forked: the gateway
runs threads and an event loop); what is written here is only the environment's set-up.
"""

from __future__ import annotations

import concurrent.futures
import functools
import multiprocessing
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: A function's environments on this machine: each is a Python process with boto3 and
#: Powertools (about 150 MB), and two cores gain nothing from more waiting on the endpoint.
MAX_ENVIRONMENTS = 8


@dataclass(frozen=True)
class Setting:
    """What an environment is configured from (the gateway's own configuration)."""

    routing_table: str
    endpoint_url: str
    region: str
    redis_url: str
    state_dir: str | None
    #: The function's variables (limits, quotas, Powertools), as the gateway's process has them.
    environ: tuple[tuple[str, str], ...]


def _start(setting: Setting) -> None:
    """An environment's init phase: the function's configuration, read once per process."""
    os.environ.update(dict(setting.environ))
    from local.router import configure_router, redis_client, training_state

    store = redis_client(setting.redis_url)
    if store is None:
        raise RuntimeError(f"the router's environments need Redis at {setting.redis_url}")
    state_dir = Path(setting.state_dir) if setting.state_dir else None
    if state_dir is not None:
        from lambda_proxy import usage
        from local.usage import keeper

        usage.SINKS.append(keeper(state_dir))
    configure_router(
        store,
        routing_table=Path(setting.routing_table),
        endpoint_url=setting.endpoint_url,
        region=setting.region,
        availability=functools.partial(training_state, state_dir),
    )


def _invoke(event: dict[str, Any], context: Any) -> dict[str, Any]:
    from lambda_proxy.web import in_process

    return in_process(event, context)


class Environments:
    """``lambda_proxy.web.BUFFERED`` for the local gateway: a buffered request runs in one of
    ``size`` environments; ``restart`` replaces them (the catalog changed) and lets the
    requests they are serving finish."""

    def __init__(self, setting: Setting, size: int) -> None:
        if size < 1:
            raise ValueError(f"environments must be at least 1, not {size}")
        self.setting, self.size = setting, min(size, MAX_ENVIRONMENTS)
        self._lock = threading.Lock()
        self._pool = self._new_pool()

    def _new_pool(self) -> concurrent.futures.ProcessPoolExecutor:
        return concurrent.futures.ProcessPoolExecutor(
            max_workers=self.size,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_start,
            initargs=(self.setting,),
        )

    def __call__(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        with self._lock:
            pool = self._pool
        try:
            return pool.submit(_invoke, event, context).result()
        except concurrent.futures.process.BrokenProcessPool:
            # An environment died (or could not start): Lambda answers such an invocation
            # with an error and starts a fresh environment for the next one.
            self.restart()
            return {
                "statusCode": 502,
                "headers": {"Content-Type": "application/json"},
                "body": '{"message": "Internal server error"}',
            }

    def restart(self, setting: Setting | None = None) -> None:
        with self._lock:
            old, self.setting = self._pool, setting or self.setting
            self._pool = self._new_pool()
        old.shutdown(wait=False)

    def close(self) -> None:
        with self._lock:
            self._pool.shutdown(wait=False, cancel_futures=True)
