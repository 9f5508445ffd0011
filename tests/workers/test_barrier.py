"""The fan-in barrier completes each turn exactly once, whatever the order of arrivals."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from schemas import keys
from schemas.codec import decode_job
from schemas.events import ContinueTurn
from workers import bus
from workers.barrier import Arrival, Barrier, complete_turn
from workers.session import Sessions


@pytest.fixture
async def r(redis_url: str):
    client = bus.connect(redis_url)
    yield client
    await client.aclose()


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
    b, sessions = Barrier(r), Sessions(r)
    await sessions.create("s", [{"role": "user", "content": "hi"}], max_turns=1)
    await complete_turn(b, sessions, "s", 0)
    assert await r.xlen(keys.DECODE_JOBS) == 0
    assert (await sessions.get("s")).status == "ended"
