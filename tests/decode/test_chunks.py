"""The decoder's chunk writer: a turn's first token at once, later ones with the last engine step
before the oldest is ``ms`` old (or at ``ms``), every turn's chunks of a step in one round trip,
merging while a round is in flight, riding through an outage, and the cancel check in the same round
trip."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import pytest

from redis.exceptions import ResponseError

from runtime import bus
from runtime.session import Field, Sessions, Status
from schemas import keys
from schemas.codec import decode_token
from workers.decode.chunks import AbortCheck, ChunkWriter
from workers.decode.constraints.formats import FORMATS, call_ends
from tests.round_trips import record_pipelines

SLOW_TICK_MS = 60_000.0  # no round comes from the clock within a test


async def _chunks(r, sid: str) -> list:
    return [decode_token(fields[bus.FIELD]) for _, fields in await r.xrange(keys.tokens(sid))]


def _open(w: ChunkWriter, sid: str, abort: AbortCheck | None = None):
    return w.open(keys.tokens(sid), keys.session(sid), turn=0, attempt=1, abort=abort)


async def _settled() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_the_first_token_leaves_at_once_and_later_ones_wait_for_the_round(r) -> None:
    w = ChunkWriter(r, n=100, ms=SLOW_TICK_MS)
    tc = _open(w, "s1")
    before = time.time()
    w.add(tc, "a", 1)
    await asyncio.sleep(0.05)
    assert [(c.seq, c.text, c.n_tokens) for c in await _chunks(r, "s1")] == [(0, "a", 1)]
    w.add(tc, "b", 1)
    w.add(tc, "", 1)  # an incomplete character: a token without text yet
    w.add(tc, "c", 1)
    await asyncio.sleep(0.05)
    assert len(await _chunks(r, "s1")) == 1  # no round yet: the clock is a minute away
    await w.flush(tc)
    chunks = await _chunks(r, "s1")
    assert [(c.seq, c.text, c.n_tokens) for c in chunks] == [(0, "a", 1), (1, "bc", 3)]
    assert before <= chunks[0].t_emit <= chunks[1].t_emit <= time.time()  # a chunk dates from its oldest delta


async def test_a_turn_opened_with_make_writes_its_entries_with_text_only(r) -> None:
    """A text-only turn's chunks are the entries ``make`` builds (its content events), seq 0, 1, ...
    over the chunks written: a chunk with no text is not written, its lead goes alone."""
    w = ChunkWriter(r, n=100, ms=SLOW_TICK_MS)
    made: list[tuple[int, str]] = []

    def make(seq: int, text: str, since: float) -> bytes:
        made.append((seq, text))
        return f"{seq}:{text}".encode()

    tc = w.open("ev-m1", keys.session("m1"), turn=0, attempt=1, make=make, maxlen=1000)
    w.lead(tc, lambda pipe: pipe.set("lead-m1", "1"))
    w.add(tc, "", 1)  # the first delta ends inside a character: the lead goes, no entry
    await _settled()
    assert await r.get("lead-m1") == b"1" and await r.xlen("ev-m1") == 0
    w.add(tc, "é", 1)  # still the first text: at once
    await asyncio.sleep(0.05)
    w.add(tc, "", 1)
    await w.flush(tc)  # nothing but a token without text: nothing written, the flush returns
    w.add(tc, "b", 1)
    w.add(tc, "c", 1)
    await w.flush(tc)
    assert [f[bus.FIELD] for _, f in await r.xrange("ev-m1")] == ["0:é".encode(), b"1:bc"]
    assert made == [(0, "é"), (1, "bc")] and tc.seq == 2


async def test_the_end_of_a_call_leaves_at_once_even_split_across_deltas(r) -> None:
    w = ChunkWriter(r, n=100, ms=SLOW_TICK_MS)
    tc = w.open(keys.tokens("e1"), keys.session("e1"), turn=0, attempt=1, ends=call_ends("hermes"))
    w.add(tc, "<tool_call>", 1)  # the first chunk: at once
    await asyncio.sleep(0.05)
    w.add(tc, '{"name": "f", "arguments": {}}\n', 9)
    w.add(tc, "</tool", 1)
    await asyncio.sleep(0.05)
    assert len(await _chunks(r, "e1")) == 1  # no end yet: waits for the clock
    w.add(tc, "_call>", 1)  # completes the marker the delta before began
    await asyncio.sleep(0.05)
    chunks = await _chunks(r, "e1")
    assert [c.text for c in chunks] == ["<tool_call>", '{"name": "f", "arguments": {}}\n</tool_call>']
    w.add(tc, "\nok", 1)  # the marker is in the text kept from before: no round for it again
    await asyncio.sleep(0.05)
    assert len(await _chunks(r, "e1")) == 2
    await w.flush(tc)
    assert (await _chunks(r, "e1"))[-1].text == "\nok"


async def test_the_end_of_a_call_is_seen_when_its_first_half_made_the_turn_due(r) -> None:
    w = ChunkWriter(r, n=4, ms=SLOW_TICK_MS)
    tc = w.open(keys.tokens("e2"), keys.session("e2"), turn=0, attempt=1, ends=call_ends("hermes"))
    w.add(tc, "<tool_call>", 1)
    await asyncio.sleep(0.05)
    w.add(tc, "ab", 3)
    w.add(tc, "</tool_", 1)  # four tokens buffered: due anyway, and the half marker is remembered
    await asyncio.sleep(0.05)
    w.add(tc, "call>", 1)  # completes it: at once, not at the clock
    await asyncio.sleep(0.05)
    assert [c.text for c in await _chunks(r, "e2")] == ["<tool_call>", "ab</tool_", "call>"]


def test_every_format_but_mistral_names_the_text_that_ends_its_calls() -> None:
    """mistral's calls end with the turn (which sends everything); the others' ends leave at once."""
    assert call_ends("hermes") == ("</tool_call>",)
    assert call_ends("harmony") == ("<|call|>",)
    assert call_ends("pythonic") == (")", "]")
    assert call_ends("no-such-format") == ()
    assert [f for f in FORMATS if not call_ends(f)] == ["mistral"]


async def test_a_step_of_many_turns_leaves_in_one_round_trip(r) -> None:
    w = ChunkWriter(r, n=1, ms=SLOW_TICK_MS)
    turns = [_open(w, f"m{i}") for i in range(50)]
    for step in range(3):  # as an engine step: every turn's delta handed over in one loop iteration
        for tc in turns:
            w.add(tc, f"t{step}", 1)
        await asyncio.gather(*(w.flush(tc) for tc in turns))
        assert w.rounds == step + 1
    for i in range(50):
        assert [(c.seq, c.text) for c in await _chunks(r, f"m{i}")] == [(0, "t0"), (1, "t1"), (2, "t2")]


async def test_a_turn_that_is_due_leaves_alone_and_the_others_wait_for_their_time(r) -> None:
    w = ChunkWriter(r, n=2, ms=300.0)
    a, b = _open(w, "due-a"), _open(w, "due-b")
    w.add(a, "a0", 1)
    w.add(b, "b0", 1)  # both first tokens: one round at once
    await asyncio.sleep(0.05)
    assert w.rounds == 1
    w.add(b, "b1", 1)  # one token of two: waits for the clock
    w.add(a, "a1", 1)
    w.add(a, "a2", 1)  # two: due now, alone
    await asyncio.sleep(0.05)
    assert [c.text for c in await _chunks(r, "due-a")] == ["a0", "a1a2"]
    assert [c.text for c in await _chunks(r, "due-b")] == ["b0"]  # not taken early by a's round
    w.add(a, "a3", 1)
    await asyncio.sleep(0.4)  # b1's 300 ms: a round, and a3 (50 ms younger, within 300/4) goes with it
    assert [c.text for c in await _chunks(r, "due-b")] == ["b0", "b1"]
    assert [c.text for c in await _chunks(r, "due-a")] == ["a0", "a1a2", "a3"]
    assert w.rounds == 3


async def test_rounds_that_only_steps_made_due_are_spaced_so_turns_out_of_step_share_them(r) -> None:
    """A turn due with its step waits until ``ms``/4 after the last round began (never past its own ``ms``):
    turns whose deltas come out of step with each other (an engine that does not batch) share a round."""
    w = ChunkWriter(r, n=100, ms=400.0)
    b, c, d = _open(w, "sp-b"), _open(w, "sp-c"), _open(w, "sp-d")
    w.add(b, "b0", 1)
    w.add(d, "d0", 1)
    await asyncio.sleep(0.45)  # their next deltas come a whole ``ms`` later: due with their step at once
    w.add(c, "c0", 1)  # a first token: a round at once
    await asyncio.sleep(0.005)
    w.add(b, "b1", 1)  # due with its step, 5 ms after that round began: waits until 100 ms after it
    await asyncio.sleep(0.005)
    w.add(d, "d1", 1)  # due with its step too
    await asyncio.sleep(0.01)
    assert [x.text for x in await _chunks(r, "sp-b")] == ["b0"] and w.rounds == 2
    await asyncio.sleep(0.2)
    assert [x.text for x in await _chunks(r, "sp-b")] == ["b0", "b1"]
    assert [x.text for x in await _chunks(r, "sp-d")] == ["d0", "d1"]
    assert w.rounds == 3  # b1 and d1 in one round


class StepClock:
    """The writer's clock, moved by hand: an engine's steps at chosen times.  Its seconds stand for
    milliseconds, so that no timer of the writer's (a minute or more of real time) fires in a test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    async def step(self, w: ChunkWriter, ms: float) -> None:
        """Let the round this step started finish, then move the clock."""
        for _ in range(2000):
            await asyncio.sleep(0.001)
            if not w.busy and not w._kicked:
                break
        self.now += ms


