"""Dispatch and waking: a job starts when it is enqueued, on any worker of its pool, never twice.

Workers run in-process here with a 30 s poll interval, so a job that starts at all within the
test's few seconds was started by a wake (a token, a freed slot or a hand-off), not a poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable

import msgspec
import pytest
from arq.constants import job_key_prefix

from schemas import keys
from schemas.codec import decode_event, decode_tool_job
from schemas.events import ToolCallInvalid, ToolCallReady, ToolResult, ToolStarted
from runtime import bus
from runtime.config import load_config
from runtime import tool_catalog
from runtime.tool_queue import Dispatcher, arq_pool, tool_job
from workers.tools.registry import Registry, tool
from workers.tools.worker import WakingWorker, build_worker, catalog_entries

GATES: dict[str, asyncio.Event] = {}
STARTED: list[str] = []


@tool(idempotent=True, timeout_s=30.0)
async def hold(key: str) -> str:
    """Wait until the test opens gate ``key``.

    Args:
        key: the gate
    """
    STARTED.append(key)
    await GATES.setdefault(key, asyncio.Event()).wait()
    return key


@tool(idempotent=True, timeout_s=30.0, pool="fast")
async def fast_hold(key: str) -> str:
    """``hold`` on the ``fast`` pool.

    Args:
        key: the gate
    """
    return await hold(key)


@pytest.fixture(autouse=True)
def _reset() -> None:
    GATES.clear()
    STARTED.clear()


@pytest.fixture
def registry() -> Registry:
    return Registry([hold, fast_hold])


@pytest.fixture
async def r(redis_url: str) -> AsyncIterator:
    client = bus.connect(redis_url)
    yield client
    await client.aclose()


@pytest.fixture
async def dispatcher(redis_url: str, registry: Registry, r) -> AsyncIterator[Dispatcher]:
    await tool_catalog.publish(r, catalog_entries(registry))  # as the pools' tool workers do
    arq = await arq_pool(redis_url)
    yield Dispatcher(arq, tool_catalog.ToolCatalog(r))
    await arq.aclose()


@contextlib.asynccontextmanager
async def running(redis_url: str, registry: Registry, n: int = 1, *, pool: str = "default", max_jobs: int = 16,
                  poll_delay_s: float = 30.0, lease_s: float = 3.0, settle_s: float = 0.2
                  ) -> AsyncIterator[list[WakingWorker]]:
    """``n`` in-process workers of ``pool``, each started (and blocked in BLPOP) before the next."""
    r = bus.connect(redis_url)
    await tool_catalog.publish(r, catalog_entries(registry))  # as run_tools_worker does
    cfg = load_config(redis_url=redis_url, pool=pool, tool_max_jobs=max_jobs)
    workers = [build_worker(cfg, r, registry, poll_delay_s=poll_delay_s, lease_s=lease_s, me=f"{pool}-w{i}")
               for i in range(n)]
    tasks = []
    for w in workers:
        tasks.append(asyncio.create_task(w.main()))
        await asyncio.sleep(settle_s)
    try:
        yield workers
    finally:
        for g in GATES.values():
            g.set()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for w in workers:
            await w.close()
        await r.aclose()


async def until(cond: Callable[[], bool], timeout_s: float = 5.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not cond():
            await asyncio.sleep(0.01)


def call(i: int, key: str, name: str = "hold") -> ToolCallReady:
    return ToolCallReady(index=i, id=f"call_0_{i}", name=name, arguments=json.dumps({"key": key}))


async def bodies(r, sid: str, kind: type) -> list:
    rows = await r.xrange(keys.events(sid))
    return [b for b in (decode_event(f[bus.FIELD]).body for _, f in rows) if isinstance(b, kind)]


async def test_a_job_starts_without_waiting_for_a_poll(redis_url, registry, dispatcher) -> None:
    async with running(redis_url, registry):
        assert await dispatcher.dispatch("s", 0, 0, call(0, "a"))
        await until(lambda: STARTED == ["a"])


async def test_calls_of_one_turn_run_concurrently(redis_url, registry, dispatcher, r) -> None:
    async with running(redis_url, registry):
        for i in range(3):
            await dispatcher.dispatch("s", 0, 0, call(i, f"k{i}"))
        await until(lambda: len(STARTED) == 3)  # all three hold at once on one worker
        assert await bodies(r, "s", ToolResult) == []
        for g in GATES.values():
            g.set()
        async with asyncio.timeout(5):
            while len(await bodies(r, "s", ToolResult)) < 3:
                await asyncio.sleep(0.02)


async def test_every_worker_of_a_pool_wakes(redis_url, registry, dispatcher, r) -> None:
    async with running(redis_url, registry, n=3, max_jobs=1):
        for i in range(3):
            await dispatcher.dispatch("s", 0, 0, call(i, f"k{i}"))
            await until(lambda n=i + 1: len(STARTED) == n)  # a full worker never swallows the next token
        workers = {b.worker for b in await bodies(r, "s", ToolStarted)}
        assert workers == {"default-w0", "default-w1", "default-w2"}


async def test_a_full_worker_polls_when_a_slot_frees(redis_url, registry, dispatcher) -> None:
    async with running(redis_url, registry, max_jobs=1):
        await dispatcher.dispatch("s", 0, 0, call(0, "first"))
        await until(lambda: STARTED == ["first"])
        await dispatcher.dispatch("s", 0, 0, call(1, "second"))
        await asyncio.sleep(0.3)
        assert STARTED == ["first"]  # no slot
        GATES["first"].set()
        await until(lambda: STARTED == ["first", "second"])


async def test_a_worker_filled_by_a_poll_hands_the_rest_on(redis_url, registry, dispatcher) -> None:
    async with running(redis_url, registry, n=2, max_jobs=1):  # w0 blocked first: it gets the token
        for i in range(2):  # two jobs, one token
            job = tool_job("s", 0, 0, call(i, f"k{i}"))
            await dispatcher.arq.enqueue_job("run_tool", msgspec.msgpack.encode(job), _job_id=f"s:0:{i}",
                                             _queue_name=keys.tool_queue("default"))
        await dispatcher.wake("default")
        await until(lambda: len(STARTED) == 2)


async def test_a_replayed_dispatch_is_a_no_op(redis_url, registry, dispatcher, r) -> None:
    assert await dispatcher.dispatch("s", 0, 0, call(0, "a"))
    assert not await dispatcher.dispatch("s", 0, 1, call(0, "a"))  # a parser replaying the turn
    assert await r.llen(keys.tool_wake("default")) == 1
    async with running(redis_url, registry):
        await until(lambda: STARTED == ["a"])
        GATES["a"].set()
        async with asyncio.timeout(5):
            while not await bodies(r, "s", ToolResult):
                await asyncio.sleep(0.02)
    assert STARTED == ["a"]


async def test_each_pool_has_its_own_queue(redis_url, registry, dispatcher, r) -> None:
    await dispatcher.dispatch("s", 0, 0, call(0, "f", name="fast_hold"))
    assert await r.zcard(keys.tool_queue("fast")) == 1
    assert await r.zcard(keys.tool_queue("default")) == 0
    async with running(redis_url, registry, pool="default", poll_delay_s=0.05):
        await asyncio.sleep(0.3)
        assert STARTED == []  # a default-pool worker never takes it
        async with running(redis_url, registry, pool="fast"):
            await until(lambda: STARTED == ["f"])


async def test_calls_go_to_the_pool_the_workers_publish(redis_url, registry, r) -> None:
    arq = await arq_pool(redis_url)
    catalog = tool_catalog.ToolCatalog(r, miss_refresh_s=0.0)
    parser_side = Dispatcher(arq, catalog)  # nothing published yet
    assert await catalog.pool_of("fast_hold") == "default"
    async with running(redis_url, registry, pool="fast"):  # publishes its registry: fast_hold -> fast
        assert await catalog.pool_of("fast_hold") == "fast"  # a miss re-reads the catalog at once
        await parser_side.dispatch("s", 0, 0, call(0, "f", name="fast_hold"))
        await until(lambda: STARTED == ["f"])
    assert await catalog.pool_of("never_heard_of") == "default"
    await arq.aclose()


async def test_jobs_are_msgpack_not_pickle(dispatcher, r) -> None:
    await dispatcher.dispatch("s", 0, 0, ToolCallInvalid(index=3, id="call_0_3", name="x", raw="{bad", error="eh"))
    raw = await r.get(job_key_prefix + keys.tool_job_id("s", 0, 3))
    assert raw[0] != 0x80  # pickle's PROTO opcode
    envelope = msgspec.msgpack.decode(raw)
    job = decode_tool_job(envelope["a"][0])
    assert (job.valid, job.error, job.arguments, job.index) == (False, "eh", "{bad", 3)
    assert job.t_ready > 0


async def test_arq_reads_our_job_records(dispatcher) -> None:
    from arq.jobs import Job, JobStatus

    await dispatcher.dispatch("s", 0, 0, call(0, "a"))
    job = Job(keys.tool_job_id("s", 0, 0), dispatcher.arq, _queue_name=keys.tool_queue("default"),
              _deserializer=dispatcher.arq.job_deserializer)
    assert await job.status() == JobStatus.queued
    info = await job.info()
    assert info.function == "run_tool" and decode_tool_job(info.args[0]).name == "hold"


async def test_a_live_worker_keeps_its_lease_and_a_dead_ones_lapses(redis_url, registry, dispatcher) -> None:
    async with running(redis_url, registry, n=2, max_jobs=1, lease_s=1.0, poll_delay_s=0.1) as (w0, w1):
        await dispatcher.dispatch("s", 0, 0, call(0, "a"))
        await until(lambda: STARTED == ["a"])
        await asyncio.sleep(2.0)  # two leases: renewed, so nobody else starts the job
        assert STARTED == ["a"]
        owner = w0 if w0.running() else w1
        owner._lease_task.cancel()  # the owner "dies": no more renewals
        await until(lambda: STARTED == ["a", "a"], 4.0)  # another delivery, job_try 2
