"""Failure paths on the real stack: poison entries, a dead decoder, a failing job."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import msgspec
import redis

from schemas import keys
from tests.test_e2e import TWO_CALLS, assert_exactly_once_in_order, kinds, run_session
from runtime import bus

BODY = {"messages": [{"role": "user", "content": "weather and a table please"}], "replay": TWO_CALLS}


async def test_poison_entries_are_dead_lettered_and_workers_go_on(stack_factory) -> None:
    stack = stack_factory(replay_rate=200)
    r = redis.Redis.from_url(stack.cfg.redis_url)
    for stream in (keys.DECODE_JOBS, keys.PARSE_JOBS):
        r.xadd(stream, {bus.FIELD: b"\xc1 not msgpack"})
        r.xadd(stream, {bus.FIELD: msgspec.msgpack.encode({"type": "job.teleport", "sid": "x", "turn": 0})})
        r.xadd(stream, {bus.FIELD: msgspec.msgpack.encode({"type": "job.start", "sid": "x", "turn": 0, "v": 99})})
    _, events = await run_session(stack.url, BODY)
    assert events[-1]["body"]["reason"] == "stop"
    dead = r.xrange(keys.DEAD)
    assert len(dead) == 6
    assert {f[b"stream"] for _, f in dead} == {keys.DECODE_JOBS.encode(), keys.PARSE_JOBS.encode()}
    # every job is acked (a worker acks its last job just after the session's end is published)
    for stream, group in ((keys.DECODE_JOBS, keys.DECODE_GROUP), (keys.PARSE_JOBS, keys.PARSE_GROUP)):
        deadline = time.monotonic() + 10
        while r.xpending(stream, group)["pending"] and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert r.xpending(stream, group)["pending"] == 0, stream
    assert all(p.poll() is None for p in stack.all()), "a worker crashed"


async def test_decoder_killed_mid_turn_restarts_the_turn(stack_factory) -> None:
    stack = stack_factory(replay_rate=30)
    spare: list[Any] = []

    async def kill_decoder_once(sid: str, ev: dict[str, Any]) -> None:
        if spare or ev["body"]["type"] != "content.delta":
            return
        spare.extend(stack.start("decode"))  # a second decoder, then the first dies
        await asyncio.sleep(0.5)
        stack.kill(stack.procs["decode"][0])

    _, events = await run_session(stack.url, BODY, on_event=kill_decoder_once)
    assert_exactly_once_in_order(events)
    assert "turn.restarted" in kinds(events)
    restart = kinds(events).index("turn.restarted")
    after = [e for e in events[restart:] if e["turn"] == 0 and e["body"]["type"] != "turn.restarted"]
    assert after and all(e["attempt"] == 2 for e in after if e["src"] in ("parser", "decoder"))
    # the restarted attempt is complete on its own: its content and both calls
    content = "".join(e["body"]["text"] for e in after if e["body"]["type"] == "content.delta")
    assert content.startswith("Checking both at once.")
    assert kinds(events).count("tool.result") == 2
    assert events[-1]["body"]["reason"] == "stop"


async def test_bad_replay_script_fails_only_its_session(stack_factory) -> None:
    stack = stack_factory(replay_rate=200)
    bad = {"messages": [{"role": "user", "content": "x"}], "replay": ["{{ undefined_thing.x }}"]}
    results = await asyncio.gather(run_session(stack.url, bad), run_session(stack.url, BODY))
    (_, bad_events), (_, good_events) = results
    assert kinds(bad_events)[-2:] == ["error", "session.ended"]
    assert bad_events[-1]["body"]["reason"] == "error"
    assert "replay script" in bad_events[-2]["body"]["message"]
    assert good_events[-1]["body"]["reason"] == "stop"
