"""The tool worker shell: an arq worker that wakes at once and reports into the session.

Keeps arq's job model (ids, retries, timeouts, max jobs) but not its 0.5 s poll sleep:
between polls it blocks on the pool's wake list, which the dispatcher pushes on every
enqueue.  Results go straight to the session's event stream and the turn's barrier (one
script, exactly once); the caller that completes the turn sends the continuation.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import redis.asyncio as aioredis
from arq.connections import RedisSettings, create_pool
from arq.worker import Worker, func

from schemas import keys
from schemas.codec import UndecodableEntry, decode_tool_job, encode
from schemas.events import Event, ToolJob, ToolResult, ToolStarted
from workers import bus
from workers.barrier import Arrival, Barrier, complete_turn
from workers.config import Config
from workers.decode.worker import default_worker_id
from workers.session import Sessions
from workers.tools.dispatch import RUN_TOOL, deserialize, serialize, wake_key
from workers.tools.registry import Registry, ToolOutcome

log = logging.getLogger(__name__)

EWMA_ALPHA = 0.3


class WakingWorker(Worker):
    """arq's Worker, but idle time is spent in BLPOP on the wake list, not in sleep."""

    def __init__(self, *args: Any, wake: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.wake = wake

    async def main(self) -> None:
        if self._pool is None:
            self._pool = await create_pool(self.redis_settings, job_serializer=serialize,
                                           job_deserializer=deserialize, default_queue_name=self.queue_name)
        self.ctx["redis"] = self.pool
        if self.on_startup:
            await self.on_startup(self.ctx)
        while True:
            await self._poll_iteration()
            await self.pool.blpop([self.wake], timeout=self.poll_delay_s)


class ToolRunner:
    """The body of ``run_tool``: validate, run once, publish, record, maybe continue."""

    def __init__(self, cfg: Config, r: aioredis.Redis, registry: Registry) -> None:
        self.cfg, self.r, self.registry = cfg, r, registry
        self.me = cfg.worker_id or default_worker_id("tools")
        self.sessions = Sessions(r)
        self.barrier = Barrier(r, cfg.session_ttl_s)

    async def run_tool(self, ctx: dict[str, Any], payload: bytes) -> str:
        try:
            job = decode_tool_job(payload)
        except UndecodableEntry as exc:
            await self.r.xadd(keys.DEAD, {b"stream": b"arq", b"reason": str(exc), bus.FIELD: payload})
            return "undecodable"
        if await self.barrier.has_result(job.sid, job.turn, job.index):
            return "duplicate"
        outcome = await self._outcome(job, int(ctx.get("job_try", 1)))
        await self._record(job, outcome)
        return "error" if outcome.is_error else "ok"

    async def _outcome(self, job: ToolJob, job_try: int) -> ToolOutcome:
        if not job.valid:
            return ToolOutcome(content=f"error: the call to {job.name or 'a tool'} was malformed ({job.error}); "
                                       "nothing was run. Emit a complete, valid JSON call.", is_error=True,
                               error_kind="invalid_json")
        started = Event(sid=job.sid, turn=job.turn, attempt=job.attempt, seq=2 * job.index, src="tools",
                        ts=time.time(), body=ToolStarted(index=job.index, id=job.call_id, name=job.name, worker=self.me))
        await self.barrier.started(job.sid, job.turn, job.index, encode(started))
        spec = self.registry.get(job.name)
        if spec is not None and not spec.idempotent:
            fresh = await self.r.set(keys.tool_run(job.sid, job.turn, job.index), self.me, nx=True,
                                     ex=self.cfg.session_ttl_s)
            if not fresh:
                return ToolOutcome(content=f"error: {job.name} was interrupted after it started and is not "
                                           "idempotent, so it was not run again; its effect is unknown. "
                                           "Check its state before retrying.", is_error=True,
                                   error_kind="interrupted")
        return await self.registry.run(job.name, job.arguments)

    async def _record(self, job: ToolJob, outcome: ToolOutcome) -> None:
        result = {"index": job.index, "id": job.call_id, "name": job.name, "arguments": job.arguments,
                  "content": outcome.content, "is_error": outcome.is_error, "duration_ms": outcome.duration_ms}
        ev = Event(sid=job.sid, turn=job.turn, attempt=job.attempt, seq=2 * job.index + 1, src="tools",
                   ts=time.time(), body=ToolResult(index=job.index, id=job.call_id, name=job.name,
                                                   content=outcome.content, is_error=outcome.is_error,
                                                   duration_ms=outcome.duration_ms))
        arrival = await self.barrier.result(job.sid, job.turn, job.index, result, encode(ev))
        if not outcome.is_error and self.registry.get(job.name):
            await self._learn_duration(job.name, outcome.duration_ms)
        log.info("sid=%s turn=%d call %d %s -> %s in %.1f ms", job.sid, job.turn, job.index, job.name,
                 "error" if outcome.is_error else "ok", outcome.duration_ms)
        if arrival == Arrival.COMPLETED:
            await complete_turn(self.barrier, self.sessions, job.sid, job.turn)

    async def _learn_duration(self, name: str, ms: float) -> None:
        """EWMA of a tool's duration, read by decoders for pin deadlines (approximate under races)."""
        prev = await self.r.hget(keys.TOOL_DURATIONS, name)
        value = ms if prev is None else (1 - EWMA_ALPHA) * float(prev) + EWMA_ALPHA * ms
        await self.r.hset(keys.TOOL_DURATIONS, name, f"{value:.3f}")


def build_worker(cfg: Config, r: aioredis.Redis, registry: Registry, poll_delay_s: float = 0.5) -> WakingWorker:
    runner = ToolRunner(cfg, r, registry)
    timeout = max([s.timeout_s for s in map(registry.get, registry.names()) if s] + [30.0]) + 5
    worker = WakingWorker(
        functions=[func(runner.run_tool, name=RUN_TOOL, timeout=timeout, max_tries=3)],
        queue_name=keys.tool_queue(cfg.pool), wake=wake_key(cfg.pool), max_jobs=cfg.tool_max_jobs,
        poll_delay=poll_delay_s, keep_result=cfg.session_ttl_s, handle_signals=False,
        job_serializer=serialize, job_deserializer=deserialize, health_check_interval=3600,
        redis_settings=RedisSettings.from_dsn(cfg.arq_url),
    )
    return worker


async def run_tools_worker(cfg: Config, r: aioredis.Redis, registry: Registry, stop: asyncio.Event) -> None:
    worker = build_worker(cfg, r, registry)
    await registry.start()
    task = asyncio.create_task(worker.main())
    log.info("tool worker %s up (pool=%s, tools=%s)", cfg.worker_id or "tools", cfg.pool, registry.names())
    await stop.wait()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await worker.close()
    await registry.aclose()
