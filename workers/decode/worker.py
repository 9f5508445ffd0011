"""The decode worker shell: take turn jobs, claim the turn, run it on the engine, keep the KV.

Reads ``ts:decode:jobs`` (any decoder) and ``ts:decode:w:{me}`` (continuations and routed turns
for the sessions whose KV it holds, the parser's ``TurnParsed`` notes, and ``CancelTurn`` notes
from a cancel of a turn it generates) through
``runtime.consumer.Consumer``.  For a turn job it claims the turn -- a duplicate, or a turn held
by a live decoder, is dropped or left pending -- and runs it (``workers.decode.turn.TurnRun``).
A heartbeat (``ts:decode:hb:{me}``, with the engine's load) tells the others it is alive, and
registers it (``ts:decode:workers``) for ``workers.decode.housekeeping``, which adopts dead
decoders' work and sweeps stalled turns.
"""

from __future__ import annotations

import asyncio
import logging
import time

import redis.asyncio as aioredis

from runtime import bus, cluster
from runtime.config import Config, default_worker_id
from runtime.consumer import REDIS_DOWN, Consumer, Done
from runtime.heartbeat import Heartbeat
from runtime.session import Claim, Claimed, Field
from runtime.turns import Turns
from schemas import keys
from schemas.codec import UndecodableEntry, decode_job
from schemas.events import CancelTurn, ContinueTurn, StartTurn, TurnParsed
from workers.decode.chunks import ChunkWriter
from workers.decode.engine import Engine
from workers.decode.errors import RequestTooLarge
from workers.decode.housekeeping import Housekeeping
from workers.decode.kv_holds import KvHolds
from workers.decode.turn import TurnContext, TurnRun

log = logging.getLogger(__name__)


