"""The residency rule (``workers.decode.residency``) as pure logic: admission order, lapses, refreshes.

Blocks of 10 tokens; a pool of 10 blocks.  Times are plain numbers.  The vLLM side (a waiting session,
a continuation that hits its prefix, a refresh sent) is tested in tests/decode/test_vllm_residency.py.
"""

from __future__ import annotations

import asyncio

import pytest

from workers.decode.residency import Gate, Residency

BS, CAP, GRACE = 10, 10, 2.0


def rule() -> Residency:
    return Residency(CAP, BS, grace_s=GRACE)


def turn(r: Residency, session: str, prompt: int, kept: int, now: float, pin_s: float | None = 60.0) -> None:
    """One request of ``session`` admitted at once and finished at ``now``, then pinned (None: not pinned)."""
    assert r.ask(session, f"{session}@{now}", prompt, now)
    r.finished(session, kept, now)
    if pin_s is not None:
        assert r.pin(session, pin_s, now)


def test_with_room_for_all_nothing_waits() -> None:
    r = rule()
    assert r.ask("a", "a0", 30, 0.0) and r.ask("b", "b0", 30, 0.0) and r.ask("c", "c0", 40, 0.0)
    assert r.stats(0.0)["admission_waits"] == 0 and r.stats(0.0)["owed_blocks"] == 10


def test_the_oldest_runs_as_if_alone_and_the_youngest_waits() -> None:
    r = rule()
    assert r.ask("big", "b0", 150, 0.0)  # larger than the pool: vLLM decides, nothing here holds it
    assert not r.ask("small", "s0", 5, 0.0)
    r.finished("big", 160, 1.0)
    r.release("big", 1.0)
    assert r.admit(1.0) == ["s0"]
    assert r.stats(1.0)["admission_waits"] == 1


def test_a_pinned_continuation_goes_before_a_new_session_that_keeps_its_place() -> None:
    r = rule()
    turn(r, "a", 40, 60, 0.0)  # 6 blocks kept and pinned
    assert not r.ask("new", "n0", 50, 1.0)  # 6 + 5 > 10: waits
    assert not r.ask("newer", "m0", 5, 1.0)  # 6 + 5 + 1 > 10, and younger than a waiting one: waits too
    assert r.ask("a", "a1", 70, 2.0)  # the oldest: its continuation is sent
    assert r.admit(2.0) == []
    r.finished("a", 80, 3.0)
    r.release("a", 3.0)
    assert r.admit(3.0) == ["n0", "m0"]  # in their order, once the session before them left


def test_a_lapsed_grace_and_a_lapsed_pin_give_the_place_up() -> None:
    r = rule()
    turn(r, "a", 40, 60, 0.0, pin_s=5.0)
    turn(r, "b", 20, 30, 0.0, pin_s=None)
    assert not r.ask("new", "n0", 50, 1.0)  # 6 + 3 + 5 > 10
    assert r.next_deadline() == GRACE  # b's grace lapses first
    assert r.admit(GRACE + 0.1) == []  # 6 + 5 > 10 still
    assert r.next_deadline() == 5.0
    assert r.admit(5.1) == ["n0"]  # a's pin lapsed: alone
    assert r.stats(5.1)["pins_lapsed"] == 1  # b's grace was no pin


def test_a_session_whose_pin_lapsed_comes_back_at_its_rank_and_a_released_one_anew() -> None:
    r = rule()
    turn(r, "a", 40, 60, 0.0, pin_s=1.0)  # its tool runs longer than its pin
    turn(r, "r", 20, 20, 0.0)
    assert not r.ask("new", "n0", 50, 0.5)  # 6 + 2 + 5 > 10
    assert r.admit(1.5) == ["n0"]  # a lapsed: 2 + 5 fit
    assert r.stats(1.5)["pins_lapsed"] == 1
    assert r.ask("a", "a1", 70, 2.0)  # back before "new": its continuation is sent
    assert list(r.sessions) == ["a", "r", "new"]
    r.release("r", 2.0)
    assert not r.ask("r", "r1", 30, 2.5)  # released: it starts anew, last (7 + 5 + 3 > 10)
    assert list(r.sessions) == ["a", "new", "r"]


def test_each_session_is_counted_with_the_growth_of_one_more_turn() -> None:
    r = Residency(20, BS, grace_s=GRACE)
    for session, now in (("a", 0.0), ("b", 1.0)):  # two sessions whose prompts grow 4 blocks a turn
        turn(r, session, 30, 40, now)
        assert r.ask(session, f"{session}1", 70, now + 0.5)
        r.finished(session, 80, now + 0.5)
    assert r.growth == pytest.approx(4 * (1 - 0.75**2))  # a moving average: 1.75 -> 2 blocks a session
    assert not r.ask("new", "n0", 30, 2.0)  # 8 + 8 + 3 fit the 20 blocks; with 2 + 2 + 2 more they do not
    r.release("b", 2.0)
    assert r.admit(2.0) == ["n0"]


