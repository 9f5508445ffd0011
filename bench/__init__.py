"""Benchmarks, each runnable as ``turnstream bench NAME``; ``all`` runs every one.

Each module exposes ``main(argv) -> int``, compares against the alternative side by side in
one run, prints its figures, and writes JSON, a markdown table and a PNG under ``--out``.
"""

from __future__ import annotations

import importlib
import sys

BENCHES = ("parser", "engine", "serve", "agent", "dispatch", "overlap", "load", "routing", "reads", "grammar",
           "grammar_libs")


def run_bench(name: str, argv: list[str]) -> int:
    names = BENCHES if name == "all" else (name,)
    rc = 0
    for n in names:
        if n not in BENCHES:
            print(f"turnstream bench: unknown benchmark {n!r}; known: {', '.join(BENCHES)}, all", file=sys.stderr)
            return 2
        try:
            module = importlib.import_module(f"bench.{n}")
        except ModuleNotFoundError as exc:
            print(f"turnstream bench {n}: not available ({exc}); install the bench extra: "
                  "pip install 'turnstream[bench]'", file=sys.stderr)
            rc = rc or 1
            continue
        print(f"== bench {n} ==", flush=True)
        rc = module.main(argv) or rc
    return rc
