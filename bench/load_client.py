"""The load benchmark's client: S agent sessions over WebSocket, each checked as it streams.

Every session is a two-turn conversation on the ReplayEngine (text + one calculator call, then
an answer quoting the call's result).  For each session the client checks what the pipeline
promises and counts what it measures:

* every event exactly once: stream ids strictly increase, no ``(turn, attempt, src, seq)`` twice,
  and the parser's seqs of each turn attempt run 1, 2, 3, ... without a gap;
* every token: each turn's content is the scripted text, and each turn's ``completion_tokens``
  is the script's token count (the tokenizer's own count of the rendered text);
* the session ends with ``stop`` after two turns.

Added latency: receive time minus ``t0``, the time the decoder took the event's first token from
its engine, for every content event emitted after the client subscribed.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import msgspec
import websockets
from tokenizers import Tokenizer

WORDS = "the quick brown fox jumps over a lazy dog while seven wizards quietly judge boxing".split()
CALL = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "6*7"}}\n</tool_call>'


class _Body(msgspec.Struct):
    type: str
    text: str = ""
    content: str = ""
    completion_tokens: int = 0
    reason: str = ""


class _Frame(msgspec.Struct):
    """The fields of a relayed event the client reads (the rest are skipped unparsed)."""

    id: str
    turn: int
    attempt: int
    seq: int
    src: str
    body: _Body
    t0: float = 0.0


_decode = msgspec.json.Decoder(_Frame).decode


def script(tokens: int) -> tuple[list[str], str]:
    """A two-turn replay script of about ``tokens`` tokens per turn, and its body text."""
    body = " ".join(WORDS[i % len(WORDS)] for i in range(tokens // 2))
    return [f"{body}.\n{CALL}", f"The answer is {{{{ results[0] }}}}. {body}."], body


@dataclass
class Expected:
    """What one session must deliver."""

    body: str
    tok: Tokenizer
    _counts: dict[str, int] = field(default_factory=dict)

    def content(self, turn: int, result: str) -> str:
        return f"{self.body}.\n" if turn == 0 else f"The answer is {result}. {self.body}."

    def tokens(self, turn: int, result: str) -> int:
        text = f"{self.body}.\n{CALL}" if turn == 0 else self.content(1, result)
        if text not in self._counts:
            self._counts[text] = len(self.tok.encode(text, add_special_tokens=False).ids)
        return self._counts[text]


@dataclass
class Tally:
    """What all sessions of one run delivered."""

    lat_ms: list[float] = field(default_factory=list)
    tokens: int = 0
    events: int = 0
    sessions_ok: int = 0
    problems: list[str] = field(default_factory=list)
    sids: list[str] = field(default_factory=list)  # every session started (where each one's keys live)


class SessionCheck:
    """Folds one session's frames, checking the promises listed in the module doc."""

    def __init__(self, sid: str, expected: Expected, tally: Tally) -> None:
        self.sid, self.expected, self.tally = sid, expected, tally
        self.last_id = (0, 0)
        self.seen: set[tuple[int, int, str, int]] = set()
        self.parser_seq: dict[tuple[int, int], int] = {}
        self.content: dict[int, list[str]] = {0: [], 1: []}
        self.completion: dict[int, int] = {}
        self.result, self.ended = "", ""
        self.problems: list[str] = []

    def feed(self, raw: str | bytes, subscribed: float, now: float) -> None:
        f = _decode(raw)
        self.tally.events += 1
        ms, _, n = f.id.partition("-")
        eid = (int(ms), int(n or 0))
        key = (f.turn, f.attempt, f.src, f.seq)
        if eid <= self.last_id or key in self.seen:
            self.problems.append(f"event {f.id} {key} repeated or out of order")
        self.last_id = eid
        self.seen.add(key)
        if f.src == "parser":
            self._parser_seq(f)
        self._body(f, subscribed, now)

    def _parser_seq(self, f: _Frame) -> None:
        prev = self.parser_seq.get((f.turn, f.attempt), 0)
        if f.seq != prev + 1:
            self.problems.append(f"turn {f.turn}: parser seq {f.seq} after {prev}")
        self.parser_seq[(f.turn, f.attempt)] = f.seq

    def _body(self, f: _Frame, subscribed: float, now: float) -> None:
        b = f.body
        if b.type == "content.delta":
            self.content.setdefault(f.turn, []).append(b.text)
            if f.t0 >= subscribed:
                self.tally.lat_ms.append((now - f.t0) * 1000)
        elif b.type == "tool.result":
            self.result = b.content
        elif b.type == "turn.ended":
            self.completion[f.turn] = b.completion_tokens
        elif b.type == "session.ended":
            self.ended = b.reason

    def finish(self) -> None:
        """Check the whole session; count its tokens and its problems."""
        for turn in (0, 1):
            want = self.expected.content(turn, self.result)
            if "".join(self.content.get(turn, [])) != want:
                self.problems.append(f"turn {turn}: content differs from the script")
            want_tokens = self.expected.tokens(turn, self.result)
            if self.completion.get(turn) != want_tokens:
                self.problems.append(f"turn {turn}: {self.completion.get(turn)} tokens, expected {want_tokens}")
        if self.ended != "stop":
            self.problems.append(f"session ended {self.ended or 'never'}")
        self.tally.tokens += sum(self.completion.values())
        if self.problems:
            self.tally.problems += [f"sid={self.sid}: {p}" for p in self.problems[:3]]
        else:
            self.tally.sessions_ok += 1


CONNECT_TIMEOUT_S = 120.0  # patient: on a saturated machine a session that cannot connect is not a pipeline loss


async def one_session(url: str, body: dict[str, Any], expected: Expected, tally: Tally, tls: ssl.SSLContext) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=CONNECT_TIMEOUT_S, verify=tls) as http:
        sid = (await http.post("/v1/sessions", json=body)).json()["id"]
    tally.sids.append(sid)
    check = SessionCheck(sid, expected, tally)
    ws_url = url.replace("http", "ws", 1) + f"/v1/sessions/{sid}/ws"
    async with websockets.connect(ws_url, max_queue=None, open_timeout=CONNECT_TIMEOUT_S) as ws:
        subscribed = time.time()  # events emitted before this are history, not relay latency
        async for frame in ws:
            check.feed(frame, subscribed, time.time())
    check.finish()


async def run_sessions(url: str, sessions: int, tokens: int, ramp_s: float, tok: Tokenizer) -> Tally:
    """``sessions`` sessions started over ``ramp_s`` seconds; returns what they delivered."""
    replay, body_text = script(tokens)
    body = {"messages": [{"role": "user", "content": "go"}], "replay": replay, "max_tokens": 4 * tokens + 64}  # + the call
    expected, tally = Expected(body_text, tok), Tally()
    # Each session has its own HTTP client, as separate agents do, but they share one TLS context: httpx
    # builds one per client otherwise, even for http:// (~27 ms of this process's CPU each, synchronously:
    # at S = 1,000 it blocked this client's event loop for seconds within the 2 s ramp, which delayed the
    # frames it timed and inflated the p99 it measures); 0.5 ms a client with it shared.
    tls = ssl.create_default_context()

    async def delayed(i: int) -> None:
        await asyncio.sleep(ramp_s * i / sessions)
        await one_session(url, body, expected, tally, tls)

    outcomes = await asyncio.gather(*(delayed(i) for i in range(sessions)), return_exceptions=True)
    failed = sorted({repr(o)[:200] for o in outcomes if isinstance(o, BaseException)})
    tally.problems += [f"session failed: {f}" for f in failed[:3]]
    return tally
