"""Pins: finished turns whose KV is held for the session's continuation, until a deadline.

A pin owns a finished ``Sequence`` (its block table holds the references).  The table is
pure bookkeeping: every method that lets go of pins returns the sequences whose blocks the
caller must now deallocate, which turns them into ordinary cached (evictable) blocks.

Policy:
  * deadline = now + min(seconds, max_s); ``seconds`` is the worker's estimate of the tool's
    duration given through ``set_deadline`` (before or after the turn ends), else ``default_s``;
  * the blocks held by all pins never exceed ``max_blocks`` (the pinned share of the pool);
  * whenever a pin must go early (cap or memory pressure), the one with the largest
    expected remaining wait x blocks goes first (InferCept's preserve waste).  The victim
    search is a linear scan: the cost order changes with time, and pins number in hundreds.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from workers.decode.errors import BlockIntegrityError
from workers.decode.native.sequence import Sequence, SequenceStatus

_MAX_REQUESTS = 4096  # pending pin durations remembered for sessions still generating


@dataclass
class Pin:
    seq: Sequence
    deadline: float

    @property
    def num_blocks(self) -> int:
        return len(self.seq.block_table)


class PinTable:
    def __init__(self, max_blocks: int, default_s: float, max_s: float, clock: Callable[[], float]) -> None:
        self.max_blocks, self.default_s, self.max_s, self.clock = max_blocks, default_s, max_s, clock
        self.pins: dict[str, Pin] = {}
        self.requested: OrderedDict[str, float] = OrderedDict()
        self.num_blocks = 0  # block references held by all pins

    def __len__(self) -> int:
        return len(self.pins)

    def get(self, session: str) -> Sequence | None:
        pin = self.pins.get(session)
        return pin.seq if pin else None

    def deadline(self, session: str) -> float | None:
        pin = self.pins.get(session)
        return pin.deadline if pin else None

    def hold(self, seq: Sequence) -> list[Sequence]:
        """Pin a finished turn (replacing the session's older pin); returns sequences let go."""
        dropped = self._drop(seq.session)
        seconds = self.requested.pop(seq.session, self.default_s)
        if seconds <= 0 or self.max_blocks == 0 or len(seq.block_table) > self.max_blocks:
            return dropped + [seq]
        self.pins[seq.session] = Pin(seq, self.clock() + min(seconds, self.max_s))
        self.num_blocks += len(seq.block_table)
        return dropped + self._enforce_cap()

    def set_deadline(self, session: str, seconds: float) -> list[Sequence]:
        """Set the pin's deadline to now + seconds (capped); remembered if the turn is still running."""
        if session not in self.pins:
            self.requested[session] = seconds
            self.requested.move_to_end(session)
            while len(self.requested) > _MAX_REQUESTS:
                self.requested.popitem(last=False)
            return []
        if seconds <= 0:
            return self._drop(session)
        self.pins[session].deadline = self.clock() + min(seconds, self.max_s)
        return []

    def release(self, session: str) -> list[Sequence]:
        """Drop the session's pin and any pending duration."""
        self.requested.pop(session, None)
        return self._drop(session)

    def take(self, session: str) -> Sequence | None:
        """Remove the session's pin and hand its sequence to the caller (a continuation adopts it)."""
        dropped = self._drop(session)
        return dropped[0] if dropped else None

    def expire(self) -> list[Sequence]:
        """Drop every pin whose deadline has passed."""
        now = self.clock()
        expired = [s for s, pin in self.pins.items() if pin.deadline <= now]
        return [seq for session in expired for seq in self._drop(session)]

    def evict(self, exclude: str | None = None) -> Sequence | None:
        """Drop the pin with the largest remaining wait x blocks (not ``exclude``'s); None if none."""
        victim = self._victim(exclude)
        return self.take(victim) if victim is not None else None

    def next_deadline(self) -> float | None:
        return min((pin.deadline for pin in self.pins.values()), default=None)

    def check_integrity(self) -> None:
        """Raise ``BlockIntegrityError`` unless the block count and the pinned sequences agree."""
        held = sum(pin.num_blocks for pin in self.pins.values())
        if held != self.num_blocks:
            raise BlockIntegrityError(f"pins count {self.num_blocks} blocks but hold {held}")
        for session, pin in self.pins.items():
            if pin.seq.session != session or pin.seq.status is not SequenceStatus.FINISHED:
                raise BlockIntegrityError(f"pin of session {session} holds a live or foreign sequence")

    def _victim(self, exclude: str | None) -> str | None:
        now = self.clock()
        costs = {s: max(0.0, p.deadline - now) * p.num_blocks for s, p in self.pins.items() if s != exclude}
        return max(costs, key=lambda s: (costs[s], self.pins[s].num_blocks, s), default=None)

    def _enforce_cap(self) -> list[Sequence]:
        dropped: list[Sequence] = []
        while self.num_blocks > self.max_blocks:
            victim = self.evict()
            if victim is None:
                break
            dropped.append(victim)
        return dropped

    def _drop(self, session: str) -> list[Sequence]:
        pin = self.pins.pop(session, None)
        if pin is None:
            return []
        self.num_blocks -= pin.num_blocks
        return [pin.seq]