async def test_a_turn_leaves_with_the_step_after_which_its_next_delta_would_be_late(r) -> None:
    clock = StepClock()
    w = ChunkWriter(r, n=100, ms=100_000.0, clock=clock)
    tc = _open(w, "step")
    for i in range(4):  # a delta every 40 ms: the third after the first chunk would be 120 ms old at the next
        w.add(tc, f"t{i}", 1)
        await clock.step(w, 40)
    assert [c.text for c in await _chunks(r, "step")] == ["t0", "t1t2t3"]  # at 80 ms, not at 100 (no step then)
    assert w.rounds == 2


async def test_the_turns_of_one_step_leave_in_phases(r) -> None:
    """A step every 50 ms and 60 ms to wait: each turn's chunk carries two steps' tokens, and a turn that
    started a step later leaves in the other steps' rounds (not every turn in one round)."""
    clock = StepClock()
    w = ChunkWriter(r, n=100, ms=60_000.0, clock=clock)
    a, b = _open(w, "ph-a"), _open(w, "ph-b")
    for step in range(5):
        w.add(a, f"a{step}", 1)
        if step:
            w.add(b, f"b{step - 1}", 1)
        await clock.step(w, 50)
    assert [c.text for c in await _chunks(r, "ph-a")] == ["a0", "a1a2", "a3a4"]
    assert [c.text for c in await _chunks(r, "ph-b")] == ["b0", "b1b2"]
    assert w.rounds == 5  # one turn per round


