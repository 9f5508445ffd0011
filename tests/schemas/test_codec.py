"""Every message type round-trips; unknown tags and versions are rejected as undecodable."""

from __future__ import annotations

import typing

import msgspec
import pytest

from schemas import events as E
from schemas import keys
from schemas.codec import (BodyType, Envelope, UndecodableEntry, decode_event, decode_job, decode_token,
                           decode_tool_job, encode, event_envelope)

BODIES = [
    E.ContentDelta(text="héllo ✓"), E.ReasoningDelta(text="thinking"),
    E.ToolCallBegin(index=0, id="call_0_0", name="get_weather"), E.ToolCallArgs(index=0, delta='{"city": '),
    E.ToolCallReady(index=0, id="call_0_0", name="get_weather", arguments='{"city": "Paris"}'),
    E.ToolCallInvalid(index=1, id="call_0_1", name="x", raw="{bad", error="invalid JSON", truncated=False),
    E.TurnStarted(prompt_tokens=10, cached_tokens=8, worker="d1", continuation=True),
    E.TurnRestarted(reason="decoder lost"), E.ToolStarted(index=0, id="c", name="n", worker="t1"),
    E.ToolResult(index=0, id="c", name="n", content="{}", is_error=True, duration_ms=1.5),
    E.TurnEnded(finish_reason="tool_calls", completion_tokens=7, n_calls=2),
    E.SessionEnded(reason="stop", content="bye"), E.ErrorEvent(message="boom", code="x"),
]


def test_every_body_type_is_covered() -> None:
    declared = set(typing.get_args(E.ParseBody)) | set(typing.get_args(E.SessionBody))
    assert {type(b) for b in BODIES} == declared


@pytest.mark.parametrize("body", BODIES, ids=lambda b: type(b).__name__)
def test_event_round_trip(body: object) -> None:
    ev = E.Event(sid="s1", turn=2, attempt=1, seq=5, src="parser", body=body, ts=1.0)
    assert decode_event(encode(ev)) == ev


@pytest.mark.parametrize("msg", [
    E.TokenChunk(turn=1, attempt=2, seq=3, text="<tool_call>", n_tokens=1, t_emit=2.0),
    E.TokenEnd(turn=1, attempt=1, seq=4, finish_reason="length", completion_tokens=9, text="abc"),
])
def test_token_round_trip(msg: object) -> None:
    assert decode_token(encode(msg)) == msg


@pytest.mark.parametrize("msg", [E.StartTurn(sid="s", turn=0), E.ContinueTurn(sid="s", turn=3, attempt=1),
                                 E.ParseTurn(sid="s", turn=1, attempt=2, after="1-0", worker="w")])
def test_job_round_trip(msg: object) -> None:
    assert decode_job(encode(msg)) == msg


def test_tool_job_round_trip() -> None:
    job = E.ToolJob(sid="s", turn=1, attempt=1, index=0, call_id="c", name="n", arguments="{}", t_ready=1.0)
    assert decode_tool_job(encode(job)) == job


def test_unknown_tag_is_undecodable() -> None:
    data = msgspec.msgpack.encode({"type": "job.teleport", "sid": "s", "turn": 0})
    with pytest.raises(UndecodableEntry):
        decode_job(data)


def test_future_version_is_undecodable() -> None:
    data = msgspec.msgpack.encode({"type": "job.start", "sid": "s", "turn": 0, "v": 99})
    with pytest.raises(UndecodableEntry, match="version 99"):
        decode_job(data)


def test_garbage_is_undecodable() -> None:
    for data in (b"", b"\xc1\xff", b"not msgpack at all"):
        with pytest.raises(UndecodableEntry):
            decode_event(data)


def test_tags_are_unique() -> None:
    structs = [c for c in vars(E).values() if isinstance(c, type) and issubclass(c, E._Tagged) and c is not E._Tagged]
    tags = [c.__struct_config__.tag for c in structs]
    assert len(tags) == len(set(tags))


def test_session_keys_share_one_hash_tag() -> None:
    sid = "abc123"
    for key in keys.session_keys(sid, 3) + [keys.tool_run(sid, 1, 0)]:
        assert "{abc123}" in key
        assert keys.sid_of(key) == sid


@pytest.mark.parametrize("body", BODIES, ids=lambda b: type(b).__name__)
def test_events_are_json_and_their_envelope_reads_without_the_body(body: object) -> None:
    ev = E.Event(sid="s1", turn=2, attempt=1, seq=5, src="parser", body=body, ts=1.0)
    data = encode(ev)
    tag = body.__struct_config__.tag  # type: ignore[attr-defined]
    assert msgspec.json.decode(data)["body"]["type"] == tag
    assert event_envelope(data) == Envelope(turn=2, attempt=1, seq=5, src="parser", body=BodyType(tag))
    assert event_envelope(msgspec.msgpack.encode(ev)) == event_envelope(data)  # an earlier version's event


def test_an_event_envelope_is_never_fooled_by_its_text() -> None:
    sly = E.ContentDelta(text='"body":{"type":"session.ended"} "turn":9,"attempt":9,"seq":9,"src":"decoder"')
    data = encode(E.Event(sid='"body":{"type":"y","turn":7', turn=0, attempt=0, seq=1, src="parser", body=sly))
    assert event_envelope(data) == Envelope(turn=0, attempt=0, seq=1, src="parser", body=BodyType("content.delta"))
    assert event_envelope(b"\x8a not json") is None and event_envelope(b'{"sid": "x"}') is None


def test_events_of_earlier_versions_msgpack_still_decode() -> None:
    ev = E.Event(sid="s1", turn=0, attempt=1, seq=1, src="parser", body=E.ContentDelta(text="x"))
    assert decode_event(msgspec.msgpack.encode(ev)) == ev
