"""Total parsing work is linear in the text, whatever the chunking."""

from __future__ import annotations

import time

import pytest

from bench.parser import BENCHED, make_turn
from bench.parser import TOOLS as BENCH_TOOLS
from workers.parser import FORMATS, collect, make_parser

CALL = '<tool_call>\n{"name": "write", "arguments": {"path": "a/b.txt", "text": "%s"}}\n</tool_call>\n'
PROSE = "Some narration with a < b, {braces} and [brackets] that is not a call. "


def long_turn(n: int) -> str:
    """About ``n`` characters: prose, then calls with long string arguments, then prose."""
    parts, size = ["<think>" + PROSE * 3 + "</think>"], 0
    while size < n:
        piece = PROSE * 4 + CALL % ("x\\n" * 200)
        parts.append(piece)
        size += len(piece)
    return "".join(parts)[:n]


def work(text: str, step: int) -> tuple[int, float]:
    p = make_parser("hermes", reasoning="think")
    t0 = time.thread_time()
    events = []
    for i in range(0, len(text), step):
        events += p.feed(text[i:i + step])
    events += p.finish()
    elapsed = time.thread_time() - t0
    collect(events)
    return p.work, elapsed


def best_work(text: str, step: int) -> tuple[int, float]:
    """Operation count and the best CPU time of three runs."""
    runs = [work(text, step) for _ in range(3)]
    return runs[0][0], min(t for _, t in runs)


@pytest.mark.parametrize("step", [1, 4])
def test_work_is_linear(step: int) -> None:
    w8, t8 = best_work(long_turn(8_000), step)
    w32, t32 = best_work(long_turn(32_000), step)
    assert 3.5 < w32 / w8 < 4.5, (w8, w32)
    assert w32 < 3 * 32_000  # each character is handed to a state a bounded number of times
    assert t32 / t8 < 8, (t8, t32)  # loose CPU-time guard against hidden quadratic work


def _family_work(fmt: str, size: int) -> tuple[int, int]:
    text, _ = make_turn(fmt, size)
    p = make_parser(fmt, tools=BENCH_TOOLS, reasoning="think")
    for i in range(0, len(text), 4):
        p.feed(text[i:i + 4])
    p.finish()
    return p.work, len(text)


@pytest.mark.parametrize("fmt", list(BENCHED))
def test_every_benched_format_does_the_same_work_per_character_at_8k_and_32k(fmt: str) -> None:
    """Operation counts, not timers: a format that re-scanned its buffer would do more per character at 32k."""
    (w8, n8), (w32, n32) = _family_work(fmt, 8_000), _family_work(fmt, 32_000)
    assert 0.9 < (w32 / n32) / (w8 / n8) < 1.1, (w8, n8, w32, n32)
    assert w32 < 3 * n32


def test_the_bench_covers_every_family() -> None:
    assert set(BENCHED) == set(FORMATS)
