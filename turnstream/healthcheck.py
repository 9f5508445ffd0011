"""``turnstream healthcheck``: is this container's turnstream process alive? (Docker's HEALTHCHECK)

The process is the container's PID 1 (``turnstream gateway`` or ``turnstream worker KIND``): a
gateway must answer ``/healthz`` on its port; a worker must have its heartbeat in Redis.
"""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

from runtime import bus
from runtime.config import Config
from schemas import keys


def main_command(pid: int = 1) -> list[str]:
    """The arguments after ``turnstream`` of the process ``pid``."""
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return []
    words = [a.decode() for a in args if a]
    for i, w in enumerate(words):
        if w in ("gateway", "worker"):
            return words[i:]
    return words


async def _heartbeat_exists(cfg: Config, kind: str, pid: int) -> bool:
    worker = cfg.worker_id or f"{kind}-{socket.gethostname()}-{pid}"
    r = bus.connect(cfg.redis_url)
    try:
        return bool(await r.exists(keys.heartbeat(kind, worker)))
    finally:
        await r.aclose()


def healthcheck(cfg: Config, pid: int = 1) -> int:
    """0 when the container's process is alive and working, 1 otherwise (with a line saying why)."""
    cmd = main_command(pid)
    if cmd[:1] == ["gateway"]:
        import httpx

        port = cmd[cmd.index("--port") + 1] if "--port" in cmd[:-1] else cfg.port
        try:
            ok = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=3).status_code == 200
        except httpx.HTTPError as exc:
            print(f"gateway not answering on port {port}: {exc}")
            return 1
        return 0 if ok else 1
    if cmd[:1] == ["worker"] and len(cmd) > 1:
        if asyncio.run(_heartbeat_exists(cfg, cmd[1], pid)):
            return 0
        print(f"no heartbeat from this {cmd[1]} worker")
        return 1
    print(f"not a turnstream gateway or worker: {' '.join(cmd)!r}")
    return 1
