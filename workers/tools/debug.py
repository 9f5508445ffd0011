"""DEBUG tools for tests and benchmarks; never registered unless a tools file names them::

    [registry]
    include_debug = true                        # the built-in debug_sleep

    [python.append_line]                        # a non-idempotent tool with a visible side effect
    target = "workers.tools.debug:append_line"

    [python.probe]                              # reports when it started (bench dispatch)
    target = "workers.tools.debug:probe"
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path

from workers.tools.registry import ToolError, tool


@tool(timeout_s=30.0, idempotent=False)
async def append_line(path: str, line: str, seconds: float = 0.0) -> str:
    """DEBUG: append a line to a file under the temp directory, then wait some seconds.

    Args:
        path: the file, inside the system temp directory
        line: the text to append (a newline is added)
        seconds: how long to wait after appending
    """
    target = Path(path).resolve()
    if not target.is_relative_to(Path(tempfile.gettempdir()).resolve()):
        raise ToolError(f"path {path!r} is outside the temp directory")
    with target.open("a") as f:
        f.write(line + "\n")
    await asyncio.sleep(seconds)
    return f"appended to {target.name}"


@tool(timeout_s=5.0, idempotent=True)
async def probe(tag: str = "") -> str:
    """DEBUG: return the wall-clock time at which this call started (seconds since the epoch).

    Args:
        tag: ignored; lets calls differ
    """
    return repr(time.time())
