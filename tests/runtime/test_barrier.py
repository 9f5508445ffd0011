"""The fan-in barrier completes each turn exactly once, whatever the order of arrivals."""

from __future__ import annotations

import asyncio
import itertools
import json
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis.crc import key_slot

from schemas import keys
from schemas.codec import decode_job, encode
from schemas.events import ContinueTurn
from tests.stack_helpers import ended, of, wait_for
from runtime import bus
from runtime.barrier import Arrival, Barrier, Start
from runtime.client_calls import expire_overdue, record
from runtime.durations import Durations
from runtime.session import Sessions, Status
from runtime.turns import Turns


def _result(i: int) -> dict:
    return {"index": i, "id": f"call_0_{i}", "name": "t", "content": f"r{i}", "is_error": False}


@pytest.mark.parametrize("order", list(itertools.permutations(["end", 0, 1])))
async def test_every_order_completes_exactly_once(r, order) -> None:
    b = Barrier(r)
    outcomes = []
    for step in order:
        if step == "end":
            outcomes.append(await b.turn_end("s", 0, 2))
        else:
            outcomes.append(await b.result("s", 0, step, _result(step)))
    assert outcomes.count(Arrival.COMPLETED) == 1
    assert outcomes[-1] == Arrival.COMPLETED  # the last arrival completes
    assert [x["content"] for x in await b.results("s", 0)] == ["r0", "r1"]


async def test_duplicates_never_complete_twice(r) -> None:
    b = Barrier(r)
    assert await b.result("s", 0, 0, _result(0)) == Arrival.RECORDED
    assert await b.result("s", 0, 0, _result(0)) == Arrival.DUPLICATE
    assert await b.turn_end("s", 0, 1) == Arrival.COMPLETED
    assert await b.turn_end("s", 0, 1) == Arrival.DUPLICATE
    assert await b.result("s", 0, 0, _result(0)) == Arrival.DUPLICATE


async def test_concurrent_arrivals_complete_once(r) -> None:
    b = Barrier(r)
    n = 20
    coros = [b.result("s", 1, i, _result(i)) for i in range(n)] + [b.turn_end("s", 1, n)]
    coros += [b.result("s", 1, i, _result(i)) for i in range(0, n, 3)]  # duplicate deliveries
    outcomes = await asyncio.gather(*coros)
    assert outcomes.count(Arrival.COMPLETED) == 1


async def test_result_event_is_published_once(r) -> None:
    b = Barrier(r)
    await b.result("s", 0, 0, _result(0), event=b"ev")
    await b.result("s", 0, 0, _result(0), event=b"ev")
    assert await r.xlen(keys.events("s")) == 1


async def test_continuation_goes_to_live_owner_else_shared(r) -> None:
    b, sessions = Barrier(r), Sessions(r)
    await sessions.create("s", [{"role": "user", "content": "hi"}], max_turns=4)
    await sessions.set_fields("s", owner="d1")
    assert await b.send_continuation("s", 0) == keys.DECODE_JOBS  # d1 has no heartbeat
    await r.set(keys.decoder_heartbeat("d1"), "{}", px=5000)
    assert await b.send_continuation("s", 0) == keys.decoder_jobs("d1")
    [(_, fields)] = await r.xrange(keys.decoder_jobs("d1"))
    assert decode_job(fields[bus.FIELD]) == ContinueTurn(sid="s", turn=0)


async def test_completer_killed_before_send_is_found_by_unsent(r) -> None:
    b = Barrier(r)
    assert await b.turn_end("s", 0, 0) == Arrival.COMPLETED  # ...and the caller dies here
    assert await b.unsent("s", 0, older_than_s=0.0)
    await b.send_continuation("s", 0)
    assert not await b.unsent("s", 0, older_than_s=0.0)


