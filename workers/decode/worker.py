"""The decode worker shell: read jobs, drive the engine, publish tokens, ack.

Reads ``ts:decode:jobs`` (any decoder) and ``ts:decode:w:{me}`` (continuations for the
sessions whose KV it holds).  For each job it claims the turn (a duplicate or a turn held
by a live decoder is dropped), publishes ``ParseTurn`` and then ``TokenChunk``s to the
session's token log -- the first token at once, then every ``coalesce_tokens`` tokens or
``coalesce_ms`` -- and ``TokenEnd``.  In-flight jobs are leased: the heartbeat re-claims
them so that only a dead decoder's jobs go idle and are taken over.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import redis.asyncio as aioredis

from schemas import keys
from schemas.codec import UndecodableEntry, decode_job, encode
from schemas.events import (ContinueTurn, Event, ParseTurn, StartTurn, TokenChunk, TokenEnd, TurnRestarted,
                            TurnStarted, call_id_prefix)
from runtime import bus, routing
from runtime.barrier import Barrier, complete_turn
from runtime.config import Config, default_worker_id
from workers.decode.chunks import AbortCheck, Coalescer
from workers.decode.engine import Engine, GenerateDelta, GenerateRequest, SamplingParams
from workers.decode.errors import RequestTooLarge
from runtime.session import Sessions, SessionInfo, fail_session
from workers.tools.client import expire_overdue

log = logging.getLogger(__name__)


class DecodeWorker:
    def __init__(self, cfg: Config, engine: Engine, r: aioredis.Redis) -> None:
        self.cfg, self.engine, self.r = cfg, engine, r
        self.me = cfg.worker_id or default_worker_id("decode")
        self.sessions = Sessions(r)
        self.barrier = Barrier(r, cfg.session_ttl_s)
        self.batcher = bus.Batcher(r)  # token chunks of all sessions, one round trip per batch
        self.reader = bus.GroupReader(r, [keys.DECODE_JOBS, keys.decoder_jobs(self.me)], keys.DECODE_GROUP,
                                      self.me, count=16, block_ms=cfg.block_ms)
        self.inflight: dict[str, bus.Entry] = {}
        self.running: set[tuple[str, int]] = set()  # (sid, turn) being generated here
        self._tasks: set[asyncio.Task] = set()

    # ------------------------------------------------------------------ loops
    async def run(self, stop: asyncio.Event) -> None:
        await self.reader.setup()
        await self.engine.start()
        await self._heartbeat()
        loops = [asyncio.create_task(f()) for f in (self._job_loop, self._heartbeat_loop, self._housekeeping_loop)]
        log.info("decode worker %s up (engine=%s)", self.me, self.engine.name)
        await stop.wait()
        for t in loops + list(self._tasks):
            t.cancel()
        await asyncio.gather(*loops, *self._tasks, return_exceptions=True)
        await self.r.delete(keys.decoder_heartbeat(self.me))
        await self.r.hdel(keys.DECODE_LOAD, self.me)
        await self.engine.stop()

    async def _job_loop(self) -> None:
        while True:
            try:
                for entry in await self.reader.read():
                    self._spawn(entry)
            except (aioredis.ConnectionError, aioredis.TimeoutError) as exc:
                log.warning("decode %s: redis unavailable (%s); retrying", self.me, exc)
                await asyncio.sleep(0.5)

    def _spawn(self, entry: bus.Entry) -> None:
        if entry.id in self.inflight:
            return
        self.inflight[entry.id] = entry
        task = asyncio.create_task(self._handle(entry))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _heartbeat(self) -> None:
        stats = dict(self.engine.stats(), worker=self.me, t=time.time())
        pipe = self.r.pipeline(transaction=False)
        pipe.set(keys.decoder_heartbeat(self.me), json.dumps(stats), px=self.cfg.heartbeat_ttl_ms)
        pipe.hset(keys.DECODE_LOAD, self.me, len(self.running))  # corrects any drift of the counts
        await pipe.execute()

    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(self.cfg.heartbeat_ms / 1000)
            try:
                await self._heartbeat()
                await self._renew_leases()
            except (aioredis.ConnectionError, aioredis.TimeoutError) as exc:
                log.warning("decode %s: heartbeat failed: %s", self.me, exc)

    async def _renew_leases(self) -> None:
        """Reset the idle time of in-flight entries so live work is never reclaimed."""
        by_stream: dict[str, list[str]] = {}
        for e in self.inflight.values():
            by_stream.setdefault(e.stream, []).append(e.id)
        for stream, ids in by_stream.items():
            await self.r.xclaim(stream, keys.DECODE_GROUP, self.me, 0, ids, justid=True)

    async def _housekeeping_loop(self) -> None:
        while True:
            await asyncio.sleep(max(0.2, self.cfg.reclaim_idle_ms / 2000))
            try:
                for entry in await self.reader.reclaim(self.cfg.reclaim_idle_ms):
                    self._spawn(entry)
                await self._adopt_orphans()
                await self._sweep()
            except (aioredis.ConnectionError, aioredis.TimeoutError) as exc:
                log.warning("decode %s: housekeeping failed: %s", self.me, exc)

    async def _adopt_orphans(self) -> None:
        """Move the private continuation streams of dead decoders to the shared queue; forget their load."""
        await routing.forget_dead(self.r)
        async for key in self.r.scan_iter(match=keys.decoder_jobs("*"), count=100):
            stream = key.decode()
            worker = stream.rsplit(":", 1)[1]
            if worker == self.me or await self.r.exists(keys.decoder_heartbeat(worker)):
                continue
            rows = await self.r.xrange(stream)
            await bus.publish(self.r, [(keys.DECODE_JOBS, f[bus.FIELD]) for _, f in rows], bus.JOB_STREAM_MAXLEN)
            await self.r.delete(stream)
            log.info("decode %s: adopted %d jobs of dead decoder %s", self.me, len(rows), worker)

    async def _sweep(self) -> None:
        """Re-send continuations of turns that completed but were never continued."""
        if not await self.r.set(f"{keys.PREFIX}:sweep:lock", self.me, nx=True, px=int(self.cfg.sweep_after_s * 1000)):
            return
        for sid_b in await self.r.zrange(keys.ACTIVE_SESSIONS, 0, -1):
            sid = sid_b.decode()
            turn = int(await self.sessions.field(sid, "turn") or 0)
            await expire_overdue(self.barrier, self.sessions, sid, turn, self.cfg.client_tool_timeout_s)
            if await self.barrier.unsent(sid, turn, self.cfg.sweep_after_s):
                log.info("sid=%s turn=%d sweep: completed turn was never continued", sid, turn)
                await complete_turn(self.barrier, self.sessions, sid, turn)

    # ------------------------------------------------------------------ jobs
    async def _handle(self, entry: bus.Entry) -> None:
        try:
            job = decode_job(entry.data)
            if isinstance(job, StartTurn):
                done = await self._turn(job.sid, job.turn, continuation=False)
            elif isinstance(job, ContinueTurn):
                done = await self._turn(job.sid, job.turn + 1, continuation=True)
            else:
                raise UndecodableEntry(f"not a decode job: {type(job).__name__}")
            if done:
                await self._ack(entry)
        except RequestTooLarge as exc:  # the conversation outgrew the context: the client's, not a poison job
            log.warning("decode %s: job %s refused: %s", self.me, entry.id, exc)
            await fail_session(self.sessions, entry, str(exc), self.cfg.session_ttl_s, code="context_length_exceeded")
            await self._ack(entry)
        except UndecodableEntry as exc:
            await bus.dead_letter(self.r, entry, str(exc), keys.DECODE_GROUP)
        except asyncio.CancelledError:
            raise
        except (aioredis.ConnectionError, aioredis.TimeoutError) as exc:
            log.warning("decode %s: job %s interrupted by redis (%s); left pending for a retry", self.me, entry.id, exc)
        except Exception as exc:  # the worker's outermost boundary: log, dead-letter, go on
            log.exception("decode %s: job %s failed", self.me, entry.id)
            await bus.dead_letter(self.r, entry, f"{type(exc).__name__}: {exc}", keys.DECODE_GROUP)
            await fail_session(self.sessions, entry, f"decode failed: {type(exc).__name__}: {exc}",
                               self.cfg.session_ttl_s)
        finally:
            self.inflight.pop(entry.id, None)

    async def _ack(self, entry: bus.Entry) -> None:
        await self.reader.ack(entry)
        if entry.stream != keys.DECODE_JOBS:
            await self.r.xdel(entry.stream, entry.id)

    async def _claim(self, sid: str, turn: int) -> int | None:
        """Attempt number if we now own the turn; None to drop the job; 0 to leave it pending."""
        attempt = await self.sessions.claim_turn(sid, turn, self.me)
        if attempt == -2 and (sid, turn) not in self.running:
            log.info("sid=%s turn=%d resuming a turn this decoder dropped (redis was unavailable)", sid, turn)
            return await self.sessions.claim_turn(sid, turn, self.me, dead_holder=self.me)
        if attempt == -3:
            holder = await self.sessions.field(sid, f"claim:{turn}") or ""
            if await self.r.exists(keys.decoder_heartbeat(holder)):
                return 0  # a live decoder is on it; it will ack
            log.info("sid=%s turn=%d taking over from dead decoder %s", sid, turn, holder)
            attempt = await self.sessions.claim_turn(sid, turn, self.me, dead_holder=holder)
        return attempt if attempt > 0 else (0 if attempt == -3 else None)

    async def _turn(self, sid: str, turn: int, continuation: bool) -> bool:
        """Generate turn ``turn``; True when the job is finished (ack it), False to leave it pending."""
        info = await self.sessions.get(sid)
        if info is None or info.status != "active":
            return True
        attempt = await self._claim(sid, turn)
        if attempt == 0:
            return False
        if attempt is None:
            return True
        self.running.add((sid, turn))
        try:
            await self._generate(info, sid, turn, attempt, continuation)
        finally:
            self.running.discard((sid, turn))
        return True

    async def _generate(self, info: SessionInfo, sid: str, turn: int, attempt: int, continuation: bool) -> None:
        if continuation:
            await self._append_previous_turn(sid, turn - 1)
        messages = await self.sessions.messages(sid)
        req = GenerateRequest(rid=f"{sid}:{turn}:{attempt}", session=sid, messages=messages, tools=info.tools or None,
                              params=SamplingParams.from_dict(info.params), continuation=continuation, turn=turn,
                              metadata=info.meta)
        job = ParseTurn(sid=sid, turn=turn, attempt=attempt, worker=self.me,
                        after=await bus.last_id(self.r, keys.tokens(sid)))
        pipe = self.r.pipeline(transaction=False)
        pipe.xadd(keys.PARSE_JOBS, {bus.FIELD: encode(job)}, maxlen=bus.JOB_STREAM_MAXLEN, approximate=True)
        # this decoder will hold the conversation's KV: route its next requests here (before the turn
        # ends, so that a client's immediate follow-up already finds the route)
        routing.turn_started(pipe, self.cfg, routing.conversation_key(req.messages, req.tools), self.me)
        await pipe.execute()
        if attempt > 1:
            await self._event(sid, turn, attempt, 0, TurnRestarted(reason="decoder lost; regenerating"))
        try:
            text, end = await self._stream(req, sid, turn, attempt, continuation)
            await self._finish(sid, turn, attempt, text, end)
        finally:
            with contextlib.suppress(aioredis.ConnectionError, aioredis.TimeoutError):
                await routing.turn_ended(self.r, self.me)

    async def _stream(self, req: GenerateRequest, sid: str, turn: int, attempt: int,
                      continuation: bool) -> tuple[str, GenerateDelta]:
        co = Coalescer(self.cfg.coalesce_tokens, self.cfg.coalesce_ms)
        parts: list[str] = []
        gen = _with_prefill(self.engine.generate(req), req.params.prefill).__aiter__()
        abort = AbortCheck(self.engine, req, sid, turn)
        try:
            last, seq = await self._pump(gen, co, parts, abort, sid, turn, attempt, continuation)
        finally:
            await self._abandon(req, gen, co)
        end = TokenEnd(turn=turn, attempt=attempt, seq=seq, finish_reason=last.finish_reason or "stop",
                       completion_tokens=last.completion_tokens, prompt_tokens=last.prompt_tokens,
                       cached_tokens=last.cached_tokens, text="".join(parts))
        await self.sessions.end_turn(sid, turn, attempt, encode(end), end.text, bus.TOKEN_STREAM_MAXLEN)
        return end.text, last

    async def _write_chunk(self, sid: str, chunk: bytes, abort: AbortCheck, now: float) -> None:
        """XADD one token chunk; every ``interval_s`` also read the session status in the same round trip."""
        if not abort.due(now):
            await self.batcher.call(lambda pipe: pipe.xadd(keys.tokens(sid), {bus.FIELD: chunk},
                                                           maxlen=bus.TOKEN_STREAM_MAXLEN, approximate=True))
            return
        pipe = self.r.pipeline(transaction=False)
        pipe.xadd(keys.tokens(sid), {bus.FIELD: chunk}, maxlen=bus.TOKEN_STREAM_MAXLEN, approximate=True)
        pipe.hmget(keys.session(sid), "status", "turn")
        _, (status, turn) = await pipe.execute()
        await abort.apply(status, turn)

    async def _abandon(self, req: GenerateRequest, gen: Any, co: Coalescer) -> None:
        """If the stream did not finish (redis lost, task cancelled), stop the engine's request."""
        if co.finished:
            return
        with contextlib.suppress(Exception):
            await self.engine.abort(req.rid)
        with contextlib.suppress(Exception):
            await gen.aclose()

    async def _pump(self, gen: Any, co: Coalescer, parts: list[str], abort: AbortCheck, sid: str, turn: int,
                    attempt: int, continuation: bool) -> tuple[GenerateDelta, int]:
        """Move engine deltas into coalesced token-log entries until the engine finishes."""
        seq = 0
        nxt: asyncio.Task | None = None
        last: GenerateDelta | None = None
        try:
            while last is None or not last.finished:
                wait = co.timeout(time.monotonic())
                if wait is None and nxt is None:  # nothing buffered: just wait for the engine
                    done, last = True, await gen.__anext__()
                else:  # text buffered: wait for the engine, but flush it when it is due
                    nxt = nxt or asyncio.ensure_future(gen.__anext__())
                    done = bool((await asyncio.wait({nxt}, timeout=wait))[0])
                    if done:
                        last, nxt = nxt.result(), None
                if done:
                    if seq == 0 and co.first and co.tokens == 0:
                        await self._event(sid, turn, attempt, 1, TurnStarted(
                            prompt_tokens=last.prompt_tokens, cached_tokens=last.cached_tokens, worker=self.me,
                            continuation=continuation))
                    co.add(last)
                    parts.append(last.text)
                now = time.monotonic()
                if co.due(now) or (last is not None and last.finished and co.tokens):
                    text, n = co.take(now)
                    chunk = encode(TokenChunk(turn=turn, attempt=attempt, seq=seq, text=text, n_tokens=n,
                                              t_emit=time.time()))
                    await self._write_chunk(sid, chunk, abort, now)
                    seq += 1
        finally:
            if nxt is not None:
                nxt.cancel()
        return last, seq

    async def _finish(self, sid: str, turn: int, attempt: int, text: str, last: GenerateDelta) -> None:
        """Pin the KV for the tools' expected duration (the text was recorded with the turn's end)."""
        names = await self._call_names(text)
        if names:
            self.engine.pin(sid, await self._pin_seconds(names))
        else:
            self.engine.release(sid)
        log.info("sid=%s turn=%d attempt=%d done: %d tokens, %s, calls=%s", sid, turn, attempt,
                 last.completion_tokens, last.finish_reason, names)

    async def _call_names(self, text: str) -> list[str]:
        from workers.parser import parse_text

        turn = parse_text(self.cfg.tool_format, text, reasoning=self.cfg.reasoning or None)
        return [c.name for c in turn.calls]

    async def _pin_seconds(self, names: list[str]) -> float:
        """Expected wait for these tools (EWMA of measured durations), with slack, capped."""
        est = await self.r.hmget(keys.TOOL_DURATIONS, *names)
        ms = max((float(e) if e else self.cfg.pin_default_s * 1000) for e in est)
        return min(self.cfg.pin_max_s, 2.0 * ms / 1000 + 1.0)

    async def _append_previous_turn(self, sid: str, turn: int) -> None:
        """Append turn ``turn``'s assistant message and tool results to the conversation, once."""
        from workers.parser import parse_text

        raw = json.loads(await self.sessions.field(sid, f"asst:{turn}") or '{"raw": ""}')["raw"]
        parsed = parse_text(self.cfg.tool_format, raw, reasoning=self.cfg.reasoning or None,
                            call_id_prefix=call_id_prefix(turn))
        results = await self.barrier.results(sid, turn)
        calls = [{"id": r["id"], "type": "function", "function": {"name": r["name"], "arguments": r.get("arguments", "{}")}}
                 for r in results]
        msgs: list[dict[str, Any]] = [{"role": "assistant", "content": parsed.content or None, "tool_calls": calls,
                                       "raw": raw}]
        msgs += [{"role": "tool", "tool_call_id": r["id"], "name": r["name"], "content": r["content"]} for r in results]
        await self.sessions.append_turn(sid, turn, msgs)

    async def _event(self, sid: str, turn: int, attempt: int, seq: int, body: Any) -> None:
        ev = Event(sid=sid, turn=turn, attempt=attempt, seq=seq, src="decoder", ts=time.time(), body=body)
        await self.sessions.publish_once(sid, f"dseq:{turn}:{attempt}", [(seq, encode(ev))], bus.EVENT_STREAM_MAXLEN)


async def _with_prefill(gen: AsyncIterator[GenerateDelta], prefill: str) -> AsyncIterator[GenerateDelta]:
    """The engine's deltas, the first one led by the forced ``prefill``: the turn's text includes it."""
    try:
        async for delta in gen:
            if prefill:
                delta, prefill = dataclasses.replace(delta, text=prefill + delta.text), ""
            yield delta
    finally:
        await gen.aclose()