async def test_a_slow_turns_every_delta_leaves_at_once(r) -> None:
    clock = StepClock()
    w = ChunkWriter(r, n=100, ms=60_000.0, clock=clock)
    tc = _open(w, "slow")
    for i in range(3):  # 80 ms apart: waiting for the next could only be late
        w.add(tc, f"t{i}", 1)
        await clock.step(w, 80)
    assert [c.text for c in await _chunks(r, "slow")] == ["t0", "t1", "t2"]


async def test_a_due_turn_that_closed_leaves_no_empty_round(r) -> None:
    w = ChunkWriter(r, n=1, ms=SLOW_TICK_MS)
    a, b = _open(w, "gone-a"), _open(w, "gone-b")
    w.add(a, "a0", 1)
    w.add(b, "b0", 1)
    await asyncio.gather(w.flush(a), w.flush(b))
    w.n = 2
    w.add(b, "b1", 1)  # waits for the clock
    w.add(a, "a1", 1)
    w.add(a, "a2", 1)  # due...
    w.close(a)  # ...and abandoned before the round starts
    await _settled()
    assert w.rounds == 1 and not w.busy
    await w.flush(b)
    assert [c.text for c in await _chunks(r, "gone-b")] == ["b0", "b1"]


async def test_tokens_that_arrive_while_a_round_is_in_flight_merge_into_one_chunk(r) -> None:
    w = ChunkWriter(r, n=1, ms=SLOW_TICK_MS)
    gate, original = asyncio.Event(), w._round_trip

    async def held(batch):
        await gate.wait()
        return await original(batch)

    w._round_trip = held  # type: ignore[method-assign]
    tc = _open(w, "lag")
    w.add(tc, "a", 1)
    await _settled()  # the round with "a" is in flight
    for t in "bcd":
        w.add(tc, t, 1)
        await _settled()
    gate.set()
    await w.flush(tc)
    assert [(c.seq, c.text, c.n_tokens) for c in await _chunks(r, "lag")] == [(0, "a", 1), (1, "bcd", 3)]
    assert w.rounds == 2


