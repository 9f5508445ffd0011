"""How the decode worker cuts the engine's deltas into token-log chunks, and notices a cancel."""

from __future__ import annotations

import logging
import time

from runtime.session import Status
from workers.decode.engine import Engine, GenerateDelta, GenerateRequest

log = logging.getLogger(__name__)


class Coalescer:
    """Buffers deltas: flush the first at once, then every ``n`` tokens or ``ms`` milliseconds."""

    def __init__(self, n: int, ms: float) -> None:
        self.n, self.s = n, ms / 1000.0
        self.text, self.tokens, self.first, self.last_flush = "", 0, True, 0.0
        self.since = 0.0  # wall-clock time the oldest buffered delta was taken from the engine
        self.finished = False  # the engine's last delta was seen

    def add(self, d: GenerateDelta) -> None:
        if not self.text and not self.tokens:
            self.since = time.time()
        self.text += d.text
        self.tokens += d.n_tokens
        self.finished = d.finished

    def due(self, now: float) -> bool:
        return self.tokens > 0 and (self.first or self.tokens >= self.n or now - self.last_flush >= self.s)

    def take(self, now: float) -> tuple[str, int, float]:
        """The buffered text, its token count and when its first delta was taken; empties the buffer."""
        out = (self.text, self.tokens, self.since)
        self.text, self.tokens, self.first, self.last_flush = "", 0, False, now
        return out

    def timeout(self, now: float) -> float | None:
        """Seconds until a time-based flush is due, None when nothing is buffered."""
        return None if not self.tokens else max(0.0, self.last_flush + self.s - now)


class AbortCheck:
    """Between chunks, at most every ``interval_s``: abort the generation when the session was
    cancelled (status no longer active) or has moved on to another turn.  Nothing a cancelled
    turn generates after its ``session.ended`` is published, so the interval bounds only the
    generation wasted (one status read per session per interval: 0.05 commands per token at
    20 tokens/s)."""

    interval_s = 1.0

    def __init__(self, engine: Engine, req: GenerateRequest, sid: str, turn: int) -> None:
        self.engine, self.req, self.sid, self.turn = engine, req, sid, turn
        self.next_at = time.monotonic() + self.interval_s
        self.aborted = False

    def due(self, now: float) -> bool:
        """Whether this chunk's write should also read the session's status (same round trip)."""
        if self.aborted or now < self.next_at:
            return False
        self.next_at = now + self.interval_s
        return True

    async def apply(self, status: bytes | None, turn: bytes | None) -> None:
        if (status or b"").decode() != Status.ACTIVE or int(turn or -1) != self.turn:
            self.aborted = True
            log.info("sid=%s turn=%d cancelled: aborting generation", self.sid, self.turn)
            await self.engine.abort(self.req.rid)
