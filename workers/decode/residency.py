"""Which sessions' KV vLLM keeps while their tools run: admission and refresh over an LRU cache.

vLLM cannot pin blocks.  A finished request's blocks go to the tail of vLLM's free queue, still
hashed (a later prompt with the same prefix finds them), and a new allocation takes blocks from
the queue's head: the blocks freed longest ago are evicted first (``FreeKVCacheBlockQueue``,
``BlockPool.free_blocks``).  A session waiting on its tools has freed its blocks, so under
memory pressure every new turn of another session evicts it, and its continuation recomputes
the whole conversation.  Two rules, applied once per request, keep it instead:

  admission  Sessions stand in the order they first became resident (one whose pin lapsed keeps its
             rank when it comes back: its task began before the ones behind it; one released starts
             anew).  A request is sent to vLLM when the blocks of every session before its own,
             plus its own, fit the pool, each session counted with the growth of one more turn
             (a moving average of how much a session's prompt grows from one request to its
             next: the results its tools return); otherwise it waits, keeping its place.  The
             oldest always runs (as if alone); with room for all, nothing waits.  A continuation
             of a resident session is old, so it goes first, and a new session waits until a
             session before it ends.
  refresh    Before a request is sent while the resident sessions owe more than half the pool,
             each idle pinned session whose blocks were freed before those of a session that has
             since ended is "refreshed": a one-token request over its remembered ids (all cache
             hits) takes its blocks out of the free queue and frees them again at the tail,
             behind the ended sessions' blocks, which vLLM then evicts first.

Session states (one record per resident session, dropped when it is none of these):

    live      requests of it are in vLLM
    waiting   requests of it wait for room (its place is kept)
    pinned    the decoder's pin (``pin``/``release``, from the KV holds) has not lapsed
    grace     a request of it finished less than ``grace_s`` ago: the decoder's pin follows a
              finished turn after a write to Redis, and the session must not lose its place meanwhile

Only pinned sessions are refreshed and reported as pinned; grace only keeps a place.
``Residency`` is the rule, pure logic (the caller passes the time).  A request's own operations
take O(log n) in the resident sessions, n: agents waiting on their tools keep hundreds pinned, and
walking them all in each of a request's half-dozen operations cost ~0.5 ms a request at 300
(``_lapse`` finds the sessions to drop in a heap of their deadlines; the blocks they owe are kept
as a sum).  Admission walks the order (O(n)) only where it must: a session's place behind others
that is not the last, a wait; so does a refresh, once the resident sessions owe more than half
the pool.  ``Gate`` holds a waiting request on the event loop until the rule lets it go, an abort
ends its wait, or the caller leaves.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import math
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

GRACE_S = 2.0  # a finished request's place is kept this long for the decoder's pin to arrive
GROWTH_WEIGHT = 0.25  # of the latest sample in the moving average of a turn's growth
MAX_LAPSED = 4096  # ranks remembered for sessions whose pin lapsed


@dataclass
class _Session:
    rank: int  # when it first became resident: the admission order
    blocks: int = 0  # blocks its KV fills: the kept context, or its live or waiting prompt, the larger
    live: int = 0  # its requests in vLLM
    waiting: list[str] = field(default_factory=list)  # its request ids waiting for room, in arrival order
    pinned_until: float = 0.0
    grace_until: float = 0.0
    freed: int = 0  # when (on the free clock) its blocks last went to vLLM's free queue
    asked: int = 0  # blocks of its latest request's prompt

    def idle(self) -> bool:
        return self.live == 0

    def resting(self) -> bool:
        """Neither live nor waiting: only its pin or grace holds it, until ``until()``."""
        return self.live == 0 and not self.waiting

    def until(self) -> float:
        return max(self.pinned_until, self.grace_until)

    def held(self, now: float) -> bool:
        return not self.resting() or self.until() > now


class Residency:
    """Admission and refresh decisions for one vLLM engine (see the module docstring)."""

    def __init__(self, capacity_blocks: int, block_size: int, grace_s: float = GRACE_S) -> None:
        if capacity_blocks <= 0 or block_size <= 0:
            raise ValueError(f"residency: capacity {capacity_blocks} and block size {block_size} must be > 0")
        self.capacity, self.block_size, self.grace_s = capacity_blocks, block_size, grace_s
        self.sessions: OrderedDict[str, _Session] = OrderedDict()  # by rank
        self.lapsed: OrderedDict[str, int] = OrderedDict()  # the ranks of sessions whose pin lapsed, oldest lapse first
        self.ranks = 0
        self.clock = 0  # the free clock: ticks whenever a session's blocks are freed into vLLM's queue
        self.ended = 0  # the free clock's reading when the latest session that left had freed its blocks
        self.admission_waits = self.refreshes = self.pins_lapsed = 0
        self.growth = 0.0  # blocks a session's prompt grows by from one request to its next (moving average)
        self.owed = 0  # the resident sessions' blocks, summed
        self.waiting_requests = 0  # the resident sessions' waiting request ids, counted
        # (deadline, n, session): when a session that was neither live nor waiting stops being held, pushed
        # whenever that may have changed; an entry whose session is held or changed since is passed over
        self._deadlines: list[tuple[float, int, str]] = []
        self._pushes = itertools.count()

    def blocks(self, tokens: int) -> int:
        return -(-tokens // self.block_size)

    def ask(self, session: str, rid: str, prompt_tokens: int, now: float) -> bool:
        """A request wants to be sent: True if it may go now; otherwise it waits (see ``admit``)."""
        self._lapse(now)
        s = self.sessions.get(session) or self._enter(session)
        n = self.blocks(prompt_tokens)
        if s.asked:
            self.growth += GROWTH_WEIGHT * (max(n - s.asked, 0) - self.growth)
        self._owe(s, max(s.blocks, n))
        s.asked = n
        if not s.waiting and self._room_for(session):
            s.live += 1
            return True
        s.waiting.append(rid)
        self.waiting_requests += 1
        self.admission_waits += 1
        return False

    def admit(self, now: float) -> list[str]:
        """The waiting request ids that may go now (they become live), in one pass over the order."""
        self._lapse(now)
        admitted: list[str] = []
        if not self.waiting_requests:
            return admitted
        before, reserve = 0, math.ceil(self.growth)
        for s in self.sessions.values():
            if s.waiting and (before == 0 or before + s.blocks + reserve <= self.capacity):
                admitted += s.waiting
                s.live += len(s.waiting)
                self.waiting_requests -= len(s.waiting)
                s.waiting = []
            before += s.blocks + reserve
        return admitted

    def withdraw(self, session: str, rid: str, now: float) -> None:
        """A waiting request was given up (aborted or its caller left) before it was sent."""
        s = self.sessions.get(session)
        if s is not None and rid in s.waiting:
            s.waiting.remove(rid)
            self.waiting_requests -= 1
            self._may_lapse(session, s)
        self._lapse(now)

    def finished(self, session: str, kept_tokens: int | None, now: float) -> None:
        """A live request ended; its session's KV now fills ``kept_tokens`` (None: as before)."""
        s = self.sessions.get(session)
        if s is None or s.live == 0:
            return
        s.live -= 1
        if kept_tokens is not None:
            self._owe(s, self.blocks(kept_tokens))
        self.clock += 1
        s.freed, s.grace_until = self.clock, now + self.grace_s
        self._may_lapse(session, s)
        self._lapse(now)

    def pin(self, session: str, seconds: float, now: float) -> bool:
        """Keep ``session`` resident for ``seconds`` (replacing its pin); False if it is not resident."""
        self._lapse(now)
        s = self.sessions.get(session)
        if s is None:
            return False
        s.pinned_until, s.grace_until = now + seconds, 0.0  # the grace only waited for this
        self._may_lapse(session, s)
        return True

    def release(self, session: str, now: float) -> None:
        """Drop the session's pin and grace: it leaves once nothing of it is live or waiting."""
        s = self.sessions.get(session)
        if s is not None:
            s.pinned_until = s.grace_until = 0.0
            self._may_lapse(session, s)
        self._lapse(now)

    def idle(self, now: float, among: list[str] | None = None) -> list[str]:
        """The sessions a new one may continue (``inherit``): the resident idle ones, then the lapsed; of
        ``among`` only, when given (O(len(among)), not O(n))."""
        self._lapse(now)
        if among is None:
            return [sid for sid, s in self.sessions.items() if s.resting()] + list(self.lapsed)
        resident = [(s.rank, sid) for sid in among
                    if (s := self.sessions.get(sid)) is not None and s.resting()]
        return [sid for _, sid in sorted(resident)] + [sid for sid in among if sid in self.lapsed]

    def inherit(self, session: str, predecessor: str, now: float) -> bool:
        """``session``, new, continues ``predecessor``'s conversation (its prompt extends what the
        predecessor's KV holds: a client-side agent loop sends every turn as a new request, hence a
        new session).  It takes the predecessor's place in the order, its blocks and its growth
        record, and the predecessor leaves: one conversation is counted once, where it began, not
        once per turn behind its own earlier turns.  False (nothing changes) unless ``session`` is
        unknown and ``predecessor`` idle or lapsed."""
        self._lapse(now)
        old = self.sessions.get(predecessor)
        if session in self.sessions or (old is not None and not old.resting()):
            return False
        if old is None:
            rank = self.lapsed.pop(predecessor, None)
            if rank is None:
                return False
            self.lapsed[session] = rank  # ``_enter`` puts it back at that rank
            return True
        heir = _Session(rank=old.rank, blocks=old.blocks, freed=old.freed, asked=old.asked,
                        grace_until=now + self.grace_s)  # held until its request asks
        self.sessions = OrderedDict((session, heir) if sid == predecessor else (sid, s)
                                    for sid, s in self.sessions.items())
        self._may_lapse(session, heir)  # the blocks it owes are the predecessor's: the sum stays
        return True

    def to_refresh(self, now: float) -> list[str]:
        """Before a request is sent: the idle pinned sessions to refresh now (their free time moves up)."""
        self._lapse(now)
        if 2 * self.owed <= self.capacity:
            return []
        stale = [sid for sid, s in self.sessions.items()
                 if s.idle() and s.pinned_until > now and s.freed < self.ended]
        for sid in stale:
            self.clock += 1
            self.sessions[sid].freed = self.clock
        self.refreshes += len(stale)
        return stale

    def next_deadline(self) -> float | None:
        """When the next idle session's pin or grace lapses (a waiting request may fit then)."""
        heap = self._deadlines
        while heap:
            deadline, _, sid = heap[0]
            s = self.sessions.get(sid)
            if s is not None and s.resting() and s.until() == deadline:
                return deadline
            heapq.heappop(heap)  # that session is gone, busy or has a later deadline (pushed when it changed)
        return None

    def stats(self, now: float) -> dict[str, Any]:
        pinned = [s for s in self.sessions.values() if s.pinned_until > now]
        return dict(pinned_sessions=len(pinned), pinned_blocks=sum(s.blocks for s in pinned),
                    resident_sessions=len(self.sessions), owed_blocks=self.owed, admission_waiting=self.waiting_requests,
                    admission_waits=self.admission_waits, refreshes=self.refreshes, pins_lapsed=self.pins_lapsed)

    def _room_for(self, session: str) -> bool:
        before, reserve = 0, math.ceil(self.growth)
        if next(reversed(self.sessions)) == session:  # the last (a new session): every other one is before it
            s = self.sessions[session]
            before = self.owed - s.blocks + reserve * (len(self.sessions) - 1)
            return before == 0 or before + s.blocks + reserve <= self.capacity
        for sid, s in self.sessions.items():
            if sid == session:
                return before == 0 or before + s.blocks + reserve <= self.capacity
            before += s.blocks + reserve
        raise KeyError(session)

    def _enter(self, session: str) -> _Session:
        """A session becomes resident: last, or back at its old rank (the order is rebuilt, O(n))."""
        rank = self.lapsed.pop(session, None)
        if rank is None:
            self.ranks += 1
            s = self.sessions[session] = _Session(rank=self.ranks)
            return s
        s = _Session(rank=rank)
        items = [*self.sessions.items(), (session, s)]
        items.sort(key=lambda item: item[1].rank)
        self.sessions = OrderedDict(items)
        return s

    def _owe(self, s: _Session, blocks: int) -> None:
        self.owed += blocks - s.blocks
        s.blocks = blocks

    def _may_lapse(self, session: str, s: _Session) -> None:
        """``s`` may have stopped being live or waiting, or its deadline moved: push when it lapses."""
        if s.resting():
            heapq.heappush(self._deadlines, (s.until(), next(self._pushes), session))
        if len(self._deadlines) > 2 * len(self.sessions) + 1024:  # mostly stale (pins renewed): one per session
            self._deadlines = [(x.until(), next(self._pushes), sid) for sid, x in self.sessions.items() if x.resting()]
            heapq.heapify(self._deadlines)

    def _lapse(self, now: float) -> None:
        """Drop the sessions nothing holds any more (in the order of rank); their blocks become the
        first to evict."""
        heap, due = self._deadlines, []
        while heap and heap[0][0] <= now:
            sid = heapq.heappop(heap)[2]
            s = self.sessions.get(sid)
            if s is not None and not s.held(now):
                due.append((s.rank, sid))
        for _, sid in sorted(set(due)):
            s = self.sessions.pop(sid)
            self.owed -= s.blocks
            self.ended = max(self.ended, s.freed)
            if s.pinned_until > 0.0:  # not released: the pin ran out before the session came back
                self.pins_lapsed += 1
                self.lapsed[sid] = s.rank
                while len(self.lapsed) > MAX_LAPSED:
                    self.lapsed.popitem(last=False)
                log.info("sid=%s pin lapsed: its KV is no longer kept", sid)