async def test_an_outage_is_ridden_through_and_past_it_the_turn_fails(r, monkeypatch) -> None:
    monkeypatch.setattr(bus, "RETRY_S", 0.01)
    w = ChunkWriter(r, n=1, ms=SLOW_TICK_MS, outage_s=30)
    original, failures = w._round_trip, [3]

    async def flaky(batch):
        if failures[0]:
            failures[0] -= 1
            raise bus.aioredis.ConnectionError("gone")
        return await original(batch)

    w._round_trip = flaky  # type: ignore[method-assign]
    tc = _open(w, "out")
    w.add(tc, "a", 1)
    w.add(tc, "b", 1)
    await w.flush(tc)
    assert [(c.seq, c.text) for c in await _chunks(r, "out")] == [(0, "ab")]

    w.outage_s, failures[0] = 0.1, 10**6
    w.add(tc, "c", 1)
    with pytest.raises(bus.aioredis.ConnectionError):
        await w.flush(tc)
    with pytest.raises(bus.aioredis.ConnectionError):
        w.add(tc, "d", 1)  # the turn is abandoned: regenerated as a new attempt


def _check(sid: str) -> tuple[AbortCheck, list[str]]:
    """An abort check of ``sid``'s turn 0, attempt 1, on an engine that records what it aborts."""
    aborted: list[str] = []

    async def abort(rid: str) -> None:
        aborted.append(rid)

    return AbortCheck(SimpleNamespace(abort=abort), SimpleNamespace(rid=f"{sid}:0:1"), sid, 0, 1), aborted  # type: ignore[arg-type]


async def _checked(w: ChunkWriter, tc, check: AbortCheck, text: str) -> None:
    """Write ``text`` in a round that also reads the status (the check made due), and let it act."""
    check.next_at = 0.0
    w.add(tc, text, 1)
    await w.flush(tc)
    await _settled()


async def test_the_status_read_rides_in_the_round_and_a_cancel_aborts_the_engine(r) -> None:
    check, aborted = _check("s9")
    await r.hset(keys.session("s9"), mapping={"status": Status.ACTIVE, "turn": 0, "att:0": 1})
    w = ChunkWriter(r, n=1, ms=SLOW_TICK_MS)
    tc = _open(w, "s9", check)
    await _checked(w, tc, check, "a")
    assert aborted == [] and not check.due(time.monotonic())  # active: goes on; the next read is a second away
    await r.hset(keys.session("s9"), "status", Status.CANCELLED)
    await _checked(w, tc, check, "b")
    assert aborted == ["s9:0:1"] and check.aborted


async def test_an_attempt_that_a_newer_one_replaced_stops_generating(r) -> None:
    """Taken for dead (its heartbeat lapsed) while it went on: its next status read sees the newer
    attempt and aborts, so that it never ends the turn in the newer attempt's place."""
    check, aborted = _check("s8")
    await r.hset(keys.session("s8"), mapping={"status": Status.ACTIVE, "turn": 0, "att:0": 2})
    w = ChunkWriter(r, n=1, ms=SLOW_TICK_MS)
    tc = _open(w, "s8", check)
    await _checked(w, tc, check, "a")
    assert aborted == ["s8:0:1"] and check.aborted


async def test_text_without_tokens_and_a_lead_without_text_are_written_before_a_flush_returns(r) -> None:
    """A delta may carry text and no token (a forced prefill before an empty completion), and a turn may
    end with its lead (turn.started) and nothing behind it: the flush waits for both."""
    w = ChunkWriter(r, n=100, ms=SLOW_TICK_MS)
    tc = _open(w, "s7")
    w.lead(tc, lambda pipe: pipe.set("lead-s7", "1"))
    w.add(tc, "<tool_call>", 0)
    await w.flush(tc)
    w.close(tc)
    assert [c.text for c in await _chunks(r, "s7")] == ["<tool_call>"] and await r.get("lead-s7") == b"1"
    tc = _open(w, "s6")
    w.lead(tc, lambda pipe: pipe.set("lead-s6", "1"))
    await w.flush(tc)
    assert await r.get("lead-s6") == b"1"


async def test_a_lead_command_goes_once_just_ahead_of_the_turns_next_chunk(r, monkeypatch) -> None:
    """A turn's turn.started rides in its first chunk's round trip, ahead of it, as EVAL: even a server
    that lost its scripts runs it before the chunk."""
    await r.script_flush()
    sent = record_pipelines(r, monkeypatch)  # the commands of each round trip, in order
    w = ChunkWriter(r, n=100, ms=SLOW_TICK_MS)
    tc = _open(w, "ld")
    call = Sessions(r).publish_call("ld", 0, Field.decoder_seq(0, 1), [(1, b"started")], 100)
    w.lead(tc, call.with_text)
    w.add(tc, "a", 1)
    await w.flush(tc)
    w.add(tc, "b", 1)
    await w.flush(tc)
    assert sent == [["EVAL", "XADD"], ["XADD"]]  # once, just ahead of the first chunk, in its round trip
    assert len(await r.xrange(keys.events("ld"))) == 1 and len(await r.xrange(keys.tokens("ld"))) == 2


