"""The server restarts mid-run with append-only persistence on: every session resumes."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from tests.chaos import TOOLS_TOML, Client, check
from tests.conftest import make_stack
from turnstream.embedded import EmbeddedRedis


async def test_sessions_survive_a_redis_restart(tmp_path) -> None:
    server = EmbeddedRedis(data_dir=tmp_path / "redis", appendonly=True).start()
    toml = tmp_path / "tools.toml"
    toml.write_text(TOOLS_TOML)
    stack = make_stack(server.url, replay_rate=60, tools_config=str(toml))
    try:
        workdir = Path(tempfile.mkdtemp(prefix="turnstream-restart-"))
        clients = [Client(stack.url, i, workdir / f"effects-{i}.txt") for i in range(4)]
        tasks = [asyncio.create_task(c.run()) for c in clients]
        await asyncio.sleep(2.5)  # sessions are mid-turn
        await asyncio.to_thread(server.restart)
        await asyncio.wait_for(asyncio.gather(*tasks), 120)
        problems = await check(clients)
        assert problems == [], "\n".join(problems)
        assert all(p.poll() is None for p in stack.all()), "a process died with the server"
    finally:
        stack.stop()
        server.cleanup()
