"""A text-only turn (no tools, no client results, no reasoning, a format whose text is content): its
decoder is its parse stage -- content events straight to the event log, then its end and the
session's in one round trip.  A turn that may call is the same until its format's first markup
(``workers.decode.content_run``): from there a parser goes on, from the content the decoder
published; a turn whose text holds none ends as a text-only one.  Every other turn (a reasoning
parser, a format whose calls open with plain text, ``plain_turns=parser``) goes through a parser."""

from __future__ import annotations

import asyncio
import json

import pytest

from runtime import bus
from runtime.config import load_config
from runtime.consumer import Done
from runtime.routing import conversation_key
from runtime.session import SessionInfo, SessionMode, Sessions, Status
from runtime.turns import text_only
from schemas import keys
from schemas.codec import decode_event, encode
from schemas.events import StartTurn
from turnstream.cli import build_engine
from workers.decode.worker import DecodeWorker
from workers.parser import FORMATS, make_parser
from workers.parser.registry import PlainParser
from tests.round_trips import record_pipelines

TEXT = "Hello there! Here is a plain answer with no calls in it, long enough for several chunks."
TOOL = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}


def _info(tools: list | None = None, mode: SessionMode = SessionMode.ONESHOT) -> SessionInfo:
    return SessionInfo("s", Status.ACTIVE, 0, "", "", 1, tools=tools or [], mode=mode)


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_a_text_only_turn_is_one_whose_parse_is_the_identity(fmt: str) -> None:
    if text_only(fmt, "", _info()):
        parser = make_parser(fmt, calls=False)
        assert isinstance(parser, PlainParser)
        chunks = ["<tool_call>", '{"name": "x"}', "</tool_call> <think>a</think>", "[TOOL_CALLS]", " done"]
        assert ["".join(e.text for e in parser.feed(c)) for c in chunks] == chunks and parser.finish() == []
    else:
        assert fmt == "harmony"  # its channels need its own parser even without tools
    assert not text_only(fmt, "", _info([TOOL]))  # tools offered: calls may come
    assert not text_only(fmt, "", _info(mode=SessionMode.LOOP))  # a session's client may post results
    assert not text_only(fmt, "think", _info())  # reasoning is separated
    assert not text_only("auto", "", _info())  # the format is not known yet


async def _events(r, sid: str) -> list:
    return [decode_event(f[bus.FIELD]) for _, f in await r.xrange(keys.events(sid))]


def _type(e) -> str:
    return e.body.__struct_config__.tag


async def _run(r, redis_url: str, sid: str, tools: list | None = None, mode: SessionMode = SessionMode.ONESHOT,
               text: str = TEXT, **cfg_overrides: object) -> DecodeWorker:
    cfg = load_config(redis_url=redis_url, engine="replay", replay_rate=2000, worker_id="decode-text",
                      coalesce_tokens=4, **cfg_overrides)
    worker = DecodeWorker(cfg, build_engine(cfg), r)
    await worker.engine.start()
    await Sessions(r).create(sid, [{"role": "user", "content": "hi"}], tools=tools, max_turns=1, mode=mode,
                             meta={"replay": [text]}, params={"max_tokens": 200})
    try:
        await asyncio.wait_for(worker.handle(bus.Entry(keys.DECODE_JOBS, "1-0", encode(StartTurn(sid=sid, turn=0)))),
                               30)
    finally:
        await worker.engine.stop()
    return worker


