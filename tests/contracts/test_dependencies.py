"""ARCHITECTURE's dependency rule, read from the import statements themselves.

The runtime ships alone in its container image and the router alone in its Lambda zip, each with
``contracts`` beside it: an import of anything else of ours works on a developer's checkout and
fails at the first request in AWS. So does a third-party import in ``contracts`` that the zip's
requirements or the image do not install.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OURS = {"config", "contracts", "infra", "lambda_proxy", "local", "ops", "runtime", "training"}
#: ARCHITECTURE's rule: what each package may import of ours. The shipped parts take only the
#: contracts; the CDK constructs never import the operations commands that drive them.
MAY_IMPORT = {
    "contracts": set(),
    "runtime": {"contracts"},
    "lambda_proxy": {"contracts"},
    "config": {"contracts"},
    "training": {"config", "contracts"},
    "infra": {"config", "contracts"},
    "ops": {"infra", "config", "contracts", "training"},
    "local": {"config", "contracts", "training", "runtime", "lambda_proxy"},
}


def _imports(package: str) -> dict[str, set[str]]:
    """Top-level modules each file of ``package`` imports (relative imports stay inside it)."""
    found: dict[str, set[str]] = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
        found[str(path.relative_to(ROOT))] = names
    return found


@pytest.mark.parametrize("package", sorted(MAY_IMPORT))
def test_each_package_imports_only_what_the_dependency_rule_allows(package: str) -> None:
    allowed = MAY_IMPORT[package] | {package}
    wrong = {
        file: sorted(names & OURS - allowed)
        for file, names in _imports(package).items()
        if names & OURS - allowed
    }
    assert not wrong, f"{package} may import {sorted(allowed)} of ours; these import more: {wrong}"


def test_contracts_import_nothing_of_ours_and_nothing_but_pydantic() -> None:
    allowed = set(sys.stdlib_module_names) | {"pydantic", "__future__", "contracts"}
    wrong = {file: sorted(names - allowed) for file, names in _imports("contracts").items()}
    assert not any(wrong.values()), wrong


def test_the_router_bundle_imports_with_nothing_else_of_ours(tmp_path: Path) -> None:
    """The bundle's own packages, imported where no other package of ours can be found (the
    venv's third-party packages stand in for the zip's aarch64 wheels)."""
    from config import load_deployment
    from infra.bundle import router_bundle

    directory, _ = router_bundle(load_deployment("dev").routing_table())
    code = tmp_path / "code"
    for package in ("lambda_proxy", "contracts"):
        shutil.copytree(directory / package, code / package)
    assert sorted(p.name for p in code.iterdir()) == ["contracts", "lambda_proxy"]
    site = next(p for p in sys.path if p.endswith("site-packages"))
    # -S: no site module, so the editable install's path hook that finds the repository is off.
    env = {
        "PATH": os.environ["PATH"],
        "PYTHONPATH": f"{code}{os.pathsep}{site}",
        "POWERTOOLS_SERVICE_NAME": "lora-router",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    probe = (
        "import sys, lambda_proxy.web, lambda_proxy.handler, lambda_proxy.openai_api\n"
        f"print(','.join(sorted({{m.split('.')[0] for m in sys.modules}} & set({sorted(OURS)!r}))))"
    )
    run = subprocess.run(
        [sys.executable, "-S", "-c", probe],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip() == "contracts,lambda_proxy"


@pytest.mark.parametrize("package", ["lambda_proxy", "runtime", "local", "training", "infra"])
def test_no_module_reaches_into_another_modules_private_names(package: str) -> None:
    """The router's doors once called ``handler._body``, ``_authorize``, ``_validate`` and
    ``_caller`` and ``_request_id``: a change to one door's private helper broke the others."""
    wrong = []
    for path in sorted((ROOT / package).rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        modules: set[str] = set()  # names bound to a module of ours
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in OURS:
                modules |= {a.asname or a.name for a in node.names}
            elif isinstance(node, ast.Import):
                modules |= {
                    a.asname for a in node.names if a.asname and a.name.split(".")[0] in OURS
                }
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in modules
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
            ):
                wrong.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.value.id}.{node.attr}")
    assert not wrong, wrong


def _module_graph(package: str) -> dict[str, set[str]]:
    """Each module of ``package`` and the modules of it that it imports, anywhere in its code
    (a function-level import is still a dependency)."""
    graph: dict[str, set[str]] = {}
    for path in sorted((ROOT / package).glob("*.py")):
        name = f"{package}.{path.stem}"
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                if node.module == package:
                    found |= {f"{package}.{a.name}" for a in node.names}
                elif node.module.startswith(f"{package}."):
                    found.add(".".join(node.module.split(".")[:2]))
            elif isinstance(node, ast.Import):
                found |= {
                    ".".join(a.name.split(".")[:2])
                    for a in node.names
                    if a.name.startswith(f"{package}.")
                }
        graph[name] = found - {name}
    return graph


@pytest.mark.parametrize("package", ["local", "lambda_proxy", "runtime", "contracts"])
def test_the_modules_of_a_package_import_each_other_without_a_circle(package: str) -> None:
    """local/platform.py and local/trainer.py once imported each other."""
    graph = _module_graph(package)
    done: set[str] = set()

    def visit(node: str, path: tuple[str, ...]) -> None:
        assert node not in path, " -> ".join((*path, node))
        if node in done:
            return
        for nxt in sorted(graph.get(node, ())):
            visit(nxt, (*path, node))
        done.add(node)

    for module in sorted(graph):
        visit(module, ())
