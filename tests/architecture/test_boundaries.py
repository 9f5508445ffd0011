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
