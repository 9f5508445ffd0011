"""Decode jobs are delivered at least once: a duplicate of a job never generates its turn twice."""

from __future__ import annotations

import asyncio

from runtime import bus
from runtime.config import load_config
from runtime.session import Sessions
from schemas import keys
from schemas.codec import encode
from schemas.events import StartTurn
from turnstream.cli import build_engine
from workers.decode.worker import DecodeWorker


async def test_a_duplicate_job_read_beside_its_first_is_not_generated_twice(redis_url, r, monkeypatch) -> None:
    """Jobs of one read run concurrently; when the first job's claim reply comes back after the
    duplicate's, the duplicate must not take the decoder's own claim for an attempt that broke off
    (it did: the turn was generated twice, attempt 1 and attempt 2, seen in CI)."""
    cfg = load_config(redis_url=redis_url, engine="replay", replay_rate=2000, worker_id="decode-dup")
    worker = DecodeWorker(cfg, build_engine(cfg), r)
    await worker.engine.start()
    await Sessions(r).create("dup", [{"role": "user", "content": "hi"}], meta={"replay": ["Hello there."]})
    start, claim = worker.sessions.start_turn, worker.sessions.claim_turn
    claims, first_claimed = [], asyncio.Event()

    async def first_reply_last(sid: str, turn: int, me: str):
        claims.append("")
        if len(claims) > 1:  # the first claim runs first on the server...
            await first_claimed.wait()
            return await start(sid, turn, me)
        out = await start(sid, turn, me)
        first_claimed.set()
        await asyncio.sleep(0.3)  # ...and its reply comes back last
        return out

    async def takeover(sid: str, turn: int, me: str, dead_holder: str = ""):
        claims.append(dead_holder)
        return await claim(sid, turn, me, dead_holder)

    monkeypatch.setattr(worker.sessions, "start_turn", first_reply_last)
    monkeypatch.setattr(worker.sessions, "claim_turn", takeover)
    job = encode(StartTurn(sid="dup", turn=0))
    try:
        await asyncio.wait_for(asyncio.gather(worker.handle(bus.Entry(keys.DECODE_JOBS, "1-0", job)),
                                              worker.handle(bus.Entry(keys.DECODE_JOBS, "1-1", job))), 30)
    finally:
        await worker.engine.stop()
    assert await r.hget(keys.session("dup"), "att:0") == b"1"  # one attempt
    assert await r.hexists(keys.session("dup"), "done:0")  # and it was generated to its end
    assert claims == [""]  # the duplicate never claimed
    assert await r.hget(keys.DECODE_LOAD, "decode-dup") == b"0"  # counted up at its start, down with its end
