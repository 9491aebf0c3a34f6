"""The house rules a reader can check in one place: imports point down (no cycles, also none
closed by an import inside a function), no `_private` name crosses a module, the pure cores
import no Django, and the app roots stay small."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.architecture.import_graph import build, cycles, project_modules

ROOT = Path(__file__).resolve().parents[2]
PURE = (
    "selection.domain",
    "benchmarks.formats",
    "benchmarks.harness",
    "benchmarks.simulator",
    "benchmarks.traces",
    "benchmarks.result",
    "benchmarks.suite",
    "benchmarks.charts",
    "benchmarks.presentation",
)
MAX_ROOT_MODULES = 15


@pytest.fixture(scope="module")
def graph():
    return build(ROOT)


def test_the_project_has_no_import_cycle(graph):
    assert cycles(graph.edges) == []


def test_no_private_name_is_imported_from_another_module(graph):
    assert graph.private_imports == []


def test_the_pure_cores_import_no_django():
    offenders = []
    for name, path in project_modules(ROOT).items():
        if not name.startswith(PURE):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            modules = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            offenders += [
                f"{name}:{node.lineno} {m}" for m in modules if m.split(".")[0] in ("django", "rest_framework")
            ]
    assert offenders == []


def test_only_the_signing_package_imports_pyhanko():
    """pyHanko (and its certificate validator) stay behind selection.certificates.signing: one package to upgrade."""
    offenders = []
    for name, path in project_modules(ROOT).items():
        if name == "selection.certificates.signing" or name.startswith("selection.certificates.signing."):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            modules = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            offenders += [f"{name}:{node.lineno} {m}" for m in modules if m.split(".")[0].startswith("pyhanko")]
    assert offenders == []


@pytest.mark.parametrize("app", ["selection", "benchmarks"])
def test_an_app_root_holds_at_most_15_modules(app):
    modules = sorted(p.name for p in (ROOT / app).glob("*.py"))
    assert len(modules) <= MAX_ROOT_MODULES, modules


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_a_cycle_closed_inside_a_function_is_found(tmp_path):
    _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/services.py": "from pkg.tasks import enqueue\n",
            # a lazy import still closes the cycle
            "pkg/tasks.py": "def enqueue():\n    from pkg.services import run\n",
            "pkg/leaf.py": "import pkg.services\n",
        },
    )
    assert cycles(build(tmp_path, ("pkg",)).edges) == [["pkg.services", "pkg.tasks"]]


def test_a_private_import_from_another_module_is_found_but_a_dunder_is_not(tmp_path):
    _write(
        tmp_path,
        {
            "pkg/__init__.py": "from pkg.views import _context\n",
            "pkg/views.py": "def _context():\n    pass\n",
            "pkg/other.py": "from pkg.views import _context, __all__\n",
        },
    )
    found = build(tmp_path, ("pkg",)).private_imports
    assert found == ["pkg:1 imports pkg.views._context", "pkg.other:1 imports pkg.views._context"]


def test_a_package_importing_its_own_submodules_is_not_a_cycle(tmp_path):
    _write(
        tmp_path,
        {
            "pkg/__init__.py": "from pkg import a, b\n",
            "pkg/a.py": "from pkg.base import Format\n",
            "pkg/b.py": "from pkg.base import Format\n",
            "pkg/base.py": "class Format: ...\n",
        },
    )
    assert cycles(build(tmp_path, ("pkg",)).edges) == []
