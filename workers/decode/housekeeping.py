"""What every decoder does besides decoding, every ``lease_s``: the cluster's orphans and sweeps.

* **Adoption.**  A dead decoder's private continuation stream (``ts:decode:w:{worker}``, no
  heartbeat) is moved to the shared queue, where any decoder takes it (re-prefilling from the
  stored conversation); its routing load entry is dropped.  The decoders are found in their
  registry, ``ts:decode:workers`` (decoder -> unix time of its last beat, written by every beat),
  never by scanning the keyspace: a pass reads the registry, every other decoder's heartbeat in
  one pipeline and every dead one's stream in another, so it costs O(decoders) whatever the
  number of keys.  A dead decoder stays registered, its stream re-read every pass, until its
  last beat is ``grace_s`` old: a writer that saw its heartbeat just before it lapsed may still
  append to its stream (``runtime.routing.job_stream``, ``runtime.barrier``), and a later pass
  adopts that entry too (until then a pass deletes the entries it moved, not the stream).  Then
  its member and its stream are deleted.  A decoder that stops cleanly leaves its member
  as one that died does: continuations may be queued on its stream, for the others to adopt.
* **Barrier sweep** (one decoder at a time: ``ts:sweep:lock``).  For every turn that ended with
  calls and was not yet seen continued (``runtime.barrier``'s index): client calls that waited
  past ``client_tool_timeout_s`` get an error result, and a turn that completed without its
  continuation being sent (its sender died in between) is completed again
  (``runtime.turns.Turns.complete``; decoders drop duplicate continuations).  A session that is
  generating costs the sweep nothing.
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

GRACE_S = 60.0
GONE_S = 60.0  # an indexed turn whose barrier is still empty this long after: expired (or never written)


def grace_s(cfg: Config) -> float:
    """How long after its last beat a dead decoder stays registered, its stream re-adopted every pass.

    A writer checks the heartbeat, then appends: one round trip later, or a stall later (an event
    loop that lags, a failover its client retries through, typically seconds).  The grace must
    outlast such a stall counted from the heartbeat's expiry, ``heartbeat_ttl_ms`` after the last
    beat, so: a minute, or ten TTLs where heartbeats are slow.  It costs a few reads a pass per
    recently dead decoder.  A write later than that leaves a stream nobody adopts (a parser's note to a
    decoder, which no other decoder needs, never creates the stream: ``NOMKSTREAM``)."""
    return max(GRACE_S, 10 * cfg.heartbeat_ttl_ms / 1000)


class Housekeeping:
    def __init__(self, cfg: Config, r: aioredis.Redis, me: str, turns: Turns) -> None:
        self.cfg, self.r, self.me, self.turns = cfg, r, me, turns

    async def run_once(self) -> None:
        await self.adopt_orphans()
        await self.sweep()

    async def adopt_orphans(self) -> None:
        """Move the private continuation streams of dead decoders to the shared queue; forget their load
        and, past ``grace_s``, their registration."""
        await routing.forget_dead(self.r)
        dead = await self._dead_decoders()
        if not dead:
            return
        pipe = self.r.pipeline(transaction=False)  # streams of many slots: not a transaction
        for worker in dead:
            pipe.xrange(keys.decoder_jobs(worker))
        for worker, rows in zip(dead, await pipe.execute(), strict=True):
            if rows:
                await self._adopt(worker, rows)
        too_old = time.time() - grace_s(self.cfg)
        if expired := [w for w, last in dead.items() if last < too_old]:
            await self._forget(expired)

    async def _dead_decoders(self) -> dict[str, float]:
        """The registered decoders, other than this one, without a heartbeat -> their last beat."""
        others = {w.decode(): last for w, last in await self.r.zrange(keys.DECODERS, 0, -1, withscores=True)}
        others.pop(self.me, None)
        if not others:
            return {}
        pipe = self.r.pipeline(transaction=False)  # heartbeats of many slots, as ``routing.forget_dead``
        for worker in others:
            pipe.exists(keys.decoder_heartbeat(worker))
        return {w: last for (w, last), alive in zip(others.items(), await pipe.execute(), strict=True) if not alive}

    async def _adopt(self, worker: str, rows: list[tuple[bytes, dict[bytes, bytes]]]) -> None:
        """Republish a dead decoder's entries on the shared queue, then delete just those: an entry
        appended in between stays for the next pass."""
        await bus.publish(self.r, [(keys.DECODE_JOBS, f[bus.FIELD]) for _, f in rows], bus.JOB_STREAM_MAXLEN)
        await self.r.xdel(keys.decoder_jobs(worker), *[entry_id for entry_id, _ in rows])
        log.info("decode %s: adopted %d jobs of dead decoder %s", self.me, len(rows), worker)

    async def _forget(self, workers: list[str]) -> None:
        """Unregister decoders dead for longer than the grace and delete their adopted streams."""
        pipe = self.r.pipeline(transaction=False)
        for worker in workers:
            pipe.delete(keys.decoder_jobs(worker))
        pipe.zrem(keys.DECODERS, *workers)
        await pipe.execute()
        log.info("decode %s: unregistered dead decoders %s", self.me, ", ".join(workers))

    async def sweep(self) -> None:
        """Time out overdue client calls; re-complete turns that completed but were never continued.
        Reads the turns in the sweep's index (``Barrier.waiting``: those that ended with calls and
        were not yet seen sent) and their barriers in two round trips, whatever their number; drops
        from it, in one more, the turns whose barrier says sent (or is long gone)."""
        if not await self.r.set(keys.SWEEP_LOCK, self.me, nx=True, px=int(self.cfg.sweep_after_s * 1000)):
            return
        barrier = self.turns.barrier
        waiting = await barrier.waiting()
        turns = [keys.waiting_turn_of(member) for member, _ in waiting]
        states = await barrier.states(turns)
        now = time.time()
        done: list[bytes] = []  # continued: ``sent`` is final
        gone: list[tuple[bytes, float]] = []  # expired, unless its turn end comes again meanwhile
        for (member, indexed), (sid, turn), state in zip(waiting, turns, states, strict=True):
            if b"sent" in state:
                done.append(member)
                continue
            if not state:
                if now - indexed > GONE_S:
                    gone.append((member, indexed))
                continue
            timeout_s = self.cfg.client_tool_timeout_s
            if overdue := overdue_calls(state, now, timeout_s):
                await expire_calls(self.turns, sid, turn, overdue, timeout_s)
            if unsent_in(state, now, self.cfg.sweep_after_s):
                log.info("sid=%s turn=%d sweep: completed turn was never continued", sid, turn)
                await self.turns.complete(sid, turn)
        await barrier.forget(*done)
        await barrier.forget_unchanged(gone)