async def test_a_text_only_turn_publishes_the_parse_stages_events_and_ends_its_session(redis_url, r,
                                                                                       monkeypatch) -> None:
    sent = record_pipelines(r, monkeypatch)  # the commands of each pipelined round trip, in order
    await _run(r, redis_url, "t1")
    monkeypatch.undo()
    # the claim, then the first chunk's round: its turn.started and the routing announcement lead it (no
    # round trip of their own before the first token)
    rounds = [n for n in sent if n]
    assert rounds[:2] == [["HMGET", "EVAL", "LRANGE", "XREVRANGE"], ["EVAL", "HINCRBY", "SET", "XADD"]]
    assert rounds[-1] == ["XADD", "EVAL", "HINCRBY", "XACK"]  # the last chunk, then the turn's end, the load, the ack
    assert await r.get(keys.decoder_route(conversation_key([{"role": "user", "content": "hi"}], None))) == \
        b"decode-text"
    events = await _events(r, "t1")
    kinds = [(e.src, _type(e)) for e in events]
    content = [e for e in events if _type(e) == "content.delta"]
    assert kinds[0] == ("decoder", "turn.started") and len(content) > 2  # chunks of at most 4 tokens
    assert kinds[1:] == [("parser", "content.delta")] * len(content) + [("parser", "turn.ended"),
                                                                         ("session", "session.ended")]
    assert "".join(e.body.text for e in content) == TEXT and all(e.body.text for e in content)
    assert [e.seq for e in events[1:-1]] == list(range(1, len(content) + 2))  # the parser's seqs: 1, 2, ...
    assert all(e.attempt == 1 and e.t0 > 0 for e in content)
    ended, session_ended = events[-2].body, events[-1].body
    assert ended.finish_reason == "stop" and ended.completion_tokens > len(content) and ended.n_calls == 0
    assert (session_ended.reason, session_ended.content) == ("stop", TEXT)
    record = await r.hgetall(keys.session("t1"))
    assert record[b"status"] == b"ended" and record[b"done:0"] == b"1" and record[b"pseq:0:1"] == str(
        len(content) + 1).encode()
    assert json.loads(record[b"asst:0"]) == {"role": "assistant", "content": TEXT, "raw": TEXT}
    assert [json.loads(m) for m in await r.lrange(keys.messages("t1"), 0, -1)][-1] == {
        "role": "assistant", "content": TEXT, "raw": TEXT}  # folded: the conversation is complete
    assert await r.xlen(keys.tokens("t1")) == 0 and await r.xlen(keys.PARSE_JOBS) == 0  # no parser hop
    assert await r.ttl(keys.events("t1")) > 0  # the session's keys expire
    assert await r.hget(keys.DECODE_LOAD, "decode-text") == b"0"  # counted down with its end


async def test_a_text_only_turn_acks_its_job_behind_its_end(redis_url, r) -> None:
    """On one server the job's ack rides the end's round trip: the handler says so (``Done.ACKED``) and
    the consumer sends nothing more; the job is acked once the session ended."""
    cfg = load_config(redis_url=redis_url, engine="replay", replay_rate=2000, worker_id="decode-ack")
    worker = DecodeWorker(cfg, build_engine(cfg), r)
    await worker.engine.start()
    try:
        await Sessions(r).create("k1", [{"role": "user", "content": "hi"}], max_turns=1, mode=SessionMode.ONESHOT,
                                 meta={"replay": [TEXT]}, params={"max_tokens": 200})
        await worker.consumer.reader.setup()
        await r.xadd(keys.DECODE_JOBS, {bus.FIELD: encode(StartTurn(sid="k1", turn=0))})
        [entry] = await worker.consumer.reader.read()
        assert (await r.xpending(keys.DECODE_JOBS, keys.DECODE_GROUP))["pending"] == 1
        assert await asyncio.wait_for(worker.handle(entry), 30) is Done.ACKED
        assert (await r.xpending(keys.DECODE_JOBS, keys.DECODE_GROUP))["pending"] == 0
        assert await r.hget(keys.session("k1"), "status") == b"ended"
    finally:
        await worker.engine.stop()


@pytest.mark.parametrize("why", ["think", "llama3_json", "plain_turns=parser"])
async def test_every_other_turn_goes_through_a_parser(redis_url, r, why: str) -> None:
    sid = f"p-{why[:5]}"
    overrides = {"think": {"reasoning": "think"}, "llama3_json": {"tool_format": "llama3_json"},
                 "plain_turns=parser": {"plain_turns": "parser"}}[why]
    await _run(r, redis_url, sid, tools=[TOOL], **overrides)
    assert await r.xlen(keys.PARSE_JOBS) == 1 and await r.xlen(keys.tokens(sid)) > 1  # chunks and an end
    assert [_type(e) for e in await _events(r, sid)] == ["turn.started"]  # the rest is the parser's
    assert await r.hget(keys.session(sid), "status") == b"active"


@pytest.mark.parametrize(("mode", "text"), [(SessionMode.ONESHOT, TEXT), (SessionMode.LOOP, TEXT),
                                            (SessionMode.ONESHOT, "Half a marker is content: <tool_ca")])