class Gate:
    """``Residency`` on the event loop: requests wait here for room (no vLLM in it)."""

    def __init__(self, rule: Residency) -> None:
        self.rule = rule
        self._waiting: dict[str, tuple[str, asyncio.Future[bool]]] = {}  # rid -> (session, True: admitted, False: aborted)
        self._timer: asyncio.TimerHandle | None = None  # wakes the waiters when the next pin or grace lapses

    async def enter(self, session: str, rid: str, prompt_tokens: int) -> bool:
        """Wait until ``rid`` may be sent (True; the caller must then call ``left``) or is aborted (False)."""
        if self.rule.ask(session, rid, prompt_tokens, time.monotonic()):
            return True
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._waiting[rid] = (session, fut)
        self.wake()  # sets the timer for the next lapse
        try:
            await asyncio.shield(fut)
        except BaseException:  # the caller left while waiting: give up the place, or the admission
            self._settle(session, rid, fut)
            raise
        if not fut.result():
            self._settle(session, rid, fut)
        return fut.result()

    def abort(self, rid: str) -> bool:
        """End ``rid``'s wait as aborted; False if it is not waiting."""
        session, fut = self._waiting.pop(rid, (None, None))
        if session is None or fut is None or fut.done():
            return False
        self.rule.withdraw(session, rid, time.monotonic())  # before any other wake could admit it
        fut.set_result(False)
        self.wake()
        return True

    def left(self, session: str, kept_tokens: int | None) -> None:
        """A sent request ended; its session's KV fills ``kept_tokens`` (None: unchanged)."""
        self.rule.finished(session, kept_tokens, time.monotonic())
        self.wake()

    def release(self, session: str) -> None:
        self.rule.release(session, time.monotonic())
        self.wake()

    def wake(self) -> None:
        """Let go every waiting request the rule now admits; while some still wait, wake again at the next lapse."""
        now = time.monotonic()
        for rid in self.rule.admit(now):
            _, fut = self._waiting.pop(rid, (None, None))
            if fut is not None and not fut.done():
                fut.set_result(True)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        deadline = self.rule.next_deadline() if self._waiting else None
        if deadline is not None:
            self._timer = asyncio.get_running_loop().call_later(max(0.0, deadline - now) + 0.01, self.wake)

    def _settle(self, session: str, rid: str, fut: asyncio.Future[bool]) -> None:
        self._waiting.pop(rid, None)
        if fut.done() and fut.result():
            self.rule.finished(session, None, time.monotonic())
        else:
            self.rule.withdraw(session, rid, time.monotonic())
        self.wake()
