"""The tools of ``bench agent``: each sleeps its call's latency and returns its result, both from the trace.

The same functions run on every side: in turnstream's tool workers (``tools_toml`` names them as
Python tools) and in the bench's own client loop (``registry()``, the same ``Registry`` class), so a
call validates, runs and renders alike everywhere.  ``TURNSTREAM_AGENT_TRACE`` names the trace file;
each run appends ``{ref, start, end}`` (wall clock) to ``stamps-<pid>.jsonl`` under
``TURNSTREAM_AGENT_STAMPS``: when each tool really started and ended, whoever ran it.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import time
from pathlib import Path
from typing import Any, Callable

from workers.tools.registry import Registry
from workers.tools.spec import tool

TRACE_ENV, STAMPS_ENV = "TURNSTREAM_AGENT_TRACE", "TURNSTREAM_AGENT_STAMPS"


@functools.cache
def _calls(path: str) -> dict[str, tuple[float, str]]:
    trace = json.loads(Path(path).read_text())
    return {c["arguments"]["ref"]: (c["latency_s"], c["result"])
            for t in trace["tasks"] for turn in t["turns"] for c in turn["calls"]}


async def _run(ref: str) -> str:
    latency, result = _calls(os.environ[TRACE_ENV])[ref]
    start = time.time()
    await asyncio.sleep(latency)
    stamps = os.environ.get(STAMPS_ENV)
    if stamps:
        with open(Path(stamps) / f"stamps-{os.getpid()}.jsonl", "a") as f:
            f.write(json.dumps({"ref": ref, "start": start, "end": time.time()}) + "\n")
    return result


_DESCRIPTIONS = {
    "read_file": "Read a file of the repository and return its text (line numbers included).",
    "search_code": "Search the repository for a symbol or a phrase; returns matching lines with their paths.",
    "run_tests": "Run the test suite (or the tests under a path) and return the summary and failures.",
    "list_dir": "List a directory of the repository, with file sizes.",
    "grep_logs": "Search the service logs for a pattern; returns the matching log lines.",
    "edit_file": "Apply an edit to a file and return the resulting diff.",
    "web_fetch": "Fetch a documentation page and return its text.",
    "query_db": "Run a read-only query against the staging database and return the rows.",
}


def _tool(name: str, description: str) -> Callable[..., Any]:
    """A tool ``name(ref, target)`` that replays its call from the trace (a module attribute: tools_toml)."""
    async def fn(ref: str, target: str) -> str:
        return await _run(ref)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = description
    return tool(idempotent=True)(fn)


TOOLS = tuple(_tool(name, doc) for name, doc in _DESCRIPTIONS.items())
globals().update({fn.__name__: fn for fn in TOOLS})  # bench.agent_tools:read_file for the tool workers


@functools.cache
def registry() -> Registry:
    """The workload's tools, for a client that runs them itself."""
    return Registry(TOOLS)


def tools_toml() -> str:
    """A tools file (``--tools-config``) with exactly these tools, as Python tools of the tool workers."""
    lines = ["[registry]", "builtins = false", ""]
    for fn in TOOLS:
        lines += [f"[python.{fn.__name__}]", f'target = "bench.agent_tools:{fn.__name__}"', "idempotent = true", ""]
    return "\n".join(lines)


def read_stamps(folder: Path) -> dict[str, dict[str, float]]:
    """Every stamp written under ``folder``, by call ref (the last if a call ran twice)."""
    out: dict[str, dict[str, float]] = {}
    for f in folder.glob("stamps-*.jsonl"):
        for line in f.read_text().splitlines():
            if line.strip():
                s = json.loads(line)
                out[s["ref"]] = s
    return out


def clear_stamps(folder: Path) -> None:
    for f in folder.glob("stamps-*.jsonl"):
        f.unlink()
