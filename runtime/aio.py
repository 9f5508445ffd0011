"""The event loop every turnstream process runs on: uvloop (libuv), unless configured otherwise.

uvloop runs the same asyncio programs with its loop, transports and timers in C; the stdlib
loop is kept as ``loop=asyncio`` for platforms without uvloop and for side-by-side measurement.

Every process also spaces out the collections of Python's youngest generation (``gc_young``):
a streamed token allocates a few dozen short-lived objects in each stage, and at Python's default
of 700 allocations the collector ran every few tokens (``tune_gc``).
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Coroutine
from typing import Any

def tune_gc(young: int) -> None:
    """Collect the youngest generation every ``young`` net allocations (the older ones as before)."""
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(young, older, oldest)


def run(main: Coroutine[Any, Any, Any], loop: str = "uvloop", gc_young: int | None = None) -> Any:
    """``asyncio.run(main)`` on the named loop (uvloop falls back to asyncio where it is not installed),
    the collector tuned first when ``gc_young`` is given."""
    if gc_young is not None:
        tune_gc(gc_young)
    if loop == "uvloop":
        try:
            import uvloop
        except ImportError:
            pass
        else:
            return uvloop.run(main)
    return asyncio.run(main)
