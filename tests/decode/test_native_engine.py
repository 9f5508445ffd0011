"""NativeEngine: the async Engine facade over the stepping thread."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

from engine_harness import checkpoint, continue_with_tool, request
from runtime.config import ConfigError
from runtime.cpu import usable_cores
from workers.decode.native.config import EngineConfig, cpu_threads
from workers.decode.engine import Engine, GenerateDelta
from workers.decode.errors import EngineError, PromptError, RequestTooLarge
from workers.decode.native.engine import NativeEngine


def _config(**overrides) -> EngineConfig:
    cfg = dict(model=str(checkpoint("qwen2")), block_size=4, num_blocks=256, max_num_batched_tokens=128)
    return EngineConfig(**{**cfg, **overrides})


async def _collect(engine: NativeEngine, req) -> list[GenerateDelta]:
    return [d async for d in engine.generate(req)]


async def _until(cond: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.01)


async def test_concurrent_requests_stream_and_match_sequential_runs() -> None:
    engine = NativeEngine(_config())
    assert isinstance(engine, Engine)
    await engine.start()
    try:
        reqs = [request(f"r{i}", f"s{i}", f"question number {i}", max_tokens=12) for i in range(4)]
        together = await asyncio.gather(*(_collect(engine, r) for r in reqs))
        alone = [await _collect(engine, request(f"x{i}", f"t{i}", f"question number {i}", max_tokens=12))
                 for i in range(4)]
        for deltas, single in zip(together, alone):
            assert deltas[0].prompt_tokens > 0 and deltas[-1].finished
            assert [d.finished for d in deltas].count(True) == 1
            assert "".join(d.text for d in deltas) == "".join(d.text for d in single)
        await _until(lambda: engine.stats()["running"] == 0)
    finally:
        await engine.stop()


async def test_the_engine_steps_on_the_cpu_threads_it_was_given_or_on_all_cores_but_one() -> None:
    for threads, expected in ((1, 1), (0, cpu_threads(0))):
        engine = NativeEngine(_config(threads=threads))
        await engine.start()
        try:
            await _collect(engine, request("r", "s", "hello", max_tokens=2))
            assert engine.stats()["threads"] == expected
        finally:
            await engine.stop()
    assert cpu_threads(3) == 3
    assert cpu_threads(0) == max(1, usable_cores() - 1)
    with pytest.raises(ConfigError, match="threads"):
        _config(threads=-1)


async def test_pin_release_and_idle_expiry() -> None:
    engine = NativeEngine(_config(pin_default_s=0.3))
    await engine.start()
    try:
        deltas = await _collect(engine, request("t1", "s"))
        assert engine.stats()["pinned_blocks"] > 0
        await _until(lambda: engine.stats()["pinned_blocks"] == 0)  # expires with no further request
        await _collect(engine, request("a1", "a", history=[{"role": "user", "content": "y"}]))
        engine.pin("a", 30.0)  # the worker's estimate for the tool: outlives the 0.3 s default
        await asyncio.sleep(0.5)
        assert engine.stats()["pinned_blocks"] > 0
        engine.release("a")
        await _until(lambda: engine.stats()["pinned_blocks"] == 0)
        assert deltas[-1].finish_reason in ("stop", "length")
    finally:
        await engine.stop()


async def test_continuation_reuses_the_pin_through_the_facade() -> None:
    engine = NativeEngine(_config())
    await engine.start()
    try:
        first = await _collect(engine, request("t1", "s"))
        history = continue_with_tool(request("t1", "s").messages, "".join(d.text for d in first))
        second = await _collect(engine, request("t2", "s", history=history, continuation=True))
        assert second[0].cached_tokens == first[-1].prompt_tokens + first[-1].completion_tokens - 1
    finally:
        await engine.stop()


async def test_leaving_the_stream_early_aborts_and_errors_are_raised() -> None:
    engine = NativeEngine(_config(num_blocks=16))
    await engine.start()
    try:
        with pytest.raises(RequestTooLarge):
            await _collect(engine, request("big", "s"))
        with pytest.raises(PromptError, match="rejected"):  # the template cannot render a message
            await _collect(engine, request("bad", "s", history=[{"role": "user"}]))
        with pytest.raises(PromptError, match="rejected"):  # a malformed message the template trips on
            odd = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b", "tool_calls": 1}]
            await _collect(engine, request("odd", "s", history=odd))
        with pytest.raises(EngineError, match="request failed"):  # any other failure of one request
            await _collect(engine, request("seed", "s", history=[{"role": "user", "content": "hi"}], temperature=1.0,
                                           seed="not a number"))
        gen = engine.generate(request("r", "s", "hi", history=[{"role": "user", "content": "hi"}], max_tokens=20))
        async for _ in gen:
            break
        await gen.aclose()
        await _until(lambda: engine.stats()["running"] == 0 and engine.stats()["free_blocks"] == 16)
        assert engine.stats()["pinned_blocks"] == 0
    finally:
        await engine.stop()
