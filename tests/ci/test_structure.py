"""The house's structure, read from the code: no import circle among our modules, no function
over 120 lines outside ``benchmarks/``, and each process's environment variable names written in
one module (``contracts``), read and set through it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("config", "contracts", "infra", "lambda_proxy", "local", "ops", "runtime", "training")
MAX_FUNCTION_LINES = 120


def _modules() -> dict[str, Path]:
    out = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = path
    return out


def _module_level_imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """Our modules a file imports, at its top or inside a function (a deferred import is how a
    circle hides)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        found |= {n for n in names if n in modules}
    return found


def test_no_import_circle() -> None:
    modules = _modules()
    graph = {name: _module_level_imports(path, modules) - {name} for name, path in modules.items()}
    state: dict[str, int] = {}
    cycles = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append(" -> ".join([*stack[stack.index(nxt) :], nxt]))
            elif nxt not in state:
                visit(nxt, [*stack, nxt])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    # A package's __init__ re-exports its modules: a module importing its own package's name
    # is no circle of behaviour.
    cycles = [c for c in cycles if not any(n in PACKAGES for n in c.split(" -> "))]
    assert not cycles, cycles


def test_no_function_over_120_lines_outside_benchmarks() -> None:
    long = []
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    lines = node.end_lineno - node.lineno + 1  # type: ignore[operator]
                    if lines > MAX_FUNCTION_LINES:
                        long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({lines})")
    assert not long, long


def test_the_routing_tables_environment_names_are_written_once() -> None:
    written = [
        str(path.relative_to(ROOT))
        for package in PACKAGES
        for path in (ROOT / package).rglob("*.py")
        if re.search(r"[\"']ROUTING_TABLE_(FILE|JSON)[\"']", path.read_text())
    ]
    assert written == ["contracts/routing.py"], written