def test_a_withdrawn_request_gives_its_place_up() -> None:
    r = rule()
    turn(r, "a", 40, 60, 0.0)
    assert not r.ask("new", "n0", 50, 1.0)
    assert not r.ask("newer", "m0", 40, 1.0)
    r.withdraw("new", "n0", 2.0)
    assert r.admit(2.0) == ["m0"]  # 6 + 4 fits once the one before it left
    assert r.stats(2.0)["resident_sessions"] == 2


def test_refresh_moves_kept_sessions_behind_ended_ones_only_under_pressure() -> None:
    r = rule()
    turn(r, "a", 20, 30, 0.0)  # pinned, freed at tick 1
    turn(r, "e", 10, 10, 1.0, pin_s=None)  # freed at tick 2, then ends
    r.release("e", 1.0)
    assert r.ask("b", "b0", 10, 2.0)
    assert r.to_refresh(2.0) == []  # 3 + 1 blocks owed: under half the pool, nothing is evicted
    assert r.ask("c", "c0", 30, 2.0)
    assert r.to_refresh(2.0) == ["a"]  # 3 + 1 + 3 > 5: a's blocks were freed before e's
    assert r.to_refresh(2.0) == []  # now behind them: not again until another session ends
    r.finished("b", 20, 3.0)
    r.release("b", 3.0)
    assert r.to_refresh(3.0) == ["a"]  # 3 + 3 > 5, and b's blocks were freed after a's refresh
    assert r.stats(3.0)["refreshes"] == 2


def test_only_idle_pinned_sessions_are_refreshed_and_reported() -> None:
    r = Residency(20, BS, grace_s=GRACE)
    turn(r, "graced", 20, 30, 0.0, pin_s=None)  # a finished request's grace: kept in place, not pinned
    turn(r, "live", 20, 30, 0.0)
    assert r.ask("live", "l1", 40, 0.5)  # pinned but running: nothing to refresh
    turn(r, "e", 10, 10, 1.0, pin_s=None)
    r.release("e", 1.0)
    assert r.ask("c", "c0", 60, 1.0)  # 3 + 4 + 6 blocks owed: over half the pool
    assert r.to_refresh(1.0) == []
    stats = r.stats(1.0)
    assert (stats["pinned_sessions"], stats["pinned_blocks"]) == (1, 4)  # "live" only, at its prompt's size
    r.release("live", 1.0)
    assert r.stats(1.0)["pinned_sessions"] == 0 and r.stats(1.0)["resident_sessions"] == 3  # still live


def test_bad_sizes_are_refused() -> None:
    with pytest.raises(ValueError, match="capacity"):
        Residency(0, BS)


async def test_the_gate_holds_a_request_until_room_and_an_abort_ends_the_wait() -> None:
    gate = Gate(Residency(CAP, BS, grace_s=0.05))
    assert await gate.enter("a", "a0", 60)
    waiting = asyncio.create_task(gate.enter("new", "n0", 50))
    aborted = asyncio.create_task(gate.enter("newer", "m0", 10))
    await asyncio.sleep(0.01)
    assert not waiting.done() and not aborted.done()
    assert gate.abort("m0") and not gate.abort("m0")
    assert await aborted is False
    gate.left("a", 70)  # a's grace (0.05 s) lapses without a pin: "new" gets the pool
    assert await asyncio.wait_for(waiting, 2.0) is True
    assert gate.rule.stats(1e12)["resident_sessions"] == 1  # only the live one


async def test_a_caller_that_leaves_while_waiting_gives_its_place_up() -> None:
    gate = Gate(rule())
    assert await gate.enter("a", "a0", 60)
    waiting = asyncio.create_task(gate.enter("new", "n0", 50))
    await asyncio.sleep(0.01)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert gate.rule.stats(0.0)["admission_waiting"] == 0 and "new" not in gate.rule.sessions


