"""The decoder's housekeeping.  Adoption finds dead decoders in their registry, never by a scan of
the keyspace: it moves only theirs, keeps a dead one registered (and adopting) through the grace,
then forgets it.  The barrier sweep reads the turns waiting at their barrier (never the sessions
that are generating) at once and acts only where it must: an overdue client call gets its error
result, a completed turn that was never continued is; a turn seen continued leaves its index."""

from __future__ import annotations

import asyncio
import time

import pytest

from runtime import bus
from runtime.barrier import Arrival
from runtime.config import load_config
from runtime.turns import Turns
from schemas import keys
from schemas.codec import decode_job, encode
from schemas.events import ContinueTurn
from turnstream.cli import build_engine
from workers.decode.housekeeping import Housekeeping, grace_s
from workers.decode.worker import DecodeWorker

CFG = load_config()


@pytest.fixture
def no_scan(r, monkeypatch):
    """The client ``r``, on which any SCAN fails the test."""
    def scanned(*args, **kwargs):
        raise AssertionError("adoption scanned the keyspace")

    monkeypatch.setattr(r, "scan_iter", scanned)
    monkeypatch.setattr(r, "scan", scanned)
    return r


async def _decoder(r, worker: str, *, last_beat: float, alive: bool, jobs: int = 1) -> list[bytes]:
    """A decoder as its beats leave it: registered, a heartbeat while alive, ``jobs`` queued for it."""
    await r.zadd(keys.DECODERS, {worker: last_beat})
    if alive:
        await r.set(keys.decoder_heartbeat(worker), b"{}", px=CFG.heartbeat_ttl_ms)
    return [await _queue(r, worker, i) for i in range(jobs)]


async def _queue(r, worker: str, turn: int) -> bytes:
    job = encode(ContinueTurn(sid=worker, turn=turn))
    await bus.add(r, keys.decoder_jobs(worker), job)
    return job


async def _shared(r) -> list[bytes]:
    return [f[bus.FIELD] for _, f in await r.xrange(keys.DECODE_JOBS)]


async def _left(r, worker: str) -> list[bytes]:
    return [f[bus.FIELD] for _, f in await r.xrange(keys.decoder_jobs(worker))]


async def test_a_decoder_registers_with_its_beats_and_its_stream_is_adopted_once_it_stops(redis_url, no_scan) -> None:
    r = no_scan
    cfg = load_config(redis_url=redis_url, engine="replay", worker_id="decode-gone")
    gone = DecodeWorker(cfg, build_engine(cfg), r)
    await gone.heartbeat.beat()
    beat = await r.zscore(keys.DECODERS, "decode-gone")
    assert beat is not None and time.time() - beat < 5
    job = await _queue(r, "decode-gone", 0)
    await gone.heartbeat.stop()  # as its run() ends: its member stays for the others
    await Housekeeping(cfg, r, "decode-me", Turns(r)).adopt_orphans()
    assert await _shared(r) == [job] and await _left(r, "decode-gone") == []
    assert await r.zscore(keys.DECODERS, "decode-gone") is not None  # registered through the grace


async def test_only_dead_decoders_are_adopted_and_a_late_append_is_adopted_next_pass(no_scan) -> None:
    r, now = no_scan, time.time()
    mine = await _decoder(r, "me", last_beat=now, alive=True)
    live = await _decoder(r, "live", last_beat=now, alive=True)
    dead = await _decoder(r, "dead", last_beat=now - 5, alive=False, jobs=2)
    housekeeping = Housekeeping(CFG, r, "me", Turns(r))
    await housekeeping.adopt_orphans()
    assert await _shared(r) == dead and await _left(r, "dead") == []
    assert await _left(r, "me") == mine and await _left(r, "live") == live
    late = await _queue(r, "dead", 7)  # a gateway that saw its heartbeat just before it lapsed
    await housekeeping.adopt_orphans()
    assert await _shared(r) == dead + [late] and await _left(r, "dead") == []
    assert await r.zcard(keys.DECODERS) == 3


