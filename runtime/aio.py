"""The event loop every turnstream process runs on: uvloop (libuv), unless configured otherwise.

uvloop runs the same asyncio programs with its loop, transports and timers in C; the stdlib
loop is kept as ``loop=asyncio`` for platforms without uvloop and for side-by-side measurement.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

def run(main: Coroutine[Any, Any, Any], loop: str = "uvloop") -> Any:
    """``asyncio.run(main)`` on the named loop (uvloop falls back to asyncio where it is not installed)."""
    if loop == "uvloop":
        try:
            import uvloop
        except ImportError:
            pass
        else:
            return uvloop.run(main)
    return asyncio.run(main)