def test_a_new_session_that_continues_an_idle_one_takes_its_place() -> None:
    """A client-side agent loop sends every turn as a new request (a new session): the conversation
    keeps its place and is counted once, not once per turn behind its own earlier turns."""
    r = rule()
    turn(r, "c1", 30, 50, 0.0)  # a chat completion ended with a call: 5 blocks pinned
    turn(r, "other", 20, 30, 0.5)  # another conversation, 3 blocks, behind it
    assert r.idle(1.0) == ["c1", "other"]
    assert r.inherit("c2", "c1", 1.0)  # the client's next request, with the call's result
    assert r.ask("c2", "c2@1", 60, 1.0)  # first in the order: 6 blocks (it waited behind 5 + 3 before)
    assert list(r.sessions) == ["c2", "other"] and r.growth == 0.75  # c1 asked 3 blocks: a quarter of 3
    assert not r.inherit("c3", "c2", 1.5)  # c2 is live: nothing to take over
    assert not r.inherit("other", "c2", 1.5)  # a session already resident keeps its own place


def test_a_new_session_takes_the_rank_of_a_lapsed_one_it_continues() -> None:
    r = rule()
    turn(r, "c1", 30, 50, 0.0, pin_s=1.0)
    turn(r, "other", 20, 30, 0.5)
    assert r.idle(5.0) == ["other", "c1"]  # c1's pin lapsed: only its rank is left
    assert r.inherit("c2", "c1", 5.0)
    r.ask("c2", "c2@5", 80, 5.0)
    assert list(r.sessions) == ["c2", "other"]  # back at c1's rank, before the one that came after it


def test_idle_among_a_few_keeps_the_order_and_leaves_out_the_busy() -> None:
    r = rule()
    turn(r, "c1", 30, 50, 0.0, pin_s=1.0)
    turn(r, "other", 20, 30, 0.5)
    assert r.ask("busy", "busy@1", 10, 1.0)
    assert r.idle(5.0, among=["c1", "busy", "other", "gone"]) == ["other", "c1"]  # resident by rank, then lapsed
    assert r.idle(5.0, among=[]) == []


def test_the_heap_of_deadlines_lapses_and_counts_as_a_walk_over_every_session_would() -> None:
    """Random requests, pins, releases, aborts and hand-overs over a few hundred sessions: after each
    operation every session left is held, the blocks owed and the requests waiting are the sums over
    the sessions, and the next deadline is the earliest of the idle sessions' (the definitions the
    rule walked every session for, once per operation)."""
    import random

    rnd = random.Random(7)
    r, now, live = Residency(400, BS, grace_s=GRACE), 0.0, []  # live: (session, rid) sent and not finished
    waiting: list[tuple[str, str]] = []
    for i in range(4000):
        now += rnd.choice((0.0, 0.01, 0.1, 0.5))
        op = rnd.random()
        if op < 0.35:
            sid = f"s{rnd.randrange(300)}"
            if r.ask(sid, f"r{i}", rnd.randrange(1, 200), now):
                live.append((sid, f"r{i}"))
            else:
                waiting.append((sid, f"r{i}"))
        elif op < 0.6 and live:
            sid, _ = live.pop(rnd.randrange(len(live)))
            r.finished(sid, rnd.choice((None, rnd.randrange(1, 300))), now)
        elif op < 0.7:
            r.pin(f"s{rnd.randrange(300)}", rnd.choice((0.3, 1.0, 5.0)), now)
        elif op < 0.78:
            r.release(f"s{rnd.randrange(300)}", now)
        elif op < 0.84 and waiting:
            sid, rid = waiting.pop(rnd.randrange(len(waiting)))
            r.withdraw(sid, rid, now)
        elif op < 0.9:
            admitted = set(r.admit(now))
            live += [w for w in waiting if w[1] in admitted]
            waiting = [w for w in waiting if w[1] not in admitted]
        elif op < 0.95:
            idle = r.idle(now)
            if idle:
                r.inherit(f"h{i}", rnd.choice(idle), now)
        else:
            r.to_refresh(now)
        r.idle(now, among=[])  # lapses what is due
        sessions = r.sessions.values()
        assert all(s.held(now) for s in sessions), i
        assert r.owed == sum(s.blocks for s in sessions) and r.waiting_requests == sum(len(s.waiting) for s in sessions)
        ends = [max(s.pinned_until, s.grace_until) for s in sessions if s.idle() and not s.waiting]
        assert r.next_deadline() == min(ends, default=None), i
    assert r.stats(now)["pins_lapsed"] > 0 and r.admission_waits > 0  # the walk met lapses and waits


def test_renewed_pins_do_not_grow_the_heap_of_deadlines() -> None:
    r = rule()
    turn(r, "a", 30, 50, 0.0)
    for i in range(5000):  # a long tool reporting progress: its pin renewed again and again
        assert r.pin("a", 60.0, i / 1000)
    assert len(r._deadlines) <= 2 * len(r.sessions) + 1025 and r.next_deadline() == 4.999 + 60.0