async def test_max_turns_ends_the_session_instead(r) -> None:
    turns = Turns(r)
    await turns.sessions.create("s", [{"role": "user", "content": "hi"}], max_turns=1)
    await turns.complete("s", 0)
    assert await r.xlen(keys.DECODE_JOBS) == 0
    assert (await turns.sessions.get("s")).status is Status.ENDED


async def test_a_completed_turn_is_folded_before_its_continuation_is_queued(r) -> None:
    """The record, the message and the results in one read; the fold with the owner's heartbeat
    check; then the job: the decoder that takes it reads the turn's conversation complete."""
    turns = Turns(r)
    sessions, b = turns.sessions, turns.barrier
    await sessions.create("s", [{"role": "user", "content": "hi"}], max_turns=4)
    await sessions.set_fields("s", owner="d1")
    await r.set(keys.decoder_heartbeat("d1"), "{}", px=5000)
    call = {"id": "call_0_0", "type": "function", "function": {"name": "calc", "arguments": "{}"}}
    await sessions.record_message("s", 0, {"role": "assistant", "content": None, "tool_calls": [call]})
    await b.result("s", 0, 0, {"id": "call_0_0", "content": "42"})
    trips: list[str] = []
    real = r.pipeline

    def counted(*args, **kw):
        pipe = real(*args, **kw)
        execute = pipe.execute

        async def traced(*a, **k):
            trips.append(" ".join(str(c[0][0]).split()[0] for c in pipe.command_stack))
            return await execute(*a, **k)

        pipe.execute = traced
        return pipe

    r.pipeline = counted
    try:
        await turns.complete("s", 0)
    finally:
        r.pipeline = real
    assert trips == ["HMGET HGETALL", "EVAL EXISTS"]  # then the XADD and the sent mark
    [(_, fields)] = await r.xrange(keys.decoder_jobs("d1"))
    assert decode_job(fields[bus.FIELD]) == ContinueTurn(sid="s", turn=0)
    assert [m["role"] for m in await sessions.messages("s")] == ["user", "assistant", "tool"]
    assert (await sessions.messages("s"))[2]["content"] == "42"
    assert await r.hget(keys.barrier("s", 0), "sent") is not None  # the sweep leaves it alone


# --------------------------------------------------------------------------- interleavings
@st.composite
def arrivals(draw) -> tuple[int, list]:
    """n calls; each result delivered 1-3 times, the turn end 1-2 times, in any order."""
    n = draw(st.integers(0, 5))
    steps: list = [("end",)] * draw(st.integers(1, 2))
    for i in range(n):
        steps += [("result", i)] * draw(st.integers(1, 3))
    return n, draw(st.permutations(steps))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=arrivals())
def test_any_interleaving_completes_once_at_the_last_new_arrival(redis_url, case) -> None:
    n, steps = case

    async def go() -> list[Arrival]:
        r = bus.connect(redis_url)
        b, sid = Barrier(r), uuid.uuid4().hex
        out = [await (b.turn_end(sid, 0, n) if s[0] == "end" else b.result(sid, 0, s[1], _result(s[1])))
               for s in steps]
        await r.aclose()
        return out

    outcomes = asyncio.run(go())
    assert outcomes.count(Arrival.COMPLETED) == 1
    seen: set = set()
    for step, outcome in zip(steps, outcomes):
        new = step not in seen
        seen.add(step)
        assert (outcome == Arrival.DUPLICATE) == (not new)
        assert (outcome == Arrival.COMPLETED) == (new and len(seen) == n + 1)


async def test_start_reports_first_again_and_already_answered(r) -> None:
    b = Barrier(r)
    assert await b.start("s", 0, 0, b"started") == Start.FIRST
    assert await b.start("s", 0, 0, b"started") == Start.AGAIN  # a re-delivered job
    await b.result("s", 0, 0, _result(0))
    assert await b.start("s", 0, 0, b"started") == Start.HAS_RESULT
    assert await r.xlen(keys.events("s")) == 1  # the started event, once


