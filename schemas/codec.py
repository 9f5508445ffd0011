"""One encoder and one typed decoder per message family, built once and reused (msgpack)."""

from __future__ import annotations

from typing import Any

import msgspec

from schemas.events import SCHEMA_VERSION, Event, Job, TokenEntry, ToolJob


class UndecodableEntry(ValueError):
    """A stream entry that is not a known message of the current schema version."""


_encoder = msgspec.msgpack.Encoder()
_event_decoder = msgspec.msgpack.Decoder(Event)
_token_decoder = msgspec.msgpack.Decoder(TokenEntry)
_job_decoder = msgspec.msgpack.Decoder(Job)
_tool_job_decoder = msgspec.msgpack.Decoder(ToolJob)
_json_encoder = msgspec.json.Encoder()


def encode(msg: Any) -> bytes:
    """Serialise any schema message to msgpack bytes."""
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
    """Decode one ``ts:s:{sid}:ev`` entry."""
    return _decode(_event_decoder, data)


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
