"""KV-aware routing: which stream a new turn goes to (real Redis: the embedded server)."""

from __future__ import annotations

import json

import redis.asyncio as aioredis

from schemas import keys
from runtime import bus, routing
from runtime.config import load_config

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
OPENING = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Oslo?"}]


def test_every_request_of_a_conversation_has_the_key_of_its_opening() -> None:
    key = routing.conversation_key(OPENING, TOOLS)
    follow_up = OPENING + [
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c0", "type": "function",
                                                               "function": {"name": "get_weather", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c0", "content": "{\"t\": 3}"}, {"role": "user", "content": "And Rome?"}]
    assert routing.conversation_key(follow_up, TOOLS) == key
    assert routing.conversation_key(OPENING, None) != key  # tools render into the prompt
    assert routing.conversation_key(OPENING[:1] + [{"role": "user", "content": "Weather in Rome?"}], TOOLS) != key


async def test_a_turn_goes_to_the_live_holder_unless_it_is_busier_than_the_rest(redis_url: str) -> None:
    r = aioredis.from_url(redis_url)
    cfg = load_config(redis_url=redis_url, route_max_imbalance=1)

    async def turn_started(c, key: str, worker: str) -> None:
        pipe = r.pipeline(transaction=False)
        routing.turn_started(pipe, c, key, worker)
        await pipe.execute()

    try:
        assert await routing.job_stream(r, cfg, key="k") == keys.DECODE_JOBS  # no route yet
        await turn_started(cfg, "k", "d1")
        assert 0 < await r.ttl(keys.decoder_route("k")) <= cfg.route_ttl_s
        assert await routing.job_stream(r, cfg, key="k") == keys.DECODE_JOBS  # d1 has no heartbeat: dead
        await r.set(keys.decoder_heartbeat("d1"), json.dumps({"running": 1}))
        await r.hset(keys.DECODE_LOAD, "d2", 0)
        assert await routing.job_stream(r, cfg, key="k") == keys.decoder_jobs("d1")  # 1 turn vs 0: within 1
        await turn_started(cfg, "k", "d1")  # 2 vs 0: too busy, any decoder takes it
        assert await routing.job_stream(r, cfg, key="k") == keys.DECODE_JOBS
        assert await routing.job_stream(r, cfg, owner="d1") == keys.DECODE_JOBS
        ended = r.pipeline(transaction=False)
        routing.turn_ended(ended, "d1")
        await ended.execute()
        assert await routing.job_stream(r, cfg, owner="d1") == keys.decoder_jobs("d1")
        await routing.forget_dead(r)  # d2 has no heartbeat: its load is dropped, d1 is the only one left
        assert await r.hkeys(keys.DECODE_LOAD) == [b"d1"]
        await turn_started(cfg, "k", "d1")
        assert await routing.job_stream(r, cfg, key="k") == keys.decoder_jobs("d1")
        off = cfg.replace(kv_routing="off")
        assert await routing.job_stream(r, off, key="k") == keys.DECODE_JOBS
        await turn_started(off, "k2", "d1")
        assert await r.get(keys.decoder_route("k2")) is None
        assert await r.hget(keys.DECODE_LOAD, "d1") == b"3"  # load is kept either way
    finally:
        await r.aclose()


async def test_the_live_decoders_known_and_a_batcher_save_round_trips(redis_url: str) -> None:
    """``live`` (heartbeats the caller read recently) answers for the holder's heartbeat: no EXISTS; the
    lookup through a batcher leaves in one round trip and answers as the plain one does."""
    r = aioredis.from_url(redis_url)
    cfg = load_config(redis_url=redis_url, route_max_imbalance=1)
    batcher = bus.Batcher(r)
    trips: list[int] = []
    real = batcher._round_trip

    async def counted(builds, retry=True):
        trips.append(len(builds))
        return await real(builds, retry)

    batcher._round_trip = counted  # type: ignore[method-assign]
    try:
        await r.set(keys.decoder_route("k"), "d1")
        await r.hset(keys.DECODE_LOAD, mapping={"d1": 0, "d2": 0})
        # d1 has no heartbeat, but the caller saw it alive a moment ago: routed there, no EXISTS asked
        assert await routing.job_stream(r, cfg, key="k", batcher=batcher, live=frozenset({"d1", "d2"})) == \
            keys.decoder_jobs("d1")
        assert trips == [2]  # the load and the route, together
        await r.set(keys.decoder_heartbeat("d1"), "{}")
        assert await routing.job_stream(r, cfg, key="k", batcher=batcher, live=frozenset({"d2", "d3"})) == \
            keys.DECODE_JOBS
        # one decoder alive: a route could name only it, and it reads the shared queue too: no lookup
        del trips[:]
        assert await routing.job_stream(r, cfg, key="k", batcher=batcher, live=frozenset({"d1"})) == keys.DECODE_JOBS
        assert routing.settled(cfg, key="k", live=frozenset({"d1"})) == keys.DECODE_JOBS and trips == []
        assert routing.settled(cfg, key="k", live=frozenset({"d1", "d2"})) is None
        assert routing.settled(cfg, key="k") is None  # nothing known of the decoders: looked up
        assert routing.settled(cfg, owner="d1", live=frozenset({"d1"})) is None  # an owner's stream is its own
        assert await routing.job_stream(r, cfg, key="k", batcher=batcher) == keys.decoder_jobs("d1")  # asks Redis
        assert await routing.job_stream(r, cfg, owner="d1", batcher=batcher, live=frozenset({"d1"})) == \
            keys.decoder_jobs("d1")
        assert trips[-1] == 1  # an owner given: the load alone
    finally:
        await r.aclose()
