"""``Turns.end``: a turn's fold, its ``session.ended``, the final status and the keys' TTLs in one
script; the first ending of a turn wins and the conversation holds the turn once."""

from __future__ import annotations

import json

from runtime.session import SessionMode, Sessions, Status
from runtime.turns import Turns
from schemas import keys
from schemas.codec import decode_event, decode_job
from schemas.events import CancelTurn, SessionEnded

MSGS = [{"role": "user", "content": "hi"}]
ANSWER = {"role": "assistant", "content": "hello", "raw": "hello"}


async def _endings(r, sid: str) -> list[str]:
    """The reasons of the ``session.ended`` events in ``sid``'s log."""
    rows = await r.xrange(keys.events(sid))
    return [ev.body.reason for ev in (decode_event(f[b"d"]) for _, f in rows) if isinstance(ev.body, SessionEnded)]


async def test_an_ending_folds_publishes_and_expires_once(r) -> None:
    turns = Turns(r, ttl_s=600)
    await turns.sessions.create("s", MSGS)
    assert not await r.exists(keys.WAITING_TURNS)  # a session that generates is nothing to the sweep
    info = await turns.sessions.get("s")
    assert await turns.end("s", 0, "stop", "hello", info=info, parsed=ANSWER)
    assert await turns.sessions.messages("s") == [*MSGS, ANSWER]
    assert await _endings(r, "s") == ["stop"]
    assert (await turns.sessions.get("s")).status is Status.ENDED
    for key in (keys.session("s"), keys.messages("s"), keys.events("s")):
        assert 0 < await r.ttl(key) <= 600, key
    # a second ending of the turn (a cancel racing the parser) publishes nothing and folds nothing again
    assert not await turns.end("s", 0, "cancelled", parsed=ANSWER)
    assert not await turns.end("s", 0, "cancelled")
    assert await turns.sessions.messages("s") == [*MSGS, ANSWER]
    assert await _endings(r, "s") == ["stop"]
    assert (await turns.sessions.get("s")).status is Status.ENDED


async def test_an_ending_without_the_parsers_message_reads_the_recorded_one(r) -> None:
    turns = Turns(r)
    await turns.sessions.create("c", MSGS)
    assert await turns.end("c", 0, "cancelled")  # cancelled before the parser recorded anything
    assert await turns.sessions.messages("c") == MSGS
    assert (await turns.sessions.get("c")).status is Status.CANCELLED
    await turns.sessions.record_message("c", 0, ANSWER)  # the parser finishes after the cancel
    assert not await turns.end("c", 0, "stop")  # the cancel stays the turn's ending...
    assert await turns.sessions.messages("c") == [*MSGS, ANSWER]  # ...and the turn is folded
    assert await _endings(r, "c") == ["cancelled"]


async def test_a_oneshot_session_is_never_indexed_and_keeps_its_callers_calls(r) -> None:
    turns = Turns(r)
    sessions: Sessions = turns.sessions
    await sessions.create("o", MSGS, mode=SessionMode.ONESHOT, client_tools=["lookup"])
    assert not await r.exists(keys.WAITING_TURNS)  # nothing for the sweep: one turn, no barrier
    call = {"id": "call_0_0", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
    message = {"role": "assistant", "content": None, "raw": "<call>", "tool_calls": [call]}
    assert await turns.end("o", 0, "tool_calls", info=await sessions.get("o"), parsed=message)
    [folded] = (await sessions.messages("o"))[1:]
    assert folded["tool_calls"] == [call]  # the caller answers it in its next request
    assert json.loads(await r.hget(keys.session("o"), "conv_turn")) == 0


async def test_a_cancel_tells_the_decoder_generating_the_turn_and_a_plain_end_tells_nobody(r) -> None:
    turns = Turns(r)
    for sid in ("x", "y", "z"):
        await turns.sessions.create(sid, MSGS)
        await turns.sessions.claim_turn(sid, 0, "dec-a")
    await r.xgroup_create(keys.decoder_jobs("dec-a"), keys.DECODE_GROUP, id="0", mkstream=True)
    assert await turns.end("x", 0, "cancelled")
    assert await turns.end("y", 0, "stop", parsed=ANSWER)  # the turn's own end: generation is over
    notes = [decode_job(f[b"d"]) for _, f in await r.xrange(keys.decoder_jobs("dec-a"))]
    assert notes == [CancelTurn(sid="x", turn=0)]
    await r.delete(keys.decoder_jobs("dec-a"))  # a decoder gone for good: its stream was deleted
    assert await turns.end("z", 0, "cancelled")
    assert not await r.exists(keys.decoder_jobs("dec-a"))  # the note never creates it
