"""The release's steps, in the only order that works (``make release``): each a module with its
probe (``missing``) and its action (``run``) side by side. Adding a step is one module and one
line here."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

from ops.steps import adapters, approval, deploy, image, smoke, stacks, weights
from ops.steps.base import Release


@dataclass(frozen=True)
class Step:
    name: str
    summary: str
    missing: Callable[[Release], list[str]]
    run: Callable[[Release], None]

    @classmethod
    def of(cls, module: ModuleType) -> Step:
        return cls(module.NAME, module.SUMMARY, module.missing, module.run)


STEPS: tuple[Step, ...] = tuple(
    Step.of(m) for m in (stacks, image, weights, adapters, approval, deploy, smoke)
)
NAMES: tuple[str, ...] = tuple(s.name for s in STEPS)


def named(name: str) -> Step:
    for step in STEPS:
        if step.name == name:
            return step
    raise ValueError(f"no release step {name!r}: one of {', '.join(NAMES)}")
