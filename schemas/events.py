"""The wire contract: every message that crosses Redis, as frozen msgspec Structs.

Three families, each a tagged union with explicit string tags (never reuse or rename one):

* ``Body`` -- client-facing event payloads, carried in an ``Event`` envelope on the
  public session stream ``ts:s:{sid}:ev``.  The parser library emits the parse-level
  bodies (content, reasoning, tool-call begin/args/ready/invalid) without envelope.
* ``TokenEntry`` -- the decoder's internal token log ``ts:s:{sid}:tok``.
* ``Job`` -- work items on the decode and parse job streams.

Schema evolution: append fields with defaults; bump ``SCHEMA_VERSION`` only for an
incompatible change.  Entries with an unknown tag or version are dead-lettered.
"""

from __future__ import annotations

from typing import Union

import msgspec

SCHEMA_VERSION = 1


class _Tagged(msgspec.Struct, frozen=True, tag_field="type", kw_only=True):
    """Base of every tagged message."""


# --------------------------------------------------------------------------- parse level
class ContentDelta(_Tagged, tag="content.delta"):
    text: str


class ReasoningDelta(_Tagged, tag="reasoning.delta"):
    text: str


class ToolCallBegin(_Tagged, tag="tool_call.begin"):
    """A call's name is known; emitted exactly once per call, before any fragment."""

    index: int
    id: str
    name: str


class ToolCallArgs(_Tagged, tag="tool_call.args"):
    """A fragment of a call's JSON arguments; fragments concatenate to ``ToolCallReady.arguments``."""

    index: int
    delta: str


class ToolCallReady(_Tagged, tag="tool_call.ready"):
    """A complete call with valid JSON ``arguments``; the only kind that is dispatched."""

    index: int
    id: str
    name: str
    arguments: str


class ToolCallInvalid(_Tagged, tag="tool_call.invalid"):
    """A call that was malformed (``truncated=False``), cut off by the end of the stream, or names
    a tool the session was not given (``unavailable``); never run."""

    index: int
    id: str
    name: str = ""
    raw: str = ""
    error: str = ""
    truncated: bool = False
    unavailable: bool = False


ParseBody = Union[ContentDelta, ReasoningDelta, ToolCallBegin, ToolCallArgs, ToolCallReady, ToolCallInvalid]


# --------------------------------------------------------------------------- session level
class TurnStarted(_Tagged, tag="turn.started"):
    """The decoder admitted a turn: prompt size and how much of it came from cache."""

    prompt_tokens: int = 0
    cached_tokens: int = 0
    worker: str = ""
    continuation: bool = False
    host_cached_tokens: int = 0  # of ``cached_tokens``: copied back from the host KV tier (the rest was on the device)


class TurnRestarted(_Tagged, tag="turn.restarted"):
    """A turn is being generated again (its decoder died); discard that turn's deltas."""

    reason: str = ""


class ToolStarted(_Tagged, tag="tool.started"):
    index: int
    id: str
    name: str
    worker: str = ""


class ToolResult(_Tagged, tag="tool.result"):
    index: int
    id: str
    name: str
    content: str
    is_error: bool = False
    duration_ms: float = 0.0


class TurnEnded(_Tagged, tag="turn.ended"):
    """The parser flushed the turn; ``n_calls`` ready + invalid calls are awaited by the barrier."""

    finish_reason: str
    completion_tokens: int = 0
    n_calls: int = 0
    stop_sequence: str | None = None  # the request's stop string that ended the turn, if one did


class SessionEnded(_Tagged, tag="session.ended"):
    reason: str  # "stop" | "max_turns" | "cancelled" | "error" | "tool_calls" (client tools)
    content: str = ""


class ErrorEvent(_Tagged, tag="error"):
    message: str
    code: str = "internal"


SessionBody = Union[TurnStarted, TurnRestarted, ToolStarted, ToolResult, TurnEnded, SessionEnded, ErrorEvent]
Body = Union[ParseBody, SessionBody]
PARSE_BODIES = (ContentDelta, ReasoningDelta, ToolCallBegin, ToolCallArgs, ToolCallReady, ToolCallInvalid)


