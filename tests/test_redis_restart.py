"""The server restarts mid-run with append-only persistence on: every session resumes."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from tests.chaos import TOOLS_TOML, Client, check, finish_all
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
        finished = asyncio.create_task(finish_all(clients, 120))
        await asyncio.sleep(2.5)  # sessions are mid-turn
        await asyncio.to_thread(server.restart)
        await finished
        problems = await check(clients)
        assert problems == [], "\n".join(problems)
        assert all(p.poll() is None for p in stack.all()), "a process died with the server"
    finally:
        stack.stop()
        server.cleanup()


async def test_requests_while_redis_is_down_get_a_503_to_retry(tmp_path) -> None:
    """Not a 500: the broker being away (a restart, a cluster master failing over) is a 503 with
    Retry-After, in the API's error shape, and the same request works once it is back."""
    import httpx

    server = EmbeddedRedis(data_dir=tmp_path / "redis", appendonly=True).start()
    stack = make_stack(server.url)
    try:
        body = {"messages": [{"role": "user", "content": "hi"}], "replay": ["Hello."]}
        async with httpx.AsyncClient(base_url=stack.url, timeout=30) as http:
            assert (await http.post("/v1/sessions", json=body)).status_code == 201
            await asyncio.to_thread(server.stop)
            down = await http.post("/v1/sessions", json=body)
            assert down.status_code == 503 and down.headers["retry-after"] == "1", down.text
            assert down.json()["error"]["code"] == "redis_unavailable"
            chat = await http.post("/v1/chat/completions", json={"model": "tiny-agent", **body})
            assert chat.status_code == 503 and chat.json()["error"]["code"] == "redis_unavailable", chat.text
            await asyncio.to_thread(server.start)
            for _ in range(100):  # the gateway's clients reconnect on their next command
                again = await http.post("/v1/sessions", json=body)
                if again.status_code != 503:
                    break
                await asyncio.sleep(0.2)
            assert again.status_code == 201, again.text
    finally:
        stack.stop()
        server.cleanup()
