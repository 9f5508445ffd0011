"""A turn's lifecycle steps that span the session record and the barrier: fold, complete, end.

    parser records asst:{T} ──> barrier completes T ──> complete(T): fold T, then
                                                          continue (ContinueTurn) | end
    parser: a turn without calls (or a oneshot turn) ──> end(T): fold T, publish session.ended
    decoder: a text-only turn (``text_only``) ──> end_text(T): its message, turn.ended, fold, session.ended

``fold`` is the only writer of the conversation list (``ts:s:{sid}:msgs``): it appends a turn's
assistant message -- recorded once by the parser, from the same parse the client saw -- and
its tool results, exactly once (``conv_turn``).  Every ending folds first, so when
``session.ended`` is published the conversation is complete; a continuation is sent only
after its turn is folded, so the decoder reads the conversation and never builds it.

Calls without a result are dropped from the folded message (a cancel while tools ran, a
client that never answered), so every call in the conversation has its tool message -- except
the client calls a ONESHOT or RETURN_CALLS session hands back to its caller, who answers them
in the next request.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import redis.asyncio as aioredis

from runtime import bus
from runtime.barrier import Barrier, results_in
from runtime.session import Field, SessionInfo, SessionMode, Sessions, Status
from schemas import keys
from schemas.codec import UndecodableEntry, decode_job, encode
from schemas.events import CancelTurn, ContinueTurn, ErrorEvent, Event, SessionEnded

log = logging.getLogger(__name__)

STOPS = ("cancelled", "error")  # endings that may come while the turn is still generated: its decoder is told
TEXT_FORMATS_EXCEPT = ("harmony", "auto")  # formats whose text is not all content even without tools (harmony's
# channels need its parser: ``workers.parser.make_parser``), or not known yet


def text_only(tool_format: str, reasoning: str, info: SessionInfo) -> bool:
    """Whether a turn's whole text is its content, so that parsing it is the identity: the session
    offers no tools and takes no client results (``may_call``), no reasoning is separated, and the
    format's text is content.  Such a turn's decoder publishes the parse stage's events itself
    (``workers.decode.turn``); a turn that may call does so up to its first markup, if its format has
    markers (``workers.decode.content_run``), and a parser takes the rest."""
    return not info.may_call and not reasoning and tool_format not in TEXT_FORMATS_EXCEPT


def turn_messages(message: dict[str, Any], results: list[dict[str, Any]], info: SessionInfo) -> list[dict[str, Any]]:
    """The conversation entries of one turn: its assistant message and its calls' tool messages."""
    answered = {r["id"]: r for r in results}

    def kept(call: dict[str, Any]) -> bool:
        returned = info.mode is not SessionMode.LOOP and info.is_client_tool(call["function"]["name"])
        return call["id"] in answered or returned

    calls = message.get("tool_calls") or []
    keep = [c for c in calls if kept(c)]
    msg = {k: v for k, v in message.items() if k != "tool_calls"}
    if keep:
        msg["tool_calls"] = keep
    else:
        msg["content"] = msg.get("content") or ""
    if len(keep) < len(calls):
        msg.pop("raw", None)  # the raw text holds calls that are gone: render from the parts
    tool_msgs = [{"role": "tool", "tool_call_id": c["id"], "name": c["function"]["name"],
                  "content": answered[c["id"]]["content"]} for c in keep if c["id"] in answered]
    return [msg, *tool_msgs]


def client_calls(message: dict[str, Any], info: SessionInfo) -> list[str]:
    """Names of the turn's calls that go to the caller."""
    return [c["function"]["name"] for c in message.get("tool_calls") or []
            if info.is_client_tool(c["function"]["name"])]


