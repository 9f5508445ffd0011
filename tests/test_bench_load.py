"""The load benchmark's own checks: it notices a lost, repeated or missing event, and counts tokens
by the tokenizer (pure parts; the run itself is ``turnstream bench load``)."""

from __future__ import annotations

import json
from pathlib import Path

from bench.load_client import Expected, SessionCheck, Tally, script
from bench.load_report import tables, us_per_token
from workers.decode.replay import load_tokenizer

MODEL = Path(__file__).resolve().parent.parent / "models" / "tiny-agent"


def _frame(i: int, turn: int, src: str, seq: int, body: dict, t0: float = 0.0) -> str:
    return json.dumps({"id": f"100-{i}", "sid": "s", "turn": turn, "attempt": 1, "seq": seq, "src": src,
                       "body": body, "t0": t0})


def _session(expected: Expected, result: str = "42") -> list[str]:
    frames, i = [], 0
    for turn in (0, 1):
        text = expected.content(turn, result)
        bodies = [{"type": "content.delta", "text": text[:5]}, {"type": "content.delta", "text": text[5:]}]
        if turn == 0:
            bodies.append({"type": "tool_call.ready", "index": 0, "id": "c", "name": "calculator", "arguments": "{}"})
        bodies.append({"type": "turn.ended", "finish_reason": "stop",
                       "completion_tokens": expected.tokens(turn, result)})
        for seq, body in enumerate(bodies, 1):
            i += 1
            frames.append(_frame(i, turn, "parser", seq, body, t0=1.0))
        if turn == 0:
            i += 1
            frames.append(_frame(i, 0, "tools", 1, {"type": "tool.result", "index": 0, "id": "c", "name": "x",
                                                    "content": result}))
    frames.append(_frame(i + 1, 1, "session", 0, {"type": "session.ended", "reason": "stop"}))
    return frames


def _check(frames: list[str]) -> Tally:
    tally = Tally()
    check = SessionCheck("s", Expected(script(20)[1], load_tokenizer(MODEL)), tally)
    for f in frames:
        check.feed(f, subscribed=0.5, now=1.25)
    check.finish()
    return tally


def test_a_complete_session_passes_and_its_tokens_and_latency_are_counted() -> None:
    expected = Expected(script(20)[1], load_tokenizer(MODEL))
    tally = _check(_session(expected))
    assert tally.problems == [] and tally.sessions_ok == 1
    assert tally.tokens == expected.tokens(0, "42") + expected.tokens(1, "42") > 20
    assert tally.lat_ms == [250.0] * 4


def test_a_repeated_a_missing_or_a_truncated_event_is_a_problem() -> None:
    frames = _session(Expected(script(20)[1], load_tokenizer(MODEL)))
    assert any("repeated" in p for p in _check(frames[:3] + frames[2:]).problems)
    assert any("parser seq" in p for p in _check(frames[:1] + frames[2:]).problems)
    assert any("content differs" in p for p in _check([f.replace("quick", "quack") for f in frames]).problems)
    assert any("session ended never" in p for p in _check(frames[:-1]).problems)


def test_cpu_per_token_sums_the_pipeline_stages_only_and_the_decoder_without_its_engine() -> None:
    row = {"mode": "batched", "sessions": 1, "rate": 20.0, "tokens": 1000, "p50_ms": 1.0, "p99_ms": 2.0,
           "max_ms": 3.0, "lost": 0, "problems": [], "cmds_per_token": 2.0, "loadavg": 0.5,
           "cpu_s": {"decode": 0.012, "engine": 0.002, "parser": 0.02, "gateway": 0.03, "redis": 0.004, "tools": 0.5,
                     "client": 1.0}}
    row["us_per_token"] = us = us_per_token(row)
    assert us["decoder"] == 10.0 and us["pipeline"] == 64.0 and us["client"] == 1000.0
    assert "| batched | 1 | 10 | 20 | 30 | 4 | 64 | 2 | 500 | 1000 |" in tables([row])