async def test_a_finished_session_is_not_continued(r) -> None:
    turns = Turns(r)
    await turns.sessions.create("s", [{"role": "user", "content": "hi"}], max_turns=4)
    await turns.end("s", 0, "cancelled")
    await turns.complete("s", 0)
    assert await r.xlen(keys.DECODE_JOBS) == 0


async def test_nothing_is_published_for_a_turn_after_its_session_ended(r) -> None:
    """A cancel while a tool runs: its result is recorded for the barrier, never published."""
    turns = Turns(r)
    b = turns.barrier
    await turns.sessions.create("s", [{"role": "user", "content": "hi"}], max_turns=4)
    await b.start("s", 0, 0, b"started")
    await turns.end("s", 0, "cancelled")
    n = await r.xlen(keys.events("s"))
    assert await b.result("s", 0, 0, _result(0), event=b"late") == Arrival.RECORDED
    assert await b.start("s", 0, 1, b"late start") == Start.FIRST
    assert await turns.sessions.publish_once("s", 0, "pseq:0:1", [(1, b"late")], 100) == -1
    assert await r.xlen(keys.events("s")) == n
    assert [x["content"] for x in await b.results("s", 0)] == ["r0"]


async def test_a_turn_waits_in_the_sweeps_index_from_its_end_until_a_stop(r) -> None:
    turns = Turns(r)
    b = turns.barrier
    await turns.sessions.create("s", [{"role": "user", "content": "hi"}], max_turns=4)
    assert await b.waiting() == []  # generating: nothing for the sweep
    assert await b.turn_end("s", 0, 1) == Arrival.RECORDED
    assert [m for m, _ in await b.waiting()] == [b"s:0"]
    await turns.end("s", 0, "cancelled")  # stopped while its tool runs
    assert await b.waiting() == []
    assert await b.result("s", 0, 0, _result(0)) == Arrival.COMPLETED  # the tool finishes after the cancel
    await turns.complete("s", 0)
    assert await r.hget(keys.barrier("s", 0), "sent") is not None  # nothing to continue: left alone for good
    assert await r.xlen(keys.DECODE_JOBS) == 0


async def test_a_turn_end_is_recorded_when_the_server_lost_its_scripts(r) -> None:
    b = Barrier(r)
    assert await b.result("s", 0, 0, _result(0)) == Arrival.RECORDED  # the script is loaded...
    await r.script_flush()  # ...and lost (a restart, a failover to a new master)
    assert await b.turn_end("s", 0, 1) == Arrival.COMPLETED
    assert [m for m, _ in await b.waiting()] == [b"s:0"]


async def test_a_turn_end_is_answered_even_when_its_index_write_fails(r, caplog) -> None:
    b = Barrier(r)
    await r.set(keys.WAITING_TURNS, "not a sorted set")  # every ZADD on it fails (WRONGTYPE)
    assert await b.turn_end("s", 0, 0) == Arrival.COMPLETED  # the completer is told: it continues the turn
    assert "not indexed for the sweep" in caplog.text


async def test_the_sweep_keeps_a_turn_indexed_again_since_it_read_it(r) -> None:
    b = Barrier(r)
    await r.zadd(keys.WAITING_TURNS, {"old:0": 100.0, "again:0": 100.0})
    [(_, old), (_, read)] = sorted(await b.waiting())
    await b.turn_end("again", 0, 1)  # its end comes again between the sweep's read and its removal
    await b.forget_unchanged([(b"again:0", read), (b"old:0", old)])
    assert [m for m, _ in await b.waiting()] == [b"again:0"]


