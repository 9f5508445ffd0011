"""The tool worker shell: arq's Worker, woken at once, with leased jobs (``turnstream worker tools``).

Pools.  One arq queue per pool (``keys.tool_queue``); a worker serves the pool ``--pool NAME``
(``Config.pool``); start any number of workers per pool.  arq's job model is kept as is:
deterministic job ids, ``job_try``, timeouts, ``max_jobs`` concurrent jobs per worker,
msgspec (not pickle) serialisation.  The job body is ``ToolRunner.run_tool``.  Only the claim
differs: arq's WATCH/EXISTS/ZSCORE/MULTI (four round trips per job) is one script per poll,
over the same keys, on the queue server (non-cluster, like arq itself).

Waking.  Stock arq sleeps ``poll_delay`` (0.5 s) between polls of its queue.  Here a worker
with a free slot waits in ``BLPOP`` on the pool's wake list instead, where the dispatcher pushes
each new job's id, so a job starts as soon as it is enqueued.  Invariants that keep several
workers per pool correct:

* only a worker with a free slot takes a token, and it claims that job right away (one
  script: due, not in progress -> leased), so the job is started by it or already was;
* a full worker waits for one of its jobs to end and then polls at once (no token needed);
* a poll that fills the worker while the queue held more jobs pushes a poll token, so another
  idle worker polls for the rest;
* the full ``poll_delay`` poll stays, however busy the worker, as a backstop (trimmed or
  expired tokens, expired leases below) and for arq's housekeeping.

Crash recovery (leases).  arq marks a started job with ``arq:in-progress:<id>`` and re-runs
the job of a SIGKILLed worker only when that key expires: normally the longest job timeout
+ 10 s.  Here the key is a lease of ``lease_s`` (3 s) that the owning worker renews every
``lease_s / 3`` while the job runs.  When a worker dies, its leases lapse and the next poll of
any worker of the pool restarts the job with ``job_try + 1``: recovery takes at most
``lease_s + poll_delay`` (3.5 s), whatever the tool's timeout.  A worker whose event loop
stalls longer than its lease may see its job started twice: harmless for idempotent tools,
and non-idempotent ones run at most once anyway (``workers.tools.runner``).  SIGTERM stops
taking jobs, lets running ones finish for ``grace_s``, then cancels the rest: arq re-queues
them and a poll token sends another worker of the pool to them at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

import redis.asyncio as aioredis
from arq.connections import RedisSettings, create_pool
from arq.constants import in_progress_key_prefix
from arq.utils import timestamp_ms
from arq.worker import Worker, func
from redis.exceptions import RedisError

from schemas import keys
from runtime.config import Config, default_worker_id
from runtime import tool_catalog
from runtime.heartbeat import Heartbeat
from runtime.tool_queue import POLL_TOKEN, RUN_TOOL, deserialize, push_poll_token, serialize
from workers.tools.registry import Registry
from workers.tools.runner import MAX_DELIVERIES, ToolRunner, job_timeout

log = logging.getLogger(__name__)

LEASE_S = 3.0
POLL_DELAY_S = 0.5
GRACE_S = 5.0
CLOSE_WAIT_S = 2.0


# KEYS: queue, then the in-progress key of each candidate; ARGV: now ms, lease ms, free slots, candidate ids.
# Claims (leases) each candidate that is due and not in progress, up to the free slots: [id, score, ...].
_CLAIM = """
local out, free = {}, tonumber(ARGV[3])
for i = 4, #ARGV do
  if #out >= 2 * free then break end
  local score = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if score and tonumber(score) <= tonumber(ARGV[1]) and redis.call('EXISTS', KEYS[i - 2]) == 0 then
    redis.call('SET', KEYS[i - 2], '1', 'PX', ARGV[2])
    out[#out + 1] = ARGV[i]
    out[#out + 1] = score
  end
end
return out
"""


class WakingWorker(Worker):
    """arq's Worker; idle time is spent in BLPOP on the wake list, and job ownership is leased."""

    def __init__(self, *args: Any, wake: str, lease_s: float = LEASE_S, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.wake, self.lease_s = wake, lease_s
        self.in_progress_timeout_s = lease_s  # arq's in-progress key becomes a renewed lease
        self._slot_freed = asyncio.Event()
        self._next_poll = 0.0
        self._lease_task: asyncio.Task | None = None

    async def main(self) -> None:
        """Poll, then wait for the next reason to poll; until cancelled."""
        if self._pool is None:
            self._pool = await create_pool(self.redis_settings, job_serializer=serialize,
                                           job_deserializer=deserialize, default_queue_name=self.queue_name)
        self.ctx["redis"] = self.pool
        self._claim = self.pool.register_script(_CLAIM)
        if self.on_startup:
            await self.on_startup(self.ctx)
        self._lease_task = self._lease_task or asyncio.create_task(self._renew_leases())
        while True:
            try:
                await self._poll_iteration()
                self._next_poll = time.monotonic() + self.poll_delay_s
                while (job_id := await self._idle()) is not None:  # woken for one job: claim just it
                    await self.start_jobs([job_id])
            except (RedisError, OSError) as exc:
                log.warning("tool worker: queue unavailable (%s); retrying", exc)
                await asyncio.sleep(self.poll_delay_s)

    async def _idle(self) -> bytes | None:
        """The id of a job to claim (a wake token), or None when a full poll is due: a poll token,
        a freed slot while full, or ``poll_delay`` since the last poll."""
        left = self._next_poll - time.monotonic()
        if left <= 0:
            return None
        if self.job_counter >= self.max_jobs:
            self._slot_freed.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(left):
                    await self._slot_freed.wait()
            return None
        popped = await self.pool.blpop([self.wake], timeout=max(left, 0.01))
        return None if popped is None or popped[1] == POLL_TOKEN else popped[1]

    async def start_jobs(self, job_ids: list[bytes]) -> None:
        """Claim up to our free slots of ``job_ids`` in one script (arq: 4 round trips per job) and run them."""
        free = self.max_jobs - self.job_counter
        if free <= 0 or not job_ids:
            return
        ids = [j.decode() for j in job_ids]
        claimed = await self._claim(keys=[self.queue_name, *(in_progress_key_prefix + i for i in ids)],
                                    args=[timestamp_ms(), int(self.lease_s * 1000), free, *ids])
        for job_id, score in zip(claimed[::2], claimed[1::2]):
            await self._run(job_id.decode(), int(float(score)))
        if len(claimed) // 2 == free and len(ids) > free:
            await self._hand_off()

    async def _run(self, job_id: str, score: int) -> None:
        """Start arq's ``run_job`` for a claimed job (its slot accounting, as ``Worker.start_jobs``)."""
        self.job_counter += 1
        await self.sem.acquire()  # never waits: job_counter <= max_jobs < the semaphore's max_jobs + 1
        task = asyncio.create_task(self.run_job(job_id, score))
        task.add_done_callback(lambda _: self._release_sem_dec_counter_on_complete())
        self.tasks[job_id] = task

    async def _hand_off(self) -> None:
        """We are full and the queue may hold more jobs: wake another worker to poll for them."""
        await push_poll_token(self.pool, self.wake)

    def _release_sem_dec_counter_on_complete(self) -> None:
        super()._release_sem_dec_counter_on_complete()
        self._slot_freed.set()

    def running(self) -> list[str]:
        """Ids of the jobs this worker is running now."""
        return [job_id for job_id, t in self.tasks.items() if not t.done()]

    async def _renew_leases(self) -> None:
        while True:
            await asyncio.sleep(self.lease_s / 3)
            ids = self.running()
            if not ids or self._pool is None:
                continue
            try:
                pipe = self.pool.pipeline(transaction=False)
                for job_id in ids:
                    pipe.pexpire(in_progress_key_prefix + job_id, int(self.lease_s * 1000))
                await pipe.execute()
            except (RedisError, OSError) as exc:
                log.warning("tool worker: lease renewal failed (%s)", exc)

    async def drain(self, grace_s: float) -> None:
        """Wait up to ``grace_s`` for the running jobs (leases still renewed)."""
        running = [t for t in self.tasks.values() if not t.done()]
        if running:
            log.info("tool worker: waiting up to %.0f s for %d running jobs", grace_s, len(running))
            await asyncio.wait(running, timeout=grace_s)

    async def close(self) -> None:
        """Cancel the jobs still running (arq re-queues them at once), stop renewing, close the pool."""
        for task in list(self.job_tasks.values()):
            task.cancel()  # the job function only: arq's wrapper then re-queues the job
        running = [t for t in self.tasks.values() if not t.done()]
        if running:
            _, late = await asyncio.wait(running, timeout=CLOSE_WAIT_S)
            for task in late:
                task.cancel()
            await asyncio.gather(*running, return_exceptions=True)
            with contextlib.suppress(RedisError, OSError):
                await push_poll_token(self.pool, self.wake)  # another worker takes them now
        if self._lease_task:
            self._lease_task.cancel()
            await asyncio.gather(self._lease_task, return_exceptions=True)
        if self._pool is not None:
            with contextlib.suppress(RedisError, OSError):
                await self.pool.delete(self.health_check_key)
            await self.pool.aclose()
            self._pool = None


def catalog_entries(registry: Registry) -> list[tool_catalog.ToolInfo]:
    """What this worker's started registry publishes (``runtime.tool_catalog``)."""
    return [tool_catalog.ToolInfo(name=s.name, description=s.description, parameters=s.parameters, pool=s.pool,
                                  idempotent=s.idempotent, source=s.source, server=s.server)
            for s in map(registry.get, registry.names()) if s is not None]


def build_worker(cfg: Config, r: aioredis.Redis, registry: Registry, *, poll_delay_s: float = POLL_DELAY_S,
                 lease_s: float = LEASE_S, me: str = "") -> WakingWorker:
    """A worker for ``cfg.pool``: results and sessions on ``r``, the queue on ``cfg.arq_url``."""
    runner = ToolRunner(cfg, r, registry, me or cfg.worker_id or default_worker_id("tools"))

    return WakingWorker(
        functions=[func(runner.run_tool, name=RUN_TOOL, timeout=job_timeout(registry),
                        max_tries=MAX_DELIVERIES + 1)],
        queue_name=keys.tool_queue(cfg.pool), wake=keys.tool_wake(cfg.pool), lease_s=lease_s,
        max_jobs=cfg.tool_max_jobs, poll_delay=poll_delay_s, keep_result=cfg.session_ttl_s,
        handle_signals=False, job_serializer=serialize, job_deserializer=deserialize,
        health_check_interval=3600, redis_settings=RedisSettings.from_dsn(cfg.arq_url),
    )


async def run_tools_worker(cfg: Config, r: aioredis.Redis, registry: Registry, stop: asyncio.Event,
                           grace_s: float = GRACE_S) -> None:
    """Serve ``cfg.pool`` until ``stop`` is set, then drain and close."""
    await registry.start()  # MCP servers list their tools
    await tool_catalog.publish(r, catalog_entries(registry))  # before the first beat: a live worker's tools are known
    me = cfg.worker_id or default_worker_id("tools")
    worker = build_worker(cfg, r, registry, me=me)
    heartbeat = Heartbeat(r, "tools", me, cfg.heartbeat_ms, cfg.heartbeat_ttl_ms,
                          lambda: {"pool": cfg.pool, "running": len(worker.running()), "max_jobs": cfg.tool_max_jobs})
    await heartbeat.beat()
    task = asyncio.create_task(worker.main())
    beats = asyncio.create_task(heartbeat.loop())
    log.info("tool worker %s up (pool=%s, max_jobs=%d, tools=%s)", me, cfg.pool, cfg.tool_max_jobs,
             registry.names())
    try:
        await stop.wait()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await worker.drain(grace_s)
        beats.cancel()
        await heartbeat.stop()
        await worker.close()
        await registry.aclose()
        log.info("tool worker %s stopped", me)