class Turns:
    """The steps above, over one Redis connection."""

    def __init__(self, r: aioredis.Redis, ttl_s: int = 3600, batcher: Any = None) -> None:
        self.r, self.ttl_s = r, ttl_s
        self.sessions = Sessions(r, batcher)
        self.barrier = Barrier(r, ttl_s)

    async def fold(self, sid: str, turn: int, info: SessionInfo) -> bool:
        """Append turn ``turn`` to the conversation once; False if it is there or not recorded yet."""
        entries = await self._entries(sid, turn, info)
        return bool(entries) and await self.sessions.append_turn(sid, turn, entries)

    async def _entries(self, sid: str, turn: int, info: SessionInfo) -> list[dict[str, Any]]:
        """Turn ``turn``'s conversation entries from its recorded message and results ([]: not recorded)."""
        message, results = await asyncio.gather(self.sessions.turn_message(sid, turn),
                                                self.barrier.results(sid, turn))  # side by side
        return [] if message is None else turn_messages(message, results, info)

    async def complete(self, sid: str, turn: int) -> None:
        """The barrier told us we completed ``turn``: fold it, then continue the session or end it.
        The record, the turn's message and its results come in one round trip; the fold goes in
        the continuation's (before its job is queued) or in the ending's script."""
        info, message, bar = await self.sessions.turn_record(sid, turn, also=self.barrier.read(sid, turn))
        if info is None:  # the session's record is gone: nothing to continue
            await self.barrier.mark_sent(sid, turn)
            return
        entries = [] if message is None else turn_messages(message, results_in(bar), info)
        if not info.active:  # stopped while its tools ran: folded, and nothing to continue
            if entries:
                await self.sessions.append_turn(sid, turn, entries)
            await self.barrier.mark_sent(sid, turn)
            return
        reason = None
        if info.mode is SessionMode.RETURN_CALLS and client_calls(message or {}, info):
            reason = "tool_calls"
        elif turn + 1 >= info.max_turns:
            reason = "max_turns"
        if reason is not None:
            await self._end(sid, turn, reason, "", info, entries)
            await self.barrier.mark_sent(sid, turn)
            return
        fold = self.sessions.fold_call(sid, turn, entries) if entries else None
        await self.barrier.send_continuation(sid, turn, owner=info.owner, first=fold)

    async def end(self, sid: str, turn: int, reason: str, content: str = "", *,
                  info: SessionInfo | None = None, parsed: dict[str, Any] | None = None) -> bool:
        """Fold the turn, publish ``session.ended`` once per turn, mark the record ended and let its
        keys expire, in one script.  The first ending of a turn wins: a cancel is not overwritten by
        the aborted turn's own end.  A continued session (a new user message) ends again at a later turn.

        ``parsed``: the turn's message as its parser just recorded it, given when the turn has no
        results to fold (no calls, or a ONESHOT turn, whose calls go back to its caller): nothing is
        read back."""
        info = info or await self.sessions.get(sid)
        entries: list[dict[str, Any]] = []
        if info is not None:
            entries = (turn_messages(parsed, [], info) if parsed is not None
                       else await self._entries(sid, turn, info))
        return await self._end(sid, turn, reason, content, info, entries)

    async def end_text(self, sid: str, turn: int, attempt: int, reason: str, message: dict[str, Any],
                       seq: int, turn_ended: bytes, info: SessionInfo) -> int:
        """End a turn its decoder parsed (``text_only``, or a content run with no markup) and its session in
        one script (``end_text_call``, run alone):
        the turn generated, its ``message`` recorded, ``turn_ended`` (the parse stage's event ``seq``)
        published, the turn folded and ``session.ended`` published once.  1: ended here; 0: the session
        had ended already (a cancel came first); -1: a newer attempt holds the turn (nothing written)."""
        call = self.end_text_call(sid, turn, attempt, reason, message, seq, turn_ended, info)
        return int(await call.script(keys=call.keys, args=call.args))

    def end_text_call(self, sid: str, turn: int, attempt: int, reason: str, message: dict[str, Any], seq: int,
                      turn_ended: bytes, info: SessionInfo) -> bus.ScriptCall:
        """``end_text``'s script run, to queue on a pipeline with other commands (its reply as ``end_text``'s)."""
        data, status = self._ending(sid, turn, reason, message["content"])
        return self.sessions.end_text_call(sid, turn, attempt, message, seq, turn_ended, data, status,
                                           bus.EVENT_STREAM_MAXLEN, entries=turn_messages(message, [], info),
                                           ttl_s=self.ttl_s)

    @staticmethod
    def _ending(sid: str, turn: int, reason: str, content: str) -> tuple[bytes, Status]:
        """The ``session.ended`` event of an ending and the status it leaves."""
        ev = Event(sid=sid, turn=turn, attempt=0, seq=0, src="session", ts=time.time(),
                   body=SessionEnded(reason=reason, content=content))
        return encode(ev), Status.CANCELLED if reason == "cancelled" else Status.ENDED

    async def _end(self, sid: str, turn: int, reason: str, content: str, info: SessionInfo | None,
                   entries: list[dict[str, Any]]) -> bool:
        data, status = self._ending(sid, turn, reason, content)
        if not await self.sessions.end_once(sid, turn, data, status, bus.EVENT_STREAM_MAXLEN,
                                            entries=entries, ttl_s=self.ttl_s):
            return False
        if reason in STOPS and (info is None or not info.oneshot):  # it may be waiting for results: not
            await self.barrier.forget(keys.waiting_turn(sid, turn))  # for the sweep any more
        if reason in STOPS and info is not None and info.owner and info.turn == turn:
            await self._stop_generating(sid, turn, info.owner)
        return True

    async def _stop_generating(self, sid: str, turn: int, owner: str) -> None:
        """Tell the decoder that claimed the turn to abort it now (``CancelTurn``), not at its next
        status check.  The note never creates a stream (NOMKSTREAM): a decoder that is gone has none,
        and one that never started the turn acks the note."""
        try:
            await bus.add(self.r, keys.decoder_jobs(owner), encode(CancelTurn(sid=sid, turn=turn)), nomkstream=True)
        except bus.REDIS_DOWN as exc:  # the decoder's status check still stops the turn
            log.warning("sid=%s turn=%d could not tell decoder %s to stop: %s", sid, turn, owner, exc)

    async def fail(self, entry: bus.Entry, message: str, code: str = "worker_error") -> None:
        """A job of this session failed for good: tell the client and end the session (others go on)."""
        try:
            job = decode_job(entry.data)
        except UndecodableEntry:
            return  # no session to tell
        # a continuation job names the turn it continues; what failed is the turn it was to generate,
        # which its decoder may already have claimed (the session's ``turn``): a client that subscribed
        # since waits for that turn's ``session.ended``
        turn = job.turn + 1 if isinstance(job, ContinueTurn) else getattr(job, "turn", 0)
        ev = Event(sid=job.sid, turn=turn, attempt=0, seq=0, src="error", ts=time.time(),
                   body=ErrorEvent(message=message[:2000], code=code))
        await self.sessions.publish_once(job.sid, turn, Field.error(turn), [(0, encode(ev))], bus.EVENT_STREAM_MAXLEN)
        await self.end(job.sid, turn, "error")