# --------------------------------------------------------------------------- Redis Cluster
async def test_every_script_touches_one_slot(r, monkeypatch) -> None:
    """No script crosses slots: each EVALSHA's KEYS share one hash slot (DESIGN §2)."""
    calls: list[list[bytes]] = []
    evalsha = r.evalsha

    async def spy(sha, numkeys, *keys_and_args):
        calls.append([k if isinstance(k, bytes) else str(k).encode() for k in keys_and_args[:int(numkeys)]])
        return await evalsha(sha, numkeys, *keys_and_args)

    monkeypatch.setattr(r, "evalsha", spy)
    turns = Turns(r)
    b, sessions = turns.barrier, turns.sessions
    await sessions.create("s", [{"role": "user", "content": "hi"}], max_turns=2)
    await sessions.claim_turn("s", 0, "d1")
    await sessions.publish_once("s", 0, "pseq:0:1", [(1, b"x")], 100)
    await sessions.end_turn("s", 0, 1, b"end", 100)
    await b.start("s", 0, 0, b"ev")
    await b.result("s", 0, 0, _result(0), b"ev")
    await b.awaiting_client("s", 0, 1, "call_0_1", "loc")
    await sessions.record_message("s", 0, {"role": "assistant", "content": "a"})
    await record(turns, "s", 0, 1, await b.client_call("s", 0, 1), "here", False)
    await b.turn_end("s", 0, 2)
    await sessions.append_turn("s", 0, [{"role": "assistant", "content": "a"}])
    await expire_overdue(turns, "s", 0, 0.0)
    await Durations(r).learn("loc", 5.0)
    await turns.complete("s", 0)  # max_turns: ends the session
    assert len(calls) >= 8
    for ks in calls:
        assert len({key_slot(k) for k in ks}) == 1, ks


# --------------------------------------------------------------------------- the sweep, with the stack
TURN0 = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


async def _completed_turn(r, sid: str) -> Barrier:
    """Turn 0 of ``sid`` generated by a decoder that is gone, its only result in: the barrier completes."""
    b, sessions = Barrier(r), Sessions(r)
    weather = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
    await sessions.create(sid, [{"role": "user", "content": "hi"}], tools=[weather],
                          meta={"replay": [TURN0, "Done: {{ results[0] }}"]})
    message = {"role": "assistant", "content": None, "raw": TURN0, "tool_calls": [
        {"id": "call_0_0", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]}
    await sessions.set_fields(sid, turn=0, owner="decode-gone", **{"claim:0": "decode-gone", "done:0": 1,
                                                                    "asst:0": json.dumps(message)})
    assert await b.turn_end(sid, 0, 1) == Arrival.RECORDED
    assert await b.result(sid, 0, 0, dict(_result(0), name="get_weather", content="sunny")) == Arrival.COMPLETED
    assert await sessions.messages(sid) == [{"role": "user", "content": "hi"}]  # folded by the completer...
    return b


async def test_the_sweep_sends_what_a_dead_completer_did_not(stack_factory, r) -> None:
    stack_factory(replay_rate=200)
    await _completed_turn(r, "lost")  # the completer dies before it enqueues ContinueTurn
    bodies = await wait_for(r, "lost", ended, timeout_s=20)
    assert of(bodies, "SessionEnded")[0].content == "Done: sunny"
    assert [t.continuation for t in of(bodies, "TurnStarted")] == [True]
    assert await r.hget(keys.barrier("lost", 0), "sent") is not None  # sent by the sweep
    await _completed_turn(r, "twice")  # it folded the turn, enqueued, died before marking it sent, and
    turns = Turns(r)                    # the sweep re-sent
    assert await turns.fold("twice", 0, await turns.sessions.get("twice"))
    for _ in range(2):
        await bus.add(r, keys.DECODE_JOBS, encode(ContinueTurn(sid="twice", turn=0)))
    bodies = await wait_for(r, "twice", ended, timeout_s=20)
    await asyncio.sleep(0.5)  # room for a wrongly accepted duplicate to show
    bodies = await wait_for(r, "twice", ended)
    assert [t.continuation for t in of(bodies, "TurnStarted")] == [True]  # turn 1, generated once
    assert len(of(bodies, "SessionEnded")) == 1 and of(bodies, "SessionEnded")[0].content == "Done: sunny"