class DecodeWorker:
    def __init__(self, cfg: Config, engine: Engine, r: aioredis.Redis) -> None:
        self.cfg, self.engine, self.r = cfg, engine, r
        self.me = cfg.worker_id or default_worker_id("decode")
        self.turns = Turns(r, cfg.session_ttl_s)
        self.sessions = self.turns.sessions
        self.kv = KvHolds(cfg, engine, r)
        chunks = ChunkWriter(r, cfg.coalesce_tokens, cfg.coalesce_ms)
        self.ctx = TurnContext(cfg, r, self.me, engine, self.turns, chunks, self.kv)
        self.housekeeping = Housekeeping(cfg, r, self.me, self.turns)
        reader = bus.GroupReader(r, [keys.DECODE_JOBS, keys.decoder_jobs(self.me)], keys.DECODE_GROUP, self.me,
                                 count=16, block_ms=cfg.block_ms)
        self.consumer = Consumer(f"decode {self.me}", reader, self, self.turns, lease_s=cfg.lease_s,
                                 reclaim_idle_ms=cfg.reclaim_idle_ms,
                                 delete_acked=lambda stream: stream != keys.DECODE_JOBS)
        self.heartbeat = Heartbeat(r, "decode", self.me, cfg.heartbeat_ms, cfg.heartbeat_ttl_ms, self._load,
                                   extra=self._report_load)

    async def run(self, stop: asyncio.Event) -> None:
        await self.engine.start()
        await self.heartbeat.beat()
        log.info("decode worker %s up (engine=%s)", self.me, self.engine.name)
        try:
            await self.consumer.run(stop, also=[self.heartbeat.loop, self._housekeeping_loop])
        finally:  # our registry member stays: the others adopt what is left on our stream, then expire it
            await self.heartbeat.stop()
            await self.r.hdel(keys.DECODE_LOAD, self.me)
            await self.engine.stop()

    # ------------------------------------------------------------------ periodic
    def _load(self) -> dict:
        return dict(self.engine.stats(), engine=self.engine.name, turns=len(self.ctx.running),
                    tokens_out=self.ctx.tokens_out)

    def _report_load(self, pipe: object) -> None:
        pipe.hset(keys.DECODE_LOAD, self.me, len(self.ctx.running))  # corrects any drift of the counts
        pipe.zadd(keys.DECODERS, {self.me: time.time()})  # registered by the very beat that makes us routable

    async def _housekeeping_loop(self) -> None:
        while True:
            await asyncio.sleep(self.cfg.lease_s)
            self.kv.prune()
            try:
                await self.housekeeping.run_once()
            except REDIS_DOWN as exc:
                log.warning("decode %s: housekeeping failed: %s", self.me, exc)

    # ------------------------------------------------------------------ jobs
    async def handle(self, entry: bus.Entry) -> Done:
        try:
            return await self._handle(entry)
        except RequestTooLarge as exc:  # the conversation outgrew the context: the client's, not a poison job
            log.warning("decode %s: %s %s refused: %s", self.me, entry.stream, entry.id, exc)
            await self.turns.fail(entry, str(exc), code="context_length_exceeded")
            return Done.ACK

    async def _handle(self, entry: bus.Entry) -> Done:
        match decode_job(entry.data):
            case StartTurn(sid=sid, turn=turn):
                return await self._turn(sid, turn, continuation=False, entry=entry)
            case ContinueTurn(sid=sid, turn=turn):
                return await self._turn(sid, turn + 1, continuation=True, entry=entry)
            case TurnParsed() as parsed:
                await self.kv.parsed(parsed)
                return Done.ACK
            case CancelTurn(sid=sid, turn=turn):
                await self.ctx.cancel(sid, turn)
                return Done.ACK
            case job:
                raise UndecodableEntry(f"not a decode job: {type(job).__name__}")

    async def _claim(self, sid: str, turn: int, claimed: Claimed) -> int | Done:
        """The attempt number if we now own the turn (``claimed``: the first claim's outcome), else
        what to do with the job."""
        if claimed.claim is Claim.HELD_BY_ME:  # not running here (``_turn``): an attempt of ours that broke off
            log.info("sid=%s turn=%d resuming a turn this decoder dropped (redis was unavailable)", sid, turn)
            claimed = await self.sessions.claim_turn(sid, turn, self.me, dead_holder=self.me)
        if claimed.claim is Claim.HELD_BY_OTHER:
            holder = await self.sessions.field(sid, Field.claim(turn)) or ""
            if await self.r.exists(keys.decoder_heartbeat(holder)):
                return Done.LEAVE  # a live decoder is on it; it will ack
            log.info("sid=%s turn=%d taking over from dead decoder %s", sid, turn, holder)
            claimed = await self.sessions.claim_turn(sid, turn, self.me, dead_holder=holder)
        if claimed.claim is Claim.CLAIMED:
            return claimed.attempt
        return Done.LEAVE if claimed.claim is Claim.HELD_BY_OTHER else Done.ACK

    async def _turn(self, sid: str, turn: int, continuation: bool, entry: bus.Entry) -> Done:
        """Generate turn ``turn`` unless the session is over or the turn is not ours to generate.  The
        turn is marked running here before the first await: a duplicate job handled beside it (jobs
        of one read run concurrently) is acked at once, never taken for an attempt that broke off.  On
        one server a turn its decoder parsed (text-only, or a content run with no markup) acks its job
        (``entry``) behind its end, in that round trip
        (``Done.ACKED``); on a cluster the job's stream and the session's keys may be on two nodes,
        whose commands one pipeline does not keep in order."""
        if (sid, turn) in self.ctx.running:
            return Done.ACK
        self.ctx.running.add((sid, turn))
        try:
            start = await self.sessions.start_turn(sid, turn, self.me)  # record, claim, reads: one round trip
            if start.info is None or not start.info.active or start.claimed.claim is Claim.INACTIVE:
                return Done.ACK
            attempt = await self._claim(sid, turn, start.claimed)
            if isinstance(attempt, Done):
                return attempt
            # the reads behind a first claim that took the turn are the turn's; after a takeover, read again
            first = start.claimed.claim is Claim.CLAIMED
            run = TurnRun(self.ctx, start.info, turn, attempt, continuation,
                          messages=start.messages if first else None, after=start.after if first else None,
                          ack=None if cluster.is_cluster(self.r) else lambda: self.consumer.ack_calls(entry))
            await run.run()
        finally:
            self.ctx.done(sid, turn)
        return Done.ACKED if run.acked else Done.ACK
