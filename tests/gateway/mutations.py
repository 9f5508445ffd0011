"""Hypothesis strategies for hostile input: mutations of a generated HTTP request (its body,
headers, stream ids, path parameters, method) and WebSocket frames.

A ``Request`` is plain data; ``mutate`` draws a few mutations and applies them.  Deep nesting
is spliced into the serialised text (no JSON encoder would write it), lone surrogates go
through the encoder as ``\\ud800`` escapes or, raw, as bytes that are not UTF-8.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import quote

from hypothesis import strategies as st

from gateway.strict_json import is_text

DEEP = "\x00deep\x00"  # placeholder, replaced by nested brackets in the serialised body
NASTY_STRINGS = ["\ud800", "a\udfffb", "\udbff\udc00", "\x00", "\u202e\u200b", "\U0001F4A5", "\\", "\"", "%00",
                 "\r\n", "ts:s:{x}", "{{ 7*7 }}", "<tool_call>", "call_0_0"]
NASTY_NUMBERS = [10**30, -(10**30), -1, 0, 2**63, 2**64, 1e308, -1e308, float("nan"), float("inf"), 5e-324, 0.5]
STREAM_IDS = ["0", "0-0", "-1", "1-", "-", "$", ">", "+", "*", "1e3", " 1-1 ", "18446744073709551615-18446744073709551615",
              "18446744073709551616-0", "1-18446744073709551616", "99999999999999999999-0"]
CONTENT_TYPES = ["application/json", "application/json; charset=latin-1", "text/plain", "application/x-www-form-urlencoded",
                 "multipart/form-data; boundary=x", "application/problem+json", "", "application/json;;;"]
METHODS = ["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD"]
LATIN1 = st.characters(min_codepoint=0x20, max_codepoint=0xFF, exclude_characters="\x7f")


@dataclass(frozen=True)
class Request:
    method: str
    template: str  # the path, with {name} parameters
    path_params: dict[str, str] = field(default_factory=dict)
    query: dict[str, str] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    body: Any = None  # a JSON value, or None for no body
    raw: bytes | None = None  # when set: the body bytes as sent

    @property
    def path(self) -> str:
        return self.template.format(**{k: quote(str(v), safe="") for k, v in self.path_params.items()})

    def content(self) -> bytes | None:
        return self.raw if self.raw is not None else None if self.body is None else encode(self.body)


def encode(body: Any, ascii_only: bool = True, depth: int = 0) -> bytes:
    text = json.dumps(body, ensure_ascii=ascii_only, allow_nan=True)
    if depth:
        text = text.replace(json.dumps(DEEP, ensure_ascii=ascii_only), "[" * depth + "]" * depth)
    return text.encode("utf-8", "surrogatepass")  # a raw surrogate: bytes that are not UTF-8


def stream_ids(known: list[str]) -> st.SearchStrategy[str]:
    return st.one_of(st.sampled_from(known + STREAM_IDS), st.from_regex(r"\A[0-9]{1,22}(-[0-9]{1,22})?\Z"),
                     st.text(LATIN1, max_size=50))


def nasty_values() -> st.SearchStrategy[Any]:
    wrong_types = st.sampled_from([None, True, [], {}, "", [1, "a"], {"type": "text"}])
    return st.one_of(st.sampled_from(NASTY_STRINGS), st.sampled_from(NASTY_NUMBERS), wrong_types,
                     st.integers(min_value=-(2**80), max_value=2**80), st.just(DEEP),
                     st.integers(10_000, 300_000).map(lambda n: "x" * n), st.text(max_size=30))


def _paths(value: Any, at: tuple = ()) -> list[tuple]:
    """Every place in a JSON value: the root and the path of each nested value."""
    out = [at]
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for k, v in items:
        out += _paths(v, at + (k,))
    return out


def _get(value: Any, path: tuple) -> Any:
    for k in path:
        value = value[k]
    return value


def _set(value: Any, path: tuple, new: Any) -> Any:
    if not path:
        return new
    copy = dict(value) if isinstance(value, dict) else list(value)
    copy[path[0]] = _set(copy[path[0]], path[1:], new)
    return copy


def _leaves(body: Any, kind: type | tuple[type, ...]) -> list[tuple]:
    return [p for p in _paths(body) if isinstance(_get(body, p), kind) and not isinstance(_get(body, p), bool)]


def mutate_body(data: st.DataObject, req: Request) -> Request:
    """One change to the body: a hostile string, number, type, key or nesting, or broken bytes."""
    body = req.body if req.body is not None else {}
    kind = data.draw(st.sampled_from(["string", "string", "number", "type", "key", "depth", "bytes", "truncate",
                                      "replace"]))
    strings, numbers = _leaves(body, str), _leaves(body, (int, float))
    if kind == "string" and strings:  # a lone surrogate (mostly) spliced into a string the client sent
        at = data.draw(st.sampled_from(strings))
        text, cut = _get(body, at), data.draw(st.integers(0, len(_get(body, at))))
        return replace(req, body=_set(body, at, text[:cut] + data.draw(st.sampled_from(NASTY_STRINGS)) + text[cut:]))
    if kind == "number" and numbers:
        return replace(req, body=_set(body, data.draw(st.sampled_from(numbers)), data.draw(st.sampled_from(NASTY_NUMBERS))))
    if kind in ("string", "number", "type"):
        return replace(req, body=_set(body, data.draw(st.sampled_from(_paths(body))), data.draw(nasty_values())))
    if kind == "key" and isinstance(body, dict):
        return replace(req, body={**body, data.draw(st.sampled_from(NASTY_STRINGS + ["model", "messages"])):
                                  data.draw(nasty_values())})
    if kind == "depth":
        place = data.draw(st.sampled_from(_paths(body)))
        return replace(req, raw=encode(_set(body, place, DEEP), depth=data.draw(st.integers(30, 5000))))
    if kind == "bytes":
        return replace(req, raw=encode(body, ascii_only=data.draw(st.booleans())))
    text = encode(body)
    if kind == "truncate":
        return replace(req, raw=text[:data.draw(st.integers(0, len(text)))])
    return replace(req, raw=data.draw(st.binary(max_size=300)))


def mutate_headers(data: st.DataObject, req: Request, known_ids: list[str]) -> Request:
    headers = dict(req.headers)
    kind = data.draw(st.sampled_from(["auth", "content-type", "event-id", "extra", "huge"]))
    if kind == "auth":
        choice = data.draw(st.one_of(st.none(), st.text(LATIN1, max_size=80), st.just("Bearer ")))
        headers.pop("Authorization", None)
        if choice is not None:
            headers["Authorization"] = choice.strip() or "x"
    elif kind == "content-type":
        headers["Content-Type"] = data.draw(st.sampled_from(CONTENT_TYPES)) or "application/json"
    elif kind == "event-id":
        headers["Last-Event-ID"] = data.draw(stream_ids(known_ids)).strip() or "0"
    elif kind == "extra":
        name = data.draw(st.from_regex(r"\AX-[A-Za-z0-9-]{1,20}\Z"))
        headers[name] = data.draw(st.text(LATIN1, max_size=200)).strip() or "x"
    else:
        headers["X-Padding"] = "p" * data.draw(st.integers(30_000, 70_000))
    return replace(req, headers=headers)


def mutate_target(data: st.DataObject, req: Request, known_ids: list[str]) -> Request:
    kind = data.draw(st.sampled_from(["param", "after", "method"]))
    if kind == "param" and req.path_params:
        name = data.draw(st.sampled_from(sorted(req.path_params)))
        value = data.draw(st.one_of(st.sampled_from(known_ids), st.text(max_size=80).filter(is_text)))
        return replace(req, path_params={**req.path_params, name: value or "x"})
    if kind == "after":
        return replace(req, query={**req.query, "after": data.draw(stream_ids(known_ids))})
    return replace(req, method=data.draw(st.sampled_from(METHODS)))


def mutate(data: st.DataObject, req: Request, known_ids: list[str]) -> Request:
    """``req`` with up to three drawn mutations (or none)."""
    for _ in range(data.draw(st.sampled_from([0, 1, 1, 2, 3]))):
        step = data.draw(st.sampled_from([mutate_body, mutate_headers, mutate_target]))
        req = step(data, req) if step is mutate_body else step(data, req, known_ids)
    return req


# --------------------------------------------------------------------------- WebSocket frames
JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                        max_size=4), max_leaves=12)


def ws_frames() -> st.SearchStrategy[str | bytes]:
    """Client frames: JSON of any shape, protocol messages with hostile fields, deep nesting, garbage."""
    message = st.fixed_dictionaries({"type": st.sampled_from(["tool_result", "cancel", "ping", ""])},
                                    optional={"tool_call_id": st.one_of(st.sampled_from(["call_0_0", "call_9_9"]),
                                                                        nasty_values()),
                                              "content": nasty_values(), "is_error": nasty_values()})
    return st.one_of(
        st.tuples(message, st.integers(0, 3000)).map(lambda m: encode(*m[:1], depth=m[1]).decode()),
        message.map(lambda m: encode(m, ascii_only=False)),  # a binary frame, maybe not UTF-8
        JSON_VALUES.map(json.dumps), st.integers(1, 200_000).map(lambda n: "[" * n + "]" * n),
        st.text(max_size=100), st.binary(max_size=100))