async def test_a_turn_that_may_call_but_writes_no_markup_ends_as_a_text_only_one(redis_url, r, mode, text) -> None:
    sid = f"n-{mode.value}-{len(text)}"
    await _run(r, redis_url, sid, tools=[TOOL], mode=mode, text=text)
    assert await r.xlen(keys.PARSE_JOBS) == 0 and await r.xlen(keys.tokens(sid)) == 0  # no parser hop
    events = await _events(r, sid)
    content = [e for e in events if _type(e) == "content.delta"]
    assert [(e.src, _type(e)) for e in events] == [("decoder", "turn.started")] + [("parser", "content.delta")] * len(
        content) + [("parser", "turn.ended"), ("session", "session.ended")]
    assert "".join(e.body.text for e in content) == text
    assert [e.seq for e in events[1:-1]] == list(range(1, len(content) + 2))
    assert (events[-2].body.finish_reason, events[-2].body.n_calls, events[-1].body.content) == ("stop", 0, text)
    assert json.loads(await r.hget(keys.session(sid), "asst:0")) == {"role": "assistant", "content": text, "raw": text}
    assert await r.hget(keys.session(sid), "status") == b"ended"


CALL = '<tool_call>\n{"name": "get_time", "arguments": {"tz": "UTC"}}\n</tool_call>'


@pytest.mark.parametrize("before", ["Let me check the time for you.\n", ""])
async def test_a_turn_hands_its_text_to_a_parser_from_its_first_markup(redis_url, r, before: str) -> None:
    """The content before the call is the decoder's events 1..k; the parse job names them (seq k, their
    text) and the token log holds the rest; the parser goes on at k + 1 and records the whole message."""
    from schemas.codec import decode_job, decode_token
    from tests.parser.test_parser_takeover import _parse
    from workers.parser.worker import ParserWorker

    sid = "s"  # ``_parse`` reads session "s"
    text = before + CALL
    await _run(r, redis_url, sid, tools=[TOOL], text=text)
    content = [e for e in await _events(r, sid) if _type(e) == "content.delta"]
    assert "".join(e.body.text for e in content) == before and all(e.src == "parser" for e in content)
    assert [e.seq for e in content] == list(range(1, len(content) + 1))
    [(_, fields)] = await r.xrange(keys.PARSE_JOBS)
    job = decode_job(fields[bus.FIELD])
    assert (job.turn, job.attempt, job.seq, job.content, job.worker) == (0, 1, len(content), before, "decode-text")
    tokens = [decode_token(f[bus.FIELD]) for _, f in await r.xrange(keys.tokens(sid))]
    assert "".join(t.text for t in tokens[:-1]) == CALL and [t.seq for t in tokens[:-1]] == list(range(len(tokens) - 1))
    assert tokens[-1].text == text  # the end: the whole turn's text, the message's raw

    await _parse(ParserWorker(load_config(redis_url=redis_url), r, dispatcher=None), job)
    events = await _events(r, sid)
    parsed = [e for e in events if e.src == "parser"]
    assert [e.seq for e in parsed] == list(range(1, len(parsed) + 1))  # one run of seqs, none twice
    kinds = [_type(e) for e in parsed]
    assert "tool_call.ready" in kinds and kinds[-1] == "turn.ended" and kinds.count("content.delta") == len(content)
    assert (parsed[-1].body.finish_reason, parsed[-1].body.n_calls) == ("tool_calls", 1)
    message = json.loads(await r.hget(keys.session(sid), "asst:0"))
    assert (message["content"], message["raw"]) == (before or None, text)
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in message["tool_calls"]] == [
        ("get_time", {"tz": "UTC"})]


async def test_a_text_only_turn_cancelled_first_does_not_end_its_session_again(redis_url, r, monkeypatch) -> None:
    """A cancel ends the session first (its ``session.ended``): the turn's own end then publishes neither
    its ``turn.ended`` (the once-script refuses after the turn's ending) nor a second ending."""
    from runtime.turns import Turns
    from workers.decode.chunks import ChunkWriter

    cancelled = asyncio.Event()
    flush = ChunkWriter.flush

    async def cancel_first(self, tc, then=None):  # the turn's end rides a flush: every chunk out, the cancel, then it
        if then is not None:
            await flush(self, tc)
            await Turns(r).end("c1", 0, "cancelled")
            cancelled.set()
        return await flush(self, tc, then)

    monkeypatch.setattr(ChunkWriter, "flush", cancel_first)
    await _run(r, redis_url, "c1")
    assert cancelled.is_set()
    events = await _events(r, "c1")
    assert [e.body.reason for e in events if _type(e) == "session.ended"] == ["cancelled"]
    assert not [e for e in events if _type(e) == "turn.ended"]
    assert await r.hget(keys.session("c1"), "status") == b"cancelled"


