"""Every Redis key turnstream uses, and only here.

Session keys carry the session id as a Redis Cluster hash tag (``{sid}``, literal braces), so
one session's keys share a slot and no script ever touches two slots.

    ts:decode:jobs              stream, group "decode": new turns, orphaned continuations
    ts:decode:w:{worker}        stream, group "decode": continuations for the decoder holding the KV
    ts:{kind}:hb:{worker}       string + TTL: a process's liveness and load (kind: decode, parser,
                                tools, gateway; a decoder's also says its free KV blocks)
    ts:decode:route:{key}       string + TTL: the decoder that last ran a conversation opening this way
    ts:decode:load              hash: decoder -> turns it is generating now (for routing)
    ts:decode:workers           sorted set: decoder -> unix time of its last beat (the registry that
                                adoption reads instead of scanning; a dead one is removed after a grace)
    ts:parse:jobs               stream, group "parse": "parse turn N of session S"
    ts:parse:wake:{parser}      stream: wakes one parser's shared token reader (a turn joins or rejoins),
                                when the server refuses client tracking
    ts:s:{sid}                  hash: the session record
    ts:s:{sid}:msgs             list: the conversation, one JSON message per item
    ts:s:{sid}:tok              stream: the decoder's token log (internal)
    ts:s:{sid}:ev               stream: the public event log
    ts:s:{sid}:t:{turn}:bar     hash: the turn's fan-in barrier
    ts:s:{sid}:t:{turn}:run:{i} string: "this non-idempotent call has started" (SET NX)
    ts:s:{sid}:resp             hash: the stored Responses-API response of session sid (owner, request, items, final)
    ts:tools:dur                hash: per-tool EWMA of durations (ms), for pin deadlines
    ts:tools:q:{pool}           arq queue (sorted set) of one tool pool, on the queue server
    ts:tools:q:{pool}:wake      list: one wake token per enqueued job (tool workers BLPOP it)
    ts:tools:specs              hash: tool name -> JSON spec (description, schema, pool, idempotency),
                                published by the tool workers (MCP tools too); parsers and gateways read it
    ts:turns:waiting            sorted set: "{sid}:{turn}" -> when the turn ended with calls (the
                                barrier sweep's index: turns that may still need their continuation;
                                the sweep drops a turn once its barrier says sent)
    ts:sweep:lock               string + TTL: the decoder running the barrier sweep now
    ts:gw:{gateway}:wake        stream: wakes one gateway's shared event reader (new subscriptions), when
                                the server refuses client tracking (``runtime.bus.WakeableRead``)
    ts:rl:{key_id}              hash: one API key's rate-limit token bucket
    ts:dead                     stream: undecodable or poison entries
"""

from __future__ import annotations

PREFIX = "ts"

DECODE_JOBS = f"{PREFIX}:decode:jobs"
DECODE_LOAD = f"{PREFIX}:decode:load"
DECODERS = f"{PREFIX}:decode:workers"
DECODE_GROUP = "decode"
PARSE_JOBS = f"{PREFIX}:parse:jobs"
PARSE_GROUP = "parse"
DEAD = f"{PREFIX}:dead"
TOOL_DURATIONS = f"{PREFIX}:tools:dur"
WAITING_TURNS = f"{PREFIX}:turns:waiting"
TOOL_SPECS = f"{PREFIX}:tools:specs"
SWEEP_LOCK = f"{PREFIX}:sweep:lock"
DECODER_HEARTBEAT_PATTERN = f"{PREFIX}:decode:hb:*"
HEARTBEAT_PATTERN = f"{PREFIX}:*:hb:*"


def decoder_jobs(worker: str) -> str:
    """The private continuation stream of one decoder."""
    return f"{PREFIX}:decode:w:{worker}"


def heartbeat(kind: str, worker: str) -> str:
    """The liveness key of one process of ``kind`` (decode, parser, tools, gateway)."""
    return f"{PREFIX}:{kind}:hb:{worker}"


def decoder_heartbeat(worker: str) -> str:
    return heartbeat("decode", worker)


def decoder_route(key: str) -> str:
    """Which decoder holds the KV of conversations that open like ``key`` (``runtime.routing``)."""
    return f"{PREFIX}:decode:route:{key}"


def session(sid: str) -> str:
    return f"{PREFIX}:s:{{{sid}}}"


def messages(sid: str) -> str:
    return f"{session(sid)}:msgs"


def tokens(sid: str) -> str:
    return f"{session(sid)}:tok"


def events(sid: str) -> str:
    return f"{session(sid)}:ev"


def barrier(sid: str, turn: int) -> str:
    return f"{session(sid)}:t:{turn}:bar"


def waiting_turn(sid: str, turn: int) -> str:
    """A turn's member in ``WAITING_TURNS``."""
    return f"{sid}:{turn}"


def waiting_turn_of(member: bytes | str) -> tuple[str, int]:
    """The (sid, turn) of a ``WAITING_TURNS`` member."""
    sid, _, turn = (member.decode() if isinstance(member, bytes) else member).rpartition(":")
    return sid, int(turn)


def tool_run(sid: str, turn: int, index: int) -> str:
    return f"{session(sid)}:t:{turn}:run:{index}"


def response(sid: str) -> str:
    """A stored Responses-API response (``gateway.responses.store``); it outlives the session's own keys."""
    return f"{session(sid)}:resp"


def session_keys(sid: str, turns: int) -> list[str]:
    """All keys of a session with ``turns`` turns (for expiry)."""
    fixed = [session(sid), messages(sid), tokens(sid), events(sid)]
    return fixed + [barrier(sid, t) for t in range(turns + 1)]


def tool_job_id(sid: str, turn: int, index: int) -> str:
    """Deterministic arq job id: a replayed dispatch cannot enqueue a call twice."""
    return f"{sid}:{turn}:{index}"


def tool_queue(pool: str) -> str:
    """The arq queue of one tool pool."""
    return f"{PREFIX}:tools:q:{pool}"


def tool_wake(pool: str) -> str:
    """The wake list of one tool pool: the dispatcher pushes a token per job, idle workers BLPOP it."""
    return f"{tool_queue(pool)}:wake"


def parser_wake(parser: str) -> str:
    """The wake-up stream of one parser process's shared token reader."""
    return f"{PREFIX}:parse:wake:{parser}"


def gateway_wake(gateway: str) -> str:
    """The wake-up stream of one gateway process's shared event reader."""
    return f"{PREFIX}:gw:{gateway}:wake"


def rate_limit(key_id: str) -> str:
    """The token bucket of one API key (or client address in open mode)."""
    return f"{PREFIX}:rl:{key_id}"


def sid_of(key: str) -> str:
    """The session id inside a session key's hash tag."""
    start = key.index("{") + 1
    return key[start : key.index("}", start)]
