"""Shared helpers for parser tests: every chunking of a text must give the same turn."""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass, field
from typing import Any

from workers.parser import collect, make_parser, parse_text
from workers.parser.turn import Turn

_TOKEN = re.compile(r"<\|[^<>|]*\|>|<｜[^｜]*｜>|\[[A-Z_/]+\]|</?[\w:=\"]+>|\w+|\s+|[^\w\s]")
SEEDS = (0, 1, 2, 3)


def token_split(text: str) -> list[str]:
    """An approximation of 1-token deltas: markers, words, spaces and single symbols."""
    parts = _TOKEN.findall(text)
    assert "".join(parts) == text
    return parts


def random_split(text: str, seed: int, max_len: int = 12) -> list[str]:
    """Random chunks of 1..max_len characters."""
    rng = random.Random(seed)
    out, i = [], 0
    while i < len(text):
        n = rng.randint(1, max_len)
        out.append(text[i:i + n])
        i += n
    return out


def chunkings(text: str) -> dict[str, list[str]]:
    """Named chunkings of ``text``: whole, 1 char, 1 token, random splits."""
    ways = {"whole": [text], "char": list(text), "token": token_split(text)}
    for seed in SEEDS:
        ways[f"random{seed}"] = random_split(text, seed)
    return ways


def feed_chunks(fmt: str, chunks: list[str], **kw: Any) -> Turn:
    """Stream ``chunks`` through a fresh parser and collect the turn."""
    p = make_parser(fmt, **kw)
    events = []
    for c in chunks:
        events += p.feed(c)
    events += p.finish()
    return collect(events)


def parse_all_ways(fmt: str, text: str, **kw: Any) -> Turn:
    """Parse ``text`` under every chunking; assert they all agree; return the turn."""
    ref = parse_text(fmt, text, **kw)
    for name, chunks in chunkings(text).items():
        got = feed_chunks(fmt, chunks, **kw)
        assert got == ref, f"{fmt}: chunking {name!r} differs:\n{got}\nvs\n{ref}"
    for call in ref.calls:
        assert isinstance(json.loads(call.arguments), dict)
    return ref


@dataclass(frozen=True)
class Case:
    """A model output and what it must parse to.  ``calls`` items: (name, arguments-as-Python)."""

    id: str
    text: str
    content: str = ""
    calls: list[tuple[str, Any]] = field(default_factory=list)
    invalid: list[tuple[str, bool]] = field(default_factory=list)  # (name, truncated)
    reasoning: str = ""
    exact_args: list[str] | None = None  # when set: the arguments text, verbatim
    kw: dict[str, Any] = field(default_factory=dict)


def check_case(fmt: str, case: Case, markers: tuple[str, ...] = ()) -> Turn:
    """Parse ``case`` every way and compare it with its expectation."""
    turn = parse_all_ways(fmt, case.text, **case.kw)
    assert turn.content == case.content
    assert turn.reasoning == case.reasoning
    got = [(c.name, json.loads(c.arguments)) for c in turn.calls]
    assert got == case.calls
    if case.exact_args is not None:
        assert [c.arguments for c in turn.calls] == case.exact_args
    assert [(c.name, c.truncated) for c in turn.invalid] == case.invalid
    think_on = bool(case.kw.get("reasoning"))
    for m in markers:
        if not think_on and "think>" in m:
            continue
        assert m not in turn.content, f"marker {m!r} leaked into content"
    return turn
