"""One encoder and one typed decoder per message family, built once and reused.

Every message is msgpack, except the public event log's ``Event``: it is JSON, the bytes a
client receives, so the gateway forwards an event without decoding it (``event_kind`` tells it
what the event is).  Events written by earlier versions (msgpack) still decode.
"""

from __future__ import annotations

from typing import Any

import msgspec

from schemas.events import SCHEMA_VERSION, Event, Job, TokenEntry, ToolJob


class UndecodableEntry(ValueError):
    """A stream entry that is not a known message of the current schema version."""


_encoder = msgspec.msgpack.Encoder()
_event_encoder = msgspec.json.Encoder()
_event_decoder = msgspec.json.Decoder(Event)
_event_decoder_v0 = msgspec.msgpack.Decoder(Event)  # events written as msgpack by earlier versions
_token_decoder = msgspec.msgpack.Decoder(TokenEntry)
_job_decoder = msgspec.msgpack.Decoder(Job)
_tool_job_decoder = msgspec.msgpack.Decoder(ToolJob)
_json_encoder = msgspec.json.Encoder()


def encode(msg: Any) -> bytes:
    """Serialise any schema message: an ``Event`` to JSON, everything else to msgpack."""
    if type(msg) is Event:
        return _event_encoder.encode(msg)
    return _encoder.encode(msg)


def _decode(decoder: msgspec.msgpack.Decoder, data: bytes) -> Any:
    try:
        msg = decoder.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise UndecodableEntry(str(exc)) from exc
    if getattr(msg, "v", SCHEMA_VERSION) != SCHEMA_VERSION:
        raise UndecodableEntry(f"unsupported schema version {msg.v} (this build speaks {SCHEMA_VERSION})")
    return msg


def decode_event(data: bytes) -> Event:
    """Decode one ``ts:s:{sid}:ev`` entry (JSON, or the msgpack of earlier versions)."""
    return _decode(_event_decoder if data[:1] == b"{" else _event_decoder_v0, data)


_BODY_TYPE = b'"body":{"type":"'


def event_kind(data: bytes) -> str | None:
    """The body type (tag) of an encoded event, read without decoding it; None when ``data`` is not a
    JSON event.  Exact: an ``Event``'s JSON has one ``"body":{"type":"`` outside strings (inside a
    JSON string every quote is escaped), and a body's tag is the first key of its object."""
    at = data.find(_BODY_TYPE) if data[:1] == b"{" else -1
    if at < 0:
        return None
    start = at + len(_BODY_TYPE)
    end = data.find(b'"', start)
    return data[start:end].decode() if end > start else None


def decode_token(data: bytes) -> TokenEntry:
    """Decode one ``ts:s:{sid}:tok`` entry."""
    return _decode(_token_decoder, data)


def decode_job(data: bytes) -> Job:
    """Decode one decode- or parse-job entry."""
    return _decode(_job_decoder, data)


def decode_tool_job(data: bytes) -> ToolJob:
    """Decode one arq tool-job payload."""
    return _decode(_tool_job_decoder, data)


def to_json(msg: Any) -> bytes:
    """JSON rendering of a message, for clients (tags and field names unchanged)."""
    return _json_encoder.encode(msg)


def to_builtins(msg: Any) -> Any:
    """Plain dicts/lists of a message, for JSON APIs."""
    return msgspec.to_builtins(msg)
