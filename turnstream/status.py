"""``turnstream status``: the live processes of each kind, from their heartbeats, with their load."""

from __future__ import annotations

import time
from typing import Any

from runtime import bus
from runtime.heartbeat import live

_ORDER = ("gateway", "decode", "parser", "tools")
_LOAD = {"decode": ("engine", "turns", "running", "waiting", "free_blocks", "pinned_sessions", "tokens_out"),
         "parser": ("turns",), "tools": ("pool", "running", "max_jobs"), "gateway": ("port", "subscribers")}


def render(beats: dict[str, dict[str, Any]], now: float) -> str:
    """A table of the live processes, kind by kind."""
    rows = sorted(beats.values(), key=lambda b: (_ORDER.index(b.get("kind", "tools")) if b.get("kind") in _ORDER
                                                  else 9, b.get("worker", "")))
    lines = [f"{'kind':<8} {'process':<36} {'seen':>6}  load"]
    for b in rows:
        kind = b.get("kind", "?")
        load = " ".join(f"{k}={b[k]}" for k in _LOAD.get(kind, ()) if k in b)
        lines.append(f"{kind:<8} {str(b.get('worker', '?')):<36} {now - float(b.get('t', now)):>5.1f}s  {load}")
    counts = {k: sum(1 for b in rows if b.get("kind") == k) for k in _ORDER}
    lines.append("live: " + ", ".join(f"{n} {k}" for k, n in counts.items()))
    return "\n".join(lines)


async def status(redis_url: str) -> int:
    """Print the table; exit 1 when no decoder is live (nothing can generate), 2 without a Redis URL."""
    if not redis_url:
        print("turnstream status: give --redis-url (or TURNSTREAM_REDIS_URL): the deployment's Redis")
        return 2
    r = bus.connect(redis_url)
    try:
        beats = await live(r)
    finally:
        await r.aclose()
    print(render(beats, time.time()))
    return 0 if any(b.get("kind") == "decode" for b in beats.values()) else 1
