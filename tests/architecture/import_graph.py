"""The project's import graph, read with `ast` (no module is imported): every `import` and
`from ... import` in the non-test modules, at the top or inside a function, so that a cycle
closed by an import inside a function still counts as a cycle.

A module reached only through its parent package (importing `a.b.c` runs `a/b/__init__.py`)
is not an edge: a package that imports its own submodules is not a cycle.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

PACKAGES = ("config", "selection", "benchmarks")
SKIP_PARTS = {"migrations", "__pycache__"}


@dataclass
class ImportGraph:
    edges: dict[str, set[str]] = field(default_factory=dict)
    private_imports: list[str] = field(default_factory=list)  # "module:line imports other._name"


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules(root: Path, packages: tuple[str, ...] = PACKAGES) -> dict[str, Path]:
    modules = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            if not SKIP_PARTS & set(path.relative_to(root).parts):
                modules[module_name(root, path)] = path
    return modules


def _resolve(name: str, modules: dict[str, Path], importer: str, level: int) -> str | None:
    if level:
        base = importer.split(".")
        package = base if modules.get(importer, Path()).name == "__init__.py" else base[:-1]
        name = ".".join(package[: len(package) - level + 1] + ([name] if name else []))
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def build(root: Path, packages: tuple[str, ...] = PACKAGES) -> ImportGraph:
    modules = project_modules(root, packages)
    graph = ImportGraph(edges={name: set() for name in modules})
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            targets: list[tuple[str, int]] = []
            if isinstance(node, ast.Import):
                targets = [(alias.name, 0) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                for alias in node.names:
                    submodule = f"{base}.{alias.name}" if base else alias.name
                    resolved_sub = _resolve(submodule, modules, name, node.level)
                    if resolved_sub and resolved_sub.endswith(alias.name):
                        targets.append((submodule, node.level))  # `from pkg import module`
                        continue
                    targets.append((base, node.level))
                    if alias.name.startswith("_") and not alias.name.startswith("__"):
                        owner = _resolve(base, modules, name, node.level)
                        if owner and owner != name:
                            graph.private_imports.append(f"{name}:{node.lineno} imports {owner}.{alias.name}")
            for target, level in targets:
                resolved = _resolve(target, modules, name, level)
                if resolved and resolved != name and (level or target.split(".")[0] in packages):
                    graph.edges[name].add(resolved)
    return graph


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found