async def test_a_dead_decoder_is_forgotten_once_its_last_beat_is_older_than_the_grace(no_scan) -> None:
    r, now = no_scan, time.time()
    old = await _decoder(r, "old", last_beat=now - grace_s(CFG) - 1, alive=False)
    recent = await _decoder(r, "recent", last_beat=now - grace_s(CFG) + 30, alive=False)
    await Housekeeping(CFG, r, "me", Turns(r)).adopt_orphans()
    assert sorted(await _shared(r)) == sorted(old + recent)  # the old one's last jobs are adopted first
    assert [w.decode() for w in await r.zrange(keys.DECODERS, 0, -1)] == ["recent"]
    assert not await r.exists(keys.decoder_jobs("old"))
    assert await r.exists(keys.decoder_jobs("recent"))  # emptied, kept for a late append


async def test_adoption_costs_a_few_commands_whatever_the_number_of_keys(r) -> None:
    pipe = r.pipeline(transaction=False)
    for i in range(3000):  # ended sessions' keys, kept for session_ttl_s
        pipe.hset(keys.session(f"x{i}"), "status", "ended")
    await pipe.execute()
    dead = await _decoder(r, "dead", last_beat=time.time(), alive=False)
    await _decoder(r, "live", last_beat=time.time(), alive=True)
    await r.config_resetstat()
    await Housekeeping(CFG, r, "me", Turns(r)).adopt_orphans()
    stats = await r.info("commandstats")
    assert await _shared(r) == dead
    assert "cmdstat_scan" not in stats
    assert sum(s["calls"] for s in stats.values()) < 15, stats


async def test_the_sweep_answers_overdue_calls_and_continues_unsent_turns_only(r) -> None:
    turns = Turns(r)
    for sid in ("quiet", "waiting", "unsent"):
        await turns.sessions.create(sid, [{"role": "user", "content": "hi"}], max_turns=4)
    await turns.barrier.awaiting_client("waiting", 0, 0, "call_0_0", "ask_user", "{}")
    assert await turns.barrier.turn_end("waiting", 0, 1) == Arrival.RECORDED
    await turns.sessions.record_message("waiting", 0, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_0_0", "type": "function", "function": {"name": "ask_user", "arguments": "{}"}}]})
    await turns.sessions.record_message("unsent", 0, {"role": "assistant", "content": "x"})
    assert await turns.barrier.turn_end("unsent", 0, 0) == Arrival.COMPLETED  # ...and its completer died
    cfg = load_config(client_tool_timeout_s=0.0, sweep_after_s=0.001)
    await asyncio.sleep(0.01)
    await Housekeeping(cfg, r, "d1", turns).sweep()
    results = await turns.barrier.results("waiting", 0)
    assert [res["is_error"] for res in results] == [True] and "did not return a result" in results[0]["content"]
    jobs = [decode_job(f[bus.FIELD]) for _, f in await r.xrange(keys.DECODE_JOBS)]
    assert ContinueTurn(sid="unsent", turn=0) in jobs and ContinueTurn(sid="waiting", turn=0) in jobs
    assert not any(j.sid == "quiet" for j in jobs)
    assert not await turns.barrier.unsent("unsent", 0, older_than_s=0.0)
    await asyncio.sleep(0.01)  # the sweep's lock lapses
    await Housekeeping(cfg, r, "d1", turns).sweep()  # both were continued: they leave the index
    assert await turns.barrier.waiting() == []


async def test_the_sweep_reads_the_waiting_turns_not_the_generating_sessions(r) -> None:
    turns = Turns(r)
    for i in range(300):  # generating, or done with their tools
        await turns.sessions.create(f"g{i}", [{"role": "user", "content": "hi"}], max_turns=4)
    await turns.barrier.turn_end("w", 0, 1)  # waiting for its tool's result
    await r.zadd(keys.WAITING_TURNS, {"gone:3": time.time() - 3600, "young:0": time.time()})  # no barrier
    await r.config_resetstat()
    await Housekeeping(CFG, r, "d1", turns).sweep()
    stats = await r.info("commandstats")
    assert sum(s["calls"] for s in stats.values()) < 15, stats  # not two per session: 600
    assert sorted(m for m, _ in await turns.barrier.waiting()) == [b"w:0", b"young:0"]  # an expired one left
