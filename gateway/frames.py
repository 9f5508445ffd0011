"""What the relay hands to clients: one event log entry as a ``Frame``, and stream ids.

An event is stored as its JSON (``schemas.codec``), so a client frame is those bytes with the
entry's ``id`` put in front -- no decoding, no re-encoding.  The relay reads the event's kind
with the rest of its envelope (``event_envelope``: who wrote it, for which turn attempt, at which
seq) and decodes the event only where it must look inside (a ``session.ended``, the metrics of a
few kinds, the OpenAI translators): ``Frame.event``.
Events of earlier versions (msgpack) are decoded and rendered.
"""

from __future__ import annotations

import logging
import re

import msgspec

from schemas.codec import Envelope, UndecodableEntry, decode_event, envelope_of, event_envelope, to_builtins
from schemas.events import Event

log = logging.getLogger(__name__)

StreamId = tuple[int, int]
_ID = re.compile(r"^(\d{1,20})(?:-(\d{1,20}))?$")
_json = msgspec.json.Encoder()
_MAX_PART = 2**64 - 1


class InvalidStreamId(ValueError):
    """A client-supplied event id that is not ``<ms>-<seq>``."""


def parse_id(text: str | bytes) -> StreamId:
    """A client's ``"1700000000000-3"`` (or ``"1700000000000"``, seq 0) as a comparable tuple; checked:
    both parts are 64-bit unsigned, as in Redis."""
    s = text.decode() if isinstance(text, bytes) else text
    m = _ID.match(s.strip())
    pos = (int(m.group(1)), int(m.group(2) or 0)) if m else None
    if pos is None or max(pos) > _MAX_PART:
        raise InvalidStreamId(f"invalid event id {s[:40]!r}; expected <ms>-<seq>, each below 2**64")
    return pos


def stream_pos(entry_id: str) -> StreamId:
    """The comparable position of an id the server gave (well formed by construction)."""
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def fmt_id(i: StreamId) -> str:
    return f"{i[0]}-{i[1]}"


class Frame:
    """One event as relayed: its stream id and position, the JSON text frame clients get, its
    envelope (``env``: body type, writer, turn attempt, seq); the decoded ``event`` on first use."""

    __slots__ = ("id", "pos", "data", "env", "kind", "_stored", "_event")

    def __init__(self, entry_id: str, pos: StreamId, data: bytes, env: Envelope, stored: bytes,
                 event: Event | None = None) -> None:
        self.id, self.pos, self.data, self.env, self.kind = entry_id, pos, data, env, env.kind
        self._stored, self._event = stored, event

    @property
    def event(self) -> Event:
        if self._event is None:
            self._event = decode_event(self._stored)
        return self._event

    def ends(self, turn: int) -> bool:
        """Whether this is the ``session.ended`` of turn ``turn`` or later."""
        return self.kind == "session.ended" and self.env.turn >= turn


def make_frame(entry_id: str, data: bytes, pos: StreamId | None = None) -> Frame | None:
    """The client frame of one ``ts:s:{sid}:ev`` entry; None (logged) when it is not an event."""
    pos = pos or stream_pos(entry_id)
    env = event_envelope(data) if data[:1] == b"{" else None
    if env is not None:
        return Frame(entry_id, pos, b'{"id":"' + entry_id.encode() + b'",' + data[1:], env, data)
    try:
        ev = decode_event(data)
    except UndecodableEntry as exc:
        log.warning("relay: undecodable event %s: %s", entry_id, exc)
        return None
    client = _json.encode(dict(to_builtins(ev), id=entry_id))
    return Frame(entry_id, pos, client, envelope_of(ev), data, ev)


class Seen:
    """What one reader of a session's event log has met, so that it drops what the log may hold
    twice or too late (DESIGN §4: consumers drop what they have seen).

    The parser publishes its per-token events with plain XADDs, no script (``runtime.session``,
    ``Sessions.append_call``): a parser that takes over a turn from one that was stalled rather than
    dead may publish some of them again, and a turn cancelled while its parser was mid-chunk may get
    some after its ``session.ended``.  Each turn attempt's parser events are published in seq
    order, so one at or below the highest seq met for its attempt is a repeat, and one of a turn
    whose ``session.ended`` went by is too late.  Every other writer publishes through a
    once-script (no repeats, nothing after the end), and its events always pass.
    """

    __slots__ = ("seqs", "ended")

    def __init__(self) -> None:
        self.seqs: dict[tuple[int, int], int] = {}  # (turn, attempt) -> highest parser seq met
        self.ended = -1  # highest turn whose session.ended was met

    def fresh(self, frame: Frame) -> bool:
        """Note ``frame``; False when the reader must drop it (see the class doc)."""
        env = frame.env
        if env.src != "parser":
            if frame.kind == "session.ended" and env.turn > self.ended:
                self.ended = env.turn
            return True
        if env.turn <= self.ended:
            return False
        key = (env.turn, env.attempt)
        if self.seqs.get(key, 0) >= env.seq:
            return False
        self.seqs[key] = env.seq
        return True