async def test_an_attempt_that_a_newer_one_replaced_ends_nothing(r) -> None:
    """A decoder taken for dead that went on (its heartbeat lapsed, another decoder regenerates the turn
    as attempt 2) must not end the session with its own text: its end writes nothing."""
    from runtime.turns import Turns

    sessions = Sessions(r)
    await sessions.create("a1", [{"role": "user", "content": "hi"}], max_turns=1, mode=SessionMode.ONESHOT)
    for me in ("decode-a", "decode-b"):  # b takes the turn over: attempt 2
        await sessions.claim_turn("a1", 0, me, dead_holder="decode-a" if me == "decode-b" else "")
    assert await r.hget(keys.session("a1"), "att:0") == b"2"
    info = await sessions.get("a1")
    message = {"role": "assistant", "content": "stale", "raw": "stale"}
    assert await Turns(r).end_text("a1", 0, 1, "stop", message, 1, b"turn.ended", info) == -1
    record = await r.hgetall(keys.session("a1"))
    assert b"done:0" not in record and b"asst:0" not in record and record[b"status"] == b"active"
    assert await r.xlen(keys.events("a1")) == 0 and await r.llen(keys.messages("a1")) == 1
    assert await Turns(r).end_text("a1", 0, 2, "stop", {**message, "content": "fresh", "raw": "fresh"}, 1,
                                   b"turn.ended", info) == 1  # the latest attempt ends it
    assert await r.hget(keys.session("a1"), "status") == b"ended"


async def test_a_turn_held_to_a_call_goes_to_its_parser_from_its_start(redis_url, r, monkeypatch) -> None:
    """``tool_choice`` required: the turn opens with a call, so no content run -- its parse job is
    queued before its first token, as every parsed turn's is, naming no events."""
    from schemas.codec import decode_job
    from workers.decode.turn import TurnRun

    async def no_hand_over(*_: object) -> None:
        raise AssertionError("a turn held to a call ran a content run")

    monkeypatch.setattr(TurnRun, "_hand_over", no_hand_over)

    cfg = load_config(redis_url=redis_url, engine="replay", replay_rate=2000, worker_id="decode-req")
    worker = DecodeWorker(cfg, build_engine(cfg), r)
    await worker.engine.start()
    await Sessions(r).create("q1", [{"role": "user", "content": "hi"}], tools=[TOOL], max_turns=1,
                             mode=SessionMode.ONESHOT, meta={"replay": [CALL]},
                             params={"max_tokens": 200, "tool_choice": "required"})
    try:
        await asyncio.wait_for(worker.handle(bus.Entry(keys.DECODE_JOBS, "1-0", encode(StartTurn(sid="q1", turn=0)))),
                               30)
    finally:
        await worker.engine.stop()
    [(_, fields)] = await r.xrange(keys.PARSE_JOBS)
    assert (decode_job(fields[bus.FIELD]).seq, decode_job(fields[bus.FIELD]).content) == (0, "")
    assert [_type(e) for e in await _events(r, "q1")] == ["turn.started"]  # the rest is the parser's


async def test_a_hand_over_whose_parse_job_fails_fails_the_turn_cleanly(redis_url, r, monkeypatch) -> None:
    """Redis gone as the parse job is queued: the turn fails (its job is handled again, a new attempt),
    no job is queued, the engine's request is aborted and the decoders' load count is back down."""
    from redis.exceptions import ConnectionError as RedisConnectionError

    from runtime.mux import MuxRedis

    send = MuxRedis.execute_command

    async def refuse_parse_jobs(self, *args, **kwargs):
        if args[:2] == ("XADD", keys.PARSE_JOBS):
            raise RedisConnectionError("connection lost")
        return await send(self, *args, **kwargs)

    monkeypatch.setattr(MuxRedis, "execute_command", refuse_parse_jobs)
    with pytest.raises(RedisConnectionError):
        await _run(r, redis_url, "f1", tools=[TOOL], text="Let me check.\n" + CALL)
    monkeypatch.undo()
    assert await r.xlen(keys.PARSE_JOBS) == 0 and await r.xlen(keys.tokens("f1")) == 0
    assert "".join(e.body.text for e in await _events(r, "f1") if _type(e) == "content.delta") == "Let me check.\n"
    assert await r.hget(keys.DECODE_LOAD, "decode-text") == b"0"  # counted with its first chunk, down again
    assert await r.hget(keys.session("f1"), "status") == b"active"  # not ended: the turn is regenerated
