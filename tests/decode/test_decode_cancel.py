"""A cancel stops the turn's generation at once: the ending sends the decoder that claimed the turn a
``CancelTurn`` note, which aborts the engine's request (the decoder's status check is only the backstop)."""

from __future__ import annotations

import asyncio

import pytest

from runtime import bus
from runtime.config import load_config
from runtime.turns import Turns
from schemas import keys
from schemas.codec import decode_event, decode_job, decode_token, encode
from schemas.events import CancelTurn, ContentDelta, StartTurn, TokenChunk
from turnstream.cli import build_engine
from workers.decode.chunks import AbortCheck
from workers.decode.turn import TurnRun
from workers.decode.worker import DecodeWorker

LONG = "word " * 4000  # minutes at the replay rate below


async def _decoder(redis_url: str, r, monkeypatch, sid: str, plain_turns: str = "parser") -> tuple[DecodeWorker,
                                                                                                 asyncio.Task]:
    """A started decoder (its own stream set up, the status check's backstop never due) and the task of
    its job generating turn 0 of a new session ``sid`` that would stream 4,000 tokens (of content: with
    ``plain_turns=decoder`` its decoder publishes them, a content run; else its token log holds them)."""
    monkeypatch.setattr(AbortCheck, "interval_s", 3600.0)
    cfg = load_config(redis_url=redis_url, engine="replay", replay_rate=20, worker_id=f"decode-{sid}",
                      plain_turns=plain_turns)
    worker = DecodeWorker(cfg, build_engine(cfg), r)
    await worker.consumer.reader.setup()  # the decoder's own stream, where its notes arrive
    await worker.engine.start()
    await Turns(r).sessions.create(sid, [{"role": "user", "content": "hi"}], meta={"replay": [LONG]},
                                   params={"max_tokens": 4000})
    job = bus.Entry(keys.DECODE_JOBS, "1-0", encode(StartTurn(sid=sid, turn=0)))
    return worker, asyncio.create_task(worker.handle(job))


async def _cancel(r, worker: DecodeWorker, sid: str) -> None:
    """Cancel turn 0 of ``sid`` and hand the decoder the one note the ending sent it."""
    assert await Turns(r).end(sid, 0, "cancelled")
    [(note_id, fields)] = await r.xrange(keys.decoder_jobs(worker.me))
    assert decode_job(fields[b"d"]) == CancelTurn(sid=sid, turn=0)
    await worker.handle(bus.Entry(keys.decoder_jobs(worker.me), note_id.decode(), fields[b"d"]))


async def _text(r, sid: str) -> str:
    """What the turn streamed: its token log's chunks, or the content events its decoder published."""
    rows = await r.xrange(keys.tokens(sid))
    chunks = "".join(e.text for e in (decode_token(f[b"d"]) for _, f in rows) if isinstance(e, TokenChunk))
    events = (decode_event(f[b"d"]) for _, f in await r.xrange(keys.events(sid)))
    return chunks + "".join(e.body.text for e in events if isinstance(e.body, ContentDelta))


@pytest.mark.parametrize("plain_turns", ["parser", "decoder"])
async def test_a_cancel_note_aborts_the_turn_without_waiting_for_the_status_check(redis_url, r, monkeypatch,
                                                                                  plain_turns: str) -> None:
    sid = f"cx-{plain_turns}"
    worker, turn = await _decoder(redis_url, r, monkeypatch, sid, plain_turns)
    try:
        for _ in range(600):  # until the turn's first chunks are out
            if len(await _text(r, sid)) >= 10:
                break
            await asyncio.sleep(0.05)
        assert (sid, 0) in worker.ctx.aborts
        await _cancel(r, worker, sid)
        await asyncio.wait_for(turn, 60)  # ended by the note, long before its tokens
    finally:
        turn.cancel()
        await worker.engine.stop()
    assert worker.ctx.aborts == {}
    assert 0 < len(await _text(r, sid)) < 200  # a few chunks, not 4,000 tokens
    # a note for a turn this decoder is not generating is acked and does nothing
    assert not await worker.ctx.cancel(sid, 0)


async def test_a_cancel_noted_while_the_turn_starts_stops_it_at_its_first_chunk(redis_url, r, monkeypatch) -> None:
    """The note can come between the claim and the first token (the turn is not generating yet): the
    turn then reads its status with its first chunk, not a backstop interval later."""
    gate, at_gate = asyncio.Event(), asyncio.Event()
    announce = TurnRun._announce

    async def held(self: TurnRun) -> None:
        at_gate.set()
        await gate.wait()
        await announce(self)

    monkeypatch.setattr(TurnRun, "_announce", held)
    worker, turn = await _decoder(redis_url, r, monkeypatch, "cy")
    try:
        await asyncio.wait_for(at_gate.wait(), 30)  # claimed, not generating yet
        await _cancel(r, worker, "cy")
        assert worker.ctx.cancelled == {("cy", 0)}
        gate.set()
        await asyncio.wait_for(turn, 60)
    finally:
        gate.set()
        turn.cancel()
        await worker.engine.stop()
    assert worker.ctx.cancelled == set() and worker.ctx.aborts == {} and worker.ctx.running == set()
    assert len(await _text(r, "cy")) < 200  # stopped with its first chunks