class Event(msgspec.Struct, frozen=True, kw_only=True):
    """Envelope of one entry of ``ts:s:{sid}:ev``; ``(turn, attempt, seq, src)`` makes it idempotent.

    ``src`` names the producer family (``parser``, ``decoder``, ``tools``, ``gateway``) whose own
    ``seq`` counter orders its events within a turn attempt; the pair is unique per entry.
    """

    sid: str
    turn: int
    attempt: int
    seq: int
    src: str
    body: Body
    ts: float = 0.0  # publish time (producer clock)
    v: int = SCHEMA_VERSION
    t0: float = 0.0  # origin time: when the decoder emitted the tokens this event came from


# --------------------------------------------------------------------------- token log
class TokenChunk(_Tagged, tag="tok.chunk"):
    """Coalesced decoded text; ``seq`` counts chunks within one (turn, attempt)."""

    turn: int
    attempt: int
    seq: int
    text: str
    n_tokens: int
    t_emit: float = 0.0
    v: int = SCHEMA_VERSION


class TokenEnd(_Tagged, tag="tok.end"):
    turn: int
    attempt: int
    seq: int
    finish_reason: str  # "stop" | "length" | "abort" | "error"
    completion_tokens: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    text: str = ""  # the whole completion, so a late parser can check what it parsed
    stop_sequence: str | None = None  # the request's stop string that ended it (finish_reason "stop")
    v: int = SCHEMA_VERSION


TokenEntry = Union[TokenChunk, TokenEnd]


# --------------------------------------------------------------------------- jobs
class StartTurn(_Tagged, tag="job.start"):
    """Generate turn ``turn`` of a session from its stored conversation."""

    sid: str
    turn: int
    attempt: int = 0
    v: int = SCHEMA_VERSION


class ContinueTurn(_Tagged, tag="job.continue"):
    """Tool results of ``turn`` are all in: append them and generate ``turn + 1``."""

    sid: str
    turn: int
    attempt: int = 0
    v: int = SCHEMA_VERSION


class ParseTurn(_Tagged, tag="job.parse"):
    """Parse turn ``turn`` (attempt ``attempt``) of ``sid`` from its token log, starting after ``after``.
    ``seq`` and ``content``: the parse stage's events the decoder already published for the attempt (its
    content events 1..seq, whose text is ``content``) before the token log took over from its first
    markup (``workers.decode.content_run``); the parser goes on from there."""

    sid: str
    turn: int
    attempt: int
    after: str = "0-0"
    worker: str = ""
    seq: int = 0
    content: str = ""
    v: int = SCHEMA_VERSION


class TurnParsed(_Tagged, tag="job.parsed"):
    """The parser finished turn ``turn``: the names of its calls, for the decoder holding its KV
    (which pins the KV for the calls' expected duration, or releases it)."""

    sid: str
    turn: int
    attempt: int
    calls: list[str] = []
    v: int = SCHEMA_VERSION


class ToolJob(msgspec.Struct, frozen=True, kw_only=True):
    """The arq job payload for one tool call (serialised with msgspec, not pickle)."""

    sid: str
    turn: int
    attempt: int
    index: int
    call_id: str
    name: str
    arguments: str
    valid: bool = True
    error: str = ""
    t_ready: float = 0.0
    v: int = SCHEMA_VERSION
    unavailable: bool = False  # the session was not given this tool (``error`` says which it has)


class CancelTurn(_Tagged, tag="job.cancel"):
    """Turn ``turn`` of ``sid`` was cancelled while the decoder holding it may still be generating it:
    the decoder aborts the generation at once (its status check is the backstop)."""

    sid: str
    turn: int
    v: int = SCHEMA_VERSION


Job = Union[StartTurn, ContinueTurn, ParseTurn, TurnParsed, CancelTurn]


def call_id_prefix(turn: int) -> str:
    """Prefix of the call ids of one turn: ids are a pure function of (turn, index), so a
    parser that replays a turn produces the same ids (``call_<turn>_<index>``)."""
    return f"call_{turn}_"
