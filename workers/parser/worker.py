"""The parser worker shell: take ``ParseTurn`` jobs, parse each turn from its token log.

One ``ParseTurn`` job per (turn, attempt), consumed by ``runtime.consumer.Consumer``; the job is
acked when its turn is parsed (``workers.parser.turn_parse.TurnParse``: what is published and
dispatched, and in which order).  Every turn in flight is read by ONE shared token reader
(``workers.parser.token_reader``), and the per-token events of all of them leave in one round
trip per iteration.  The token log is the log of the turn: a parser that takes a job over
replays the turn from its start and publishes only the events past what was already
published for that (turn, attempt).
"""

from __future__ import annotations

import logging
from typing import Any

import redis.asyncio as aioredis

from runtime import bus
from runtime.config import Config, default_worker_id
from runtime.consumer import Consumer, Done
from runtime.heartbeat import Heartbeat
from runtime.tool_queue import Dispatcher
from runtime.turns import Turns
from schemas import keys
from schemas.codec import UndecodableEntry, decode_job
from schemas.events import ParseTurn
from workers.parser.token_reader import TokenReader
from workers.parser.turn_parse import ParseContext, TurnParse, TurnSuperseded

log = logging.getLogger(__name__)


class ParserWorker:
    """The handler of ``ts:parse:jobs``: one ``TurnParse`` per job, all read by one ``TokenReader``."""

    def __init__(self, cfg: Config, r: aioredis.Redis, dispatcher: Dispatcher) -> None:
        self.cfg, self.r, self.dispatcher = cfg, r, dispatcher
        self.me = cfg.worker_id or default_worker_id("parser")
        batcher = bus.Batcher(r)  # one round trip for many sessions
        self.turns = Turns(r, cfg.session_ttl_s, batcher=batcher)
        self.sessions, self.barrier = self.turns.sessions, self.turns.barrier
        self.ctx = ParseContext(cfg, r, self.turns, self.sessions, self.barrier, dispatcher, batcher)
        self.tokens = TokenReader(r, r, batcher, keys.parser_wake(self.me), block_ms=5000)
        reader = bus.GroupReader(r, [keys.PARSE_JOBS], keys.PARSE_GROUP, self.me, count=16, block_ms=cfg.block_ms)
        self.consumer = Consumer(f"parser {self.me}", reader, self, self.turns, lease_s=cfg.lease_s,
                                 reclaim_idle_ms=cfg.reclaim_idle_ms)
        self.heartbeat = Heartbeat(r, "parser", self.me, cfg.heartbeat_ms, cfg.heartbeat_ttl_ms,
                                   lambda: {"turns": len(self.consumer.inflight)})

    async def run(self, stop: Any) -> None:
        await self.heartbeat.beat()
        log.info("parser worker %s up", self.me)
        try:
            await self.consumer.run(stop, also=[self.tokens.run, self.heartbeat.loop])
        finally:
            await self.heartbeat.stop()

    async def handle(self, entry: bus.Entry) -> Done:
        job = decode_job(entry.data)
        if not isinstance(job, ParseTurn):
            raise UndecodableEntry(f"not a parse job: {type(job).__name__}")
        turn = TurnParse(self.ctx, job)
        if not await turn.start():
            return Done.ACK  # the session is gone
        try:
            await self.tokens.parse(turn)
        except TurnSuperseded:
            pass
        return Done.ACK
