"""What the local platform serves: the base it builds once, and which trained adapter archives
are current (``training.reuse``), pass their gate, or must train."""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from config import Deployment
from config.layout import archives_dir
from contracts.manifests import AdapterManifest, BaseManifest
from local.options import Options, PlatformError
from training.reuse import cached_adapter


def base_dir(dep: Deployment, opts: Options) -> Path:
    return opts.artifacts / "base" / dep.base_key


def build_base(dep: Deployment, opts: Options) -> BaseManifest:
    """Build or reuse the environment's local base; its ``base_manifest.json``."""
    from training.base import build_local

    if dep.base.source != "local":
        raise PlatformError(
            f"environment {dep.env.name!r} serves {dep.base.model_id} from the hub; the local "
            "platform runs only local bases (nothing can be downloaded from a hub here)"
        )
    directory = base_dir(dep, opts)
    opts.log(f"[1/4] base model {dep.base.model_id}@{dep.base.revision}")
    t0 = time.perf_counter()
    try:
        build_local(dep.base.model_id, directory, log=lambda m: opts.log(f"      {m}"))
    except KeyError as exc:
        raise PlatformError(str(exc.args[0])) from None
    manifest = BaseManifest.read(directory)
    if (manifest.model_id, manifest.revision) != (dep.base.model_id, dep.base.revision):
        raise PlatformError(
            f"{directory} holds {manifest.model_id}@{manifest.revision}, but the "
            f"catalog's {dep.base_key} is {dep.base.model_id}@{dep.base.revision}"
        )
    opts.log(f"      ready in {time.perf_counter() - t0:.1f} s")
    return manifest


@dataclass
class AdapterPlan:
    """Which adapters serve now, which train, and which stay off (their gate failed)."""

    ready: dict[str, Path] = field(default_factory=dict)
    todo: list[tuple[str, str]] = field(default_factory=list)
    held: dict[str, str] = field(default_factory=dict)
    #: Ready adapters that did not pass their gate, served only with ``serve_unpublishable``.
    unpublishable: list[str] = field(default_factory=list)


def plan_adapters(dep: Deployment, opts: Options, base_manifest: BaseManifest) -> AdapterPlan:
    out = archives_dir(opts.artifacts / "adapters", dep.base_key)
    plan = AdapterPlan()
    for a in dep.adapters:
        why = cached_adapter(dep, a.name, out, base_manifest, opts.max_steps)
        if why is not None:
            plan.todo.append((a.name, why))
            continue
        ev = AdapterManifest.read(out / a.name).eval or {}
        if ev.get("publishable") or opts.serve_unpublishable:
            plan.ready[a.name] = out / f"{a.name}.tar.gz"
            if not ev.get("publishable"):
                plan.unpublishable.append(a.name)
        else:
            plan.held[a.name] = "not publishable: " + "; ".join(ev.get("failures") or [])
    return plan


def quiet_libraries() -> None:
    """Progress here is one line per step of the platform; the libraries' bars and deprecation
    notices (about arguments TRL passes, not ours) would bury it."""
    import datasets as hf_datasets
    import transformers

    warnings.filterwarnings("ignore", category=FutureWarning, module=r"transformers\.")
    hf_datasets.disable_progress_bars()
    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
