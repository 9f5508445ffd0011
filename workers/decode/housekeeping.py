"""What every decoder does besides decoding, every ``lease_s``: the cluster's orphans and sweeps.

* **Adoption.**  A dead decoder's private continuation stream (``ts:decode:w:{worker}``, no
  heartbeat) is moved to the shared queue, where any decoder takes it (re-prefilling from the
  stored conversation); its routing load entry is dropped.
* **Barrier sweep** (one decoder at a time: ``ts:sweep:lock``).  For every active session: client
  calls that waited past ``client_tool_timeout_s`` get an error result, and a turn that
  completed without its continuation being sent (its sender died in between) is completed
  again (``runtime.turns.Turns.complete``; decoders drop duplicate continuations).
"""

from __future__ import annotations

import logging
import time

import redis.asyncio as aioredis

from runtime import bus, routing
from runtime.barrier import overdue_calls, unsent_in
from runtime.client_calls import expire_calls
from runtime.config import Config
from runtime.turns import Turns
from schemas import keys

log = logging.getLogger(__name__)


class Housekeeping:
    def __init__(self, cfg: Config, r: aioredis.Redis, me: str, turns: Turns) -> None:
        self.cfg, self.r, self.me, self.turns = cfg, r, me, turns

    async def run_once(self) -> None:
        await self.adopt_orphans()
        await self.sweep()

    async def adopt_orphans(self) -> None:
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

    async def sweep(self) -> None:
        """Time out overdue client calls; re-complete turns that completed but were never continued.
        Reads every active session's turn and barrier in two round trips, whatever their number."""
        if not await self.r.set(keys.SWEEP_LOCK, self.me, nx=True, px=int(self.cfg.sweep_after_s * 1000)):
            return
        sids = [s.decode() for s in await self.r.zrange(keys.ACTIVE_SESSIONS, 0, -1)]
        turns = await self.turns.sessions.turns_of(sids)
        states = await self.turns.barrier.states(list(zip(sids, turns, strict=True)))
        now = time.time()
        for sid, turn, state in zip(sids, turns, states, strict=True):
            timeout_s = self.cfg.client_tool_timeout_s
            if overdue := overdue_calls(state, now, timeout_s):
                await expire_calls(self.turns, sid, turn, overdue, timeout_s)
            if unsent_in(state, now, self.cfg.sweep_after_s):
                log.info("sid=%s turn=%d sweep: completed turn was never continued", sid, turn)
                await self.turns.complete(sid, turn)
