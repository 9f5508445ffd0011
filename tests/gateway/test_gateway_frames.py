"""A client frame is the stored event's JSON with its id in front, read without decoding; events of
earlier versions (msgpack) are decoded and rendered the same way."""

from __future__ import annotations

import json

import msgspec

from gateway.frames import make_frame, stream_pos
from schemas.codec import encode, to_builtins
from schemas.events import ContentDelta, Event, SessionEnded


def _event(body: object, turn: int = 1) -> Event:
    return Event(sid="s1", turn=turn, attempt=1, seq=3, src="parser", body=body, ts=2.5, t0=1.5)


def test_a_frame_forwards_the_stored_json_with_its_id_and_decodes_only_on_demand() -> None:
    ev = _event(ContentDelta(text='héllo "x" ✓'))
    frame = make_frame("1700-4", encode(ev))
    assert frame is not None and frame.kind == "content.delta" and frame.pos == (1700, 4)
    assert frame._event is None  # nothing decoded to relay it
    assert json.loads(frame.data) == dict(to_builtins(ev), id="1700-4")
    assert frame.event == ev and not frame.ends(0)


def test_an_earlier_versions_msgpack_event_is_rendered_the_same_way() -> None:
    ev = _event(SessionEnded(reason="stop"), turn=2)
    old = make_frame("9-0", msgspec.msgpack.encode(ev))
    new = make_frame("9-0", encode(ev))
    assert old is not None and new is not None
    assert json.loads(old.data) == json.loads(new.data) and old.kind == new.kind == "session.ended"
    assert new.ends(2) and not new.ends(3)


def test_an_entry_that_is_no_event_gives_no_frame() -> None:
    assert make_frame("1-0", b"\xc1 garbage") is None
    assert stream_pos("1700000000000-12") == (1700000000000, 12) and stream_pos("5") == (5, 0)
