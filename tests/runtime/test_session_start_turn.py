"""``Sessions.start_turn``: a decoder's record read, claim and post-claim reads in one round trip, with
the claim's rules (never on a session that is not active, one attempt per claim, duplicates held)."""

from __future__ import annotations

from runtime.session import Claim, Sessions, Status
from schemas import keys

MSGS = [{"role": "user", "content": "hi"}]


async def test_an_active_session_is_claimed_and_read_in_one_round_trip(r) -> None:
    sessions = Sessions(r)
    await sessions.create("s", MSGS)
    start = await sessions.start_turn("s", 0, "d1")
    assert start.info is not None and start.info.active
    assert start.claimed.claim is Claim.CLAIMED and start.claimed.attempt == 1
    assert start.messages == MSGS
    assert start.after == "0-0"  # an empty token log
    entry = await r.xadd(keys.tokens("s"), {"d": b"x"})
    again = await sessions.start_turn("s", 0, "d1")  # a duplicate job of the decoder that holds it
    assert again.claimed.claim is Claim.HELD_BY_ME
    assert again.after == entry.decode()
    assert (await sessions.start_turn("s", 0, "d2")).claimed.claim is Claim.HELD_BY_OTHER
    assert await r.hget(keys.session("s"), "att:0") == b"1"


async def test_a_session_that_is_not_active_or_gone_is_never_claimed(r) -> None:
    sessions = Sessions(r)
    await sessions.create("e", MSGS)
    await r.hset(keys.session("e"), "status", Status.CANCELLED.value)
    start = await sessions.start_turn("e", 0, "d1")
    assert start.claimed.claim is Claim.INACTIVE and not start.info.active
    assert not await r.hexists(keys.session("e"), "claim:0")
    assert (await sessions.claim_turn("e", 0, "d1", dead_holder="d0")).claim is Claim.INACTIVE  # nor taken over
    gone = await sessions.start_turn("gone", 0, "d1")
    assert gone.info is None and gone.claimed.claim is Claim.INACTIVE and gone.messages == []
    assert not await r.exists(keys.session("gone"))  # the claim created no record
