"""One gateway process relays 1,000 concurrent session subscriptions (WebSocket clients in
this process), through its one shared reader, each event to each client exactly once."""

from __future__ import annotations

import asyncio
import json
import resource

import httpx
import redis.asyncio as aioredis
import websockets
from gateway_harness import GwStack, event_bytes

from schemas import keys
from schemas.events import ContentDelta, SessionEnded
from runtime.session import Sessions

GATEWAY_KINDS = ("gateway",)
N_SESSIONS = 1000
N_EVENTS = 4  # per session, then session.ended


def _raise_fd_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 4 * N_SESSIONS:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8 * N_SESSIONS), hard))


def _gauges(url: str) -> dict[str, float]:
    text = httpx.get(url + "/metrics").text
    return {ln.split(" ")[0]: float(ln.split(" ")[1]) for ln in text.splitlines() if ln.startswith("turnstream_relay")}


async def _subscribe(url: str, opened: asyncio.Semaphore) -> websockets.ClientConnection:
    async with opened:
        return await websockets.connect(url, open_timeout=60, ping_interval=None)


async def _drain(ws: websockets.ClientConnection) -> list[dict]:
    async with ws:
        return [json.loads(frame) async for frame in ws]


async def _publish(r: aioredis.Redis, sids: list[str]) -> dict[str, list[str]]:
    pipe = r.pipeline(transaction=False)
    for sid in sids:
        for i in range(N_EVENTS):
            pipe.xadd(keys.events(sid), {b"d": event_bytes(sid, 0, i + 1, ContentDelta(text=f"{sid}:{i}"))})
        pipe.xadd(keys.events(sid), {b"d": event_bytes(sid, 0, N_EVENTS + 1, SessionEnded(reason="stop"))})
    ids = [i.decode() for i in await pipe.execute()]
    per = N_EVENTS + 1
    return {sid: ids[k * per:(k + 1) * per] for k, sid in enumerate(sids)}


async def test_one_gateway_relays_a_thousand_concurrent_subscriptions(gw: GwStack) -> None:
    _raise_fd_limit()
    r = aioredis.Redis.from_url(gw.cfg.redis_url)
    sessions = Sessions(r)
    sids = [f"scale{i:04d}" for i in range(N_SESSIONS)]
    for sid in sids:  # session records only: the events come from this test, not from workers
        await sessions.create(sid, [{"role": "user", "content": "hi"}])
    opened = asyncio.Semaphore(100)
    conns = await asyncio.gather(*[_subscribe(f"{gw.ws}/v1/sessions/{sid}/ws", opened) for sid in sids])
    readers = [asyncio.create_task(_drain(ws)) for ws in conns]
    for _ in range(200):  # every subscription is registered with the relay before anything is published
        gauges = _gauges(gw.url)
        if gauges["turnstream_relay_subscribers"] == N_SESSIONS:
            break
        await asyncio.sleep(0.05)
    assert gauges["turnstream_relay_subscribers"] == N_SESSIONS
    assert gauges["turnstream_relay_watched_sessions"] == N_SESSIONS
    expected = await _publish(r, sids)
    received = await asyncio.wait_for(asyncio.gather(*readers), 120)
    for sid, events in zip(sids, received, strict=True):
        assert [e["id"] for e in events] == expected[sid], sid
        assert [e["body"].get("text") for e in events[:-1]] == [f"{sid}:{i}" for i in range(N_EVENTS)]
        assert events[-1]["body"]["type"] == "session.ended"
    assert all(ws.close_code == 1000 for ws in conns)
    final = _gauges(gw.url)
    assert final["turnstream_relay_subscribers"] == 0 and final["turnstream_relay_dropped_subscribers_total"] == 0
    await r.aclose()
