"""The body of the ``run_tool`` arq job: one tool call in, one recorded result out, whatever happens.

Every path ends in a ``ToolResult`` recorded in the turn's barrier (exactly once, first write
wins) -- invalid calls, unknown tools, bad arguments, timeouts, exceptions and workers that
died mid-run included -- so a turn never waits on a call that will not answer:

* the call already has a result (a duplicate delivery): nothing happens;
* the parser reported the call invalid (``ToolJob.valid=False``): an error result, nothing runs;
* the job was delivered more than ``MAX_DELIVERIES`` times (its workers keep dying): an error;
* idempotent tool (or unknown name): ``Registry.run``, which validates the arguments, applies
  the tool's timeout and retries with back-off; a re-delivered job simply runs again;
* non-idempotent tool: the run is recorded first (``SET NX`` on ``ts:s:{sid}:t:{turn}:run:{i}``)
  and its outcome stored there when it ends, so a re-delivered job never runs it twice: it
  reports the stored outcome, or -- when the first run died mid-way -- an error saying that
  the effect is unknown and the tool was not run again;
* Redis unreachable while recording: ``arq.Retry`` (the job runs again later, see above).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import msgspec
import redis.asyncio as aioredis
from arq.worker import Retry

from schemas import keys
from schemas.codec import UndecodableEntry, decode_tool_job, encode
from schemas.events import Event, ToolJob, ToolResult, ToolStarted
from runtime import bus
from runtime.barrier import Arrival, Start
from runtime.config import Config
from runtime.turns import Turns
from runtime.durations import Durations
from workers.tools.registry import ErrorKind, Registry, ToolOutcome, ToolSpec

log = logging.getLogger(__name__)

MAX_DELIVERIES = 3  # a job whose workers died this many times gets an error result instead
RETRY_DEFER_S = 1.0  # Redis unreachable: run the job again after this long
SLACK_S = 2.0
_NOT_RUN = {ErrorKind.UNKNOWN_TOOL, ErrorKind.INVALID_JSON, ErrorKind.INVALID_ARGUMENTS, ErrorKind.INTERRUPTED}


def run_budget(registry: Registry, spec: ToolSpec | None) -> float:
    """Longest one ``Registry.run`` of ``spec`` may take: every attempt and back-off, plus slack."""
    if spec is None:
        return SLACK_S
    tries = 1 + (spec.retries if spec.idempotent else 0)
    return spec.timeout_s * tries + registry.retry_delay_s * tries * (tries - 1) / 2 + SLACK_S


def job_timeout(registry: Registry) -> float:
    """arq's timeout for ``run_tool``: a backstop above every tool's own budget."""
    return max([run_budget(registry, registry.get(n)) for n in registry.names()] + [SLACK_S]) + 10.0


def _error(content: str, kind: ErrorKind, ms: float = 0.0) -> ToolOutcome:
    return ToolOutcome(content=f"error: {content}", is_error=True, error_kind=kind.value, duration_ms=ms)


def invalid_call(job: ToolJob) -> ToolOutcome:
    if job.unavailable:
        return _error(f"{job.error}; nothing was run.", ErrorKind.UNKNOWN_TOOL)
    return _error(f"the call to {job.name or 'a tool'} was malformed ({job.error}); nothing was run. "
                  "Emit a complete, valid JSON call.", ErrorKind.INVALID_JSON)


def interrupted(job: ToolJob) -> ToolOutcome:
    return _error(f"{job.name} was interrupted after it started (its tool worker stopped) and is not "
                  "idempotent, so it was not run again; its effect is unknown. Check its state before "
                  "retrying.", ErrorKind.INTERRUPTED)


def gave_up(job: ToolJob, deliveries: int) -> ToolOutcome:
    return _error(f"{job.name} was not completed: the tool worker running it stopped {deliveries} times "
                  "(the call may be crashing it); giving up.", ErrorKind.INTERRUPTED)


class ToolRunner:
    """Runs tool jobs for one worker process; ``run_tool`` is the arq job function."""

    def __init__(self, cfg: Config, r: aioredis.Redis, registry: Registry, me: str) -> None:
        self.cfg, self.r, self.registry, self.me = cfg, r, registry, me
        self.turns = Turns(r, cfg.session_ttl_s)
        self.barrier = self.turns.barrier
        self.durations = Durations(r)

    async def run_tool(self, ctx: dict[str, Any], payload: bytes) -> str:
        try:
            job = decode_tool_job(payload)
        except UndecodableEntry as exc:
            log.warning("undecodable tool job %s: %s", ctx.get("job_id"), exc)
            await self.r.xadd(keys.DEAD, {b"stream": b"arq", b"reason": str(exc)[:2000], bus.FIELD: payload},
                              maxlen=bus.JOB_STREAM_MAXLEN, approximate=True)
            return "undecodable"
        try:
            return await self.run(job, int(ctx.get("job_try", 1)))
        except bus.REDIS_DOWN as exc:
            log.warning("sid=%s turn=%d call %d: redis unavailable (%s); retrying", job.sid, job.turn, job.index, exc)
            raise Retry(defer=RETRY_DEFER_S) from exc
        except Exception as exc:  # the job's outermost boundary: the call still gets a result
            log.exception("sid=%s turn=%d call %d %s: internal error", job.sid, job.turn, job.index, job.name)
            await self.record(job, _error(f"{job.name} could not be run: internal error in the tool worker "
                                          f"({type(exc).__name__})", ErrorKind.EXCEPTION))
            return "error"

    async def run(self, job: ToolJob, job_try: int = 1) -> str:
        """Run one delivery of ``job`` and record its result (nothing when it already has one)."""
        started = b""
        if job.valid:
            started = encode(Event(sid=job.sid, turn=job.turn, attempt=job.attempt, seq=2 * job.index, src="tools",
                                   ts=time.time(), body=ToolStarted(index=job.index, id=job.call_id,
                                                                    name=job.name, worker=self.me)))
        if await self.barrier.start(job.sid, job.turn, job.index, started) == Start.HAS_RESULT:
            return "duplicate"
        outcome = await self.outcome(job, job_try)
        await self.record(job, outcome)
        return "error" if outcome.is_error else "ok"

    async def outcome(self, job: ToolJob, job_try: int) -> ToolOutcome:
        """What the model will see for this delivery of ``job``."""
        if not job.valid:
            return invalid_call(job)
        if job_try > MAX_DELIVERIES:
            return gave_up(job, job_try - 1)
        spec = self.registry.get(job.name)
        if spec is None or spec.idempotent:
            return await self._execute(job, spec)
        return await self._execute_once(job, spec)

    async def _execute(self, job: ToolJob, spec: ToolSpec | None) -> ToolOutcome:
        budget = run_budget(self.registry, spec)
        try:
            async with asyncio.timeout(budget):
                return await self.registry.run(job.name, job.arguments)
        except TimeoutError:
            return _error(f"{job.name} did not finish within {budget:g} s", ErrorKind.TIMEOUT, budget * 1000)

    async def _execute_once(self, job: ToolJob, spec: ToolSpec) -> ToolOutcome:
        """Run a non-idempotent tool at most once per call, whatever the deliveries."""
        key = keys.tool_run(job.sid, job.turn, job.index)
        if not await self.r.set(key, f"running:{self.me}", nx=True, ex=self.cfg.session_ttl_s):
            raw = await self.r.get(key)
            if raw and raw.startswith(b"{"):  # it ran to the end; only its recording was lost
                return msgspec.json.decode(raw, type=ToolOutcome)
            log.warning("sid=%s turn=%d call %d %s: re-delivered after an interrupted run (%s); not re-run",
                        job.sid, job.turn, job.index, job.name, (raw or b"").decode())
            return interrupted(job)
        outcome = await self._execute(job, spec)
        await self.r.set(key, msgspec.json.encode(outcome), xx=True, keepttl=True)
        return outcome

    async def record(self, job: ToolJob, outcome: ToolOutcome) -> Arrival:
        """Publish and record the result once; continue the session if it completes the turn."""
        result = {"index": job.index, "id": job.call_id, "name": job.name, "arguments": job.arguments,
                  "content": outcome.content, "is_error": outcome.is_error, "duration_ms": outcome.duration_ms}
        ev = Event(sid=job.sid, turn=job.turn, attempt=job.attempt, seq=2 * job.index + 1, src="tools",
                   ts=time.time(), body=ToolResult(index=job.index, id=job.call_id, name=job.name,
                                                   content=outcome.content, is_error=outcome.is_error,
                                                   duration_ms=outcome.duration_ms))
        arrival = await self.barrier.result(job.sid, job.turn, job.index, result, encode(ev))
        if job.name in self.registry and outcome.error_kind not in _NOT_RUN:
            await self.durations.learn(job.name, outcome.duration_ms)
        log.info("sid=%s turn=%d call %d %s -> %s in %.1f ms%s", job.sid, job.turn, job.index, job.name,
                 outcome.error_kind or "ok", outcome.duration_ms, "" if arrival else " (duplicate)")
        if arrival == Arrival.COMPLETED:
            await self.turns.complete(job.sid, job.turn)
        return arrival
