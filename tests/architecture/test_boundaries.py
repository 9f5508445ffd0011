"""Stages meet through ``schemas/`` and the shared runtime, never by importing each other.

    schemas/        imports nothing of ours
    runtime/        schemas, runtime
    workers/decode  schemas, runtime, workers.decode      (likewise parser, tools)
    gateway/        schemas, runtime, gateway
    turnstream/, bench/, training/   orchestration: anything

Every import counts, including those inside functions.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
OURS = ("schemas", "runtime", "workers", "gateway", "turnstream", "bench", "training")
ALLOWED = {
    "schemas": ("schemas",),
    "runtime": ("schemas", "runtime"),
    "workers/decode": ("schemas", "runtime", "workers.decode"),
    "workers/parser": ("schemas", "runtime", "workers.parser"),
    "workers/tools": ("schemas", "runtime", "workers.tools"),
    "gateway": ("schemas", "runtime", "gateway"),
}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return {m for m in found if m.split(".")[0] in OURS}


@pytest.mark.parametrize("part", list(ALLOWED))
def test_no_stage_imports_another(part: str) -> None:
    bad = []
    for path in sorted((REPO / part).rglob("*.py")):
        rel = str(path.relative_to(REPO))
        for mod in _imports(path):
            if not any(mod == a or mod.startswith(a + ".") for a in ALLOWED[part]):
                bad.append(f"{rel} imports {mod}")
    assert not bad, "\n".join(bad)


def _module_of(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _edges(path: Path, modules: set[str]) -> set[str]:
    """The modules of ours that ``path`` imports (``from pkg import mod`` counts as importing ``pkg.mod``)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name in modules}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            subs = {f"{node.module}.{a.name}" for a in node.names} & modules
            out |= subs or ({node.module} & modules)
    return out


def test_no_module_imports_itself_through_others() -> None:
    """No import circles (``TYPE_CHECKING`` imports included): a module that needs a part of another
    gets that part (a narrow context object, a protocol), so each can be read and tested alone."""
    paths = {_module_of(p): p for top in OURS for p in (REPO / top).rglob("*.py")}
    graph = {m: _edges(p, set(paths)) - {m} for m, p in paths.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(m: str) -> None:  # Tarjan's strongly connected components
        index[m] = low[m] = len(index)
        stack.append(m)
        for n in graph[m]:
            if n not in index:
                visit(n)
                low[m] = min(low[m], low[n])
            elif n in stack:
                low[m] = min(low[m], index[n])
        if low[m] == index[m]:
            part = []
            while True:
                n = stack.pop()
                part.append(n)
                if n == m:
                    break
            if len(part) > 1:
                circles.append(sorted(part))

    for m in sorted(graph):
        if m not in index:
            visit(m)
    assert not circles, "\n".join(" <-> ".join(c) for c in circles)