async def test_a_lead_command_that_fails_fails_its_turn(r) -> None:
    w = ChunkWriter(r, n=100, ms=SLOW_TICK_MS)
    await r.set("not-a-list", "x")
    tc = _open(w, "lf")
    w.lead(tc, lambda pipe: pipe.execute_command("LPUSH", "not-a-list", "y"))
    w.add(tc, "a", 1)
    with pytest.raises(ResponseError, match="WRONGTYPE"):
        await w.flush(tc)
    with pytest.raises(ResponseError):
        w.add(tc, "b", 1)  # the turn is abandoned (and regenerated as a new attempt)


async def test_several_lead_commands_go_in_order_and_an_error_of_any_fails_the_turn(r, monkeypatch) -> None:
    """A text-only turn's routing announcement leads its first chunk beside its turn.started."""
    sent = record_pipelines(r, monkeypatch)
    w = ChunkWriter(r, n=100, ms=SLOW_TICK_MS)
    tc = _open(w, "l2")
    w.lead(tc, lambda pipe: pipe.set("l2-a", "1"), lambda pipe: pipe.hincrby("l2-load", "d", 1))
    w.add(tc, "a", 1)
    await w.flush(tc)
    assert sent == [["SET", "HINCRBY", "XADD"]] and await r.get("l2-a") == b"1"
    assert await r.hget("l2-load", "d") == b"1"
    await r.set("not-a-hash", "x")
    tc = _open(w, "l3")
    w.lead(tc, lambda pipe: pipe.set("l3-a", "1"), lambda pipe: pipe.hincrby("not-a-hash", "d", 1))
    w.add(tc, "a", 1)
    with pytest.raises(ResponseError, match="WRONGTYPE"):
        await w.flush(tc)


async def test_a_trail_goes_just_behind_the_last_chunk_and_its_replies_are_the_flushs(r, monkeypatch) -> None:
    """A text-only turn's end rides its last chunk's round trip, told how many chunks the turn wrote; with
    nothing buffered it goes in a round of its own; an error of its commands fails the turn."""
    sent = record_pipelines(r, monkeypatch)
    w = ChunkWriter(r, n=100, ms=SLOW_TICK_MS)
    tc = w.open(keys.events("tr"), keys.session("tr"), 0, 1, make=lambda seq, text, since: f"{seq}:{text}".encode())
    told: list[int] = []

    def end(seq: int) -> list:
        told.append(seq)
        return [lambda pipe: pipe.set("tr-end", seq), lambda pipe: pipe.incr("tr-n")]

    w.add(tc, "a", 1)
    await w.flush(tc)
    w.add(tc, "b", 1)
    assert await w.flush(tc, then=end) == [True, 1]
    assert sent == [["XADD"], ["XADD", "SET", "INCRBY"]] and told == [2] and await r.get("tr-end") == b"2"
    tc = w.open(keys.events("tr2"), keys.session("tr2"), 0, 1, make=lambda seq, text, since: text.encode())
    w.add(tc, "a", 1)
    await w.flush(tc)
    assert await w.flush(tc, then=end) == [True, 2] and sent[-1] == ["SET", "INCRBY"] and told[-1] == 1
    await r.set("not-a-number", "x")
    tc = w.open(keys.events("tr3"), keys.session("tr3"), 0, 1, make=lambda seq, text, since: text.encode())
    w.add(tc, "a", 1)
    with pytest.raises(ResponseError):
        await w.flush(tc, then=lambda seq: [lambda pipe: pipe.incr("not-a-number")])


async def test_a_trail_that_raises_fails_its_turn_alone(r) -> None:
    """The turn's own code builds its trail inside the writer's round: what it raises fails that turn,
    and the other turns of the round are written as ever (the writer goes on)."""
    w = ChunkWriter(r, n=100, ms=SLOW_TICK_MS)
    bad = w.open(keys.events("tb"), keys.session("tb"), 0, 1, make=lambda seq, text, since: text.encode())
    good = w.open(keys.events("tg"), keys.session("tg"), 0, 1, make=lambda seq, text, since: text.encode())
    w.add(bad, "a", 1)
    w.add(good, "b", 1)

    def broken(seq: int) -> list:
        raise ValueError("no end")

    with pytest.raises(ValueError, match="no end"):
        await asyncio.gather(w.flush(bad, then=broken), w.flush(good))
    await w.flush(good)
    assert await r.xlen(keys.events("tg")) == 1 and await r.xlen(keys.events("tb")) == 1  # its chunk, no end
    w.add(good, "c", 1)
    await w.flush(good)
    assert await r.xlen(keys.events("tg")) == 2
