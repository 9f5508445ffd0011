"""The tool worker: every error path becomes a tool result, non-idempotent tools never run twice,
and a SIGKILLed worker's jobs are finished (or safely refused) by another worker."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from arq.constants import result_key_prefix
from arq.worker import Retry
from redis.exceptions import ConnectionError as RedisConnectionError

from schemas import keys
from schemas.codec import decode_event, decode_job, encode
from schemas.events import ContinueTurn, ToolJob, ToolResult, ToolStarted
from tests.stack_helpers import ended, of, start_session, wait_for
from runtime import bus
from runtime.barrier import Barrier
from runtime.config import load_config
from runtime.session import Sessions
from workers.tools import runner as runner_mod
from workers.tools.registry import ErrorKind, Registry, ToolError, tool
from workers.tools.runner import MAX_DELIVERIES, ToolRunner

CALLS: list[str] = []


@tool(idempotent=True, timeout_s=2.0)
def echo(text: str) -> str:
    """Echo.

    Args:
        text: returned
    """
    CALLS.append("echo")
    return text


@tool(idempotent=False, timeout_s=2.0)
def book(what: str) -> str:
    """A non-idempotent tool that counts its runs.

    Args:
        what: what to book
    """
    CALLS.append("book")
    return f"booked {what}"


@tool(idempotent=True, timeout_s=0.2)
async def slow() -> str:
    """Sleeps past its timeout."""
    await asyncio.sleep(5)
    return "late"


@tool(idempotent=True, timeout_s=2.0)
def broken() -> str:
    """Raises."""
    raise RuntimeError("kaput")


@tool(idempotent=True, timeout_s=2.0, retries=2)
def flaky() -> str:
    """Fails on its first attempt."""
    CALLS.append("flaky")
    if len(CALLS) == 1:
        raise RuntimeError("transient")
    return "fine"


@tool(idempotent=False, timeout_s=2.0)
def flaky_once() -> str:
    """Non-idempotent: never retried."""
    CALLS.append("flaky_once")
    raise ToolError("declined")


@pytest.fixture(autouse=True)
def _reset() -> None:
    CALLS.clear()


@pytest.fixture
async def r(redis_url: str):
    client = bus.connect(redis_url)
    yield client
    await client.aclose()


@pytest.fixture
def runner(r, redis_url: str) -> ToolRunner:
    registry = Registry([echo, book, slow, broken, flaky, flaky_once], retry_delay_s=0.01)
    return ToolRunner(load_config(redis_url=redis_url), r, registry, "tools-test")


def job(name: str, args: Any = None, index: int = 0, **kw: Any) -> ToolJob:
    arguments = args if isinstance(args, str) else json.dumps(args or {})
    return ToolJob(sid="s", turn=0, attempt=1, index=index, call_id=f"call_0_{index}", name=name,
                   arguments=arguments, **kw)


async def events(r, sid: str = "s") -> list:
    return [decode_event(f[bus.FIELD]).body for _, f in await r.xrange(keys.events(sid))]


async def result_of(r, index: int = 0) -> ToolResult:
    [res] = [b for b in await events(r) if isinstance(b, ToolResult) and b.index == index]
    return res


# --------------------------------------------------------------------------- outcomes
async def test_a_result_is_published_recorded_and_timed(runner, r) -> None:
    assert await runner.run(job("echo", {"text": "hi"})) == "ok"
    started, res = await events(r)
    assert isinstance(started, ToolStarted) and started.worker == "tools-test"
    assert (res.content, res.is_error, res.id) == ("hi", False, "call_0_0")
    assert [x["content"] for x in await Barrier(r).results("s", 0)] == ["hi"]
    assert float(await r.hget(keys.TOOL_DURATIONS, "echo")) >= 0


@pytest.mark.parametrize("name, args, kind, fragment", [
    ("nope", {}, ErrorKind.UNKNOWN_TOOL, "unknown tool 'nope'"),
    ("echo", {"text": 3}, ErrorKind.INVALID_ARGUMENTS, "invalid arguments for echo"),
    ("echo", "{not json", ErrorKind.INVALID_JSON, "not valid JSON"),
    ("slow", {}, ErrorKind.TIMEOUT, "timed out"),
    ("broken", {}, ErrorKind.EXCEPTION, "RuntimeError: kaput"),
    ("flaky_once", {}, ErrorKind.TOOL_ERROR, "declined"),
])
async def test_every_failure_is_an_error_result(runner, r, name, args, kind, fragment) -> None:
    assert await runner.run(job(name, args)) == "error"
    res = await result_of(r)
    assert res.is_error and res.content.startswith("error: ") and fragment in res.content, res.content
    learned = await r.hget(keys.TOOL_DURATIONS, name)
    assert (learned is None) == (kind in (ErrorKind.UNKNOWN_TOOL, ErrorKind.INVALID_ARGUMENTS,
                                          ErrorKind.INVALID_JSON))


async def test_an_invalid_call_is_reported_and_nothing_runs(runner, r) -> None:
    await runner.run(job("echo", "{\"text\": \"cut", valid=False, error="truncated"))
    assert CALLS == []
    [res] = await events(r)  # no tool.started
    assert res.is_error and "malformed (truncated)" in res.content


async def test_only_idempotent_tools_are_retried(runner, r) -> None:
    await runner.run(job("flaky", index=0))
    await runner.run(job("flaky_once", index=1))
    assert CALLS == ["flaky", "flaky", "flaky_once"]
    assert not (await result_of(r, 0)).is_error and (await result_of(r, 1)).is_error


async def test_an_overall_budget_bounds_the_run(runner, r, monkeypatch) -> None:
    async def hang(name: str, arguments: str):
        await asyncio.sleep(60)

    monkeypatch.setattr(runner.registry, "run", hang)
    monkeypatch.setattr(runner_mod, "run_budget", lambda registry, spec: 0.1)
    await runner.run(job("echo", {"text": "x"}))
    res = await result_of(r)
    assert res.is_error and "did not finish within 0.1 s" in res.content


async def test_an_internal_error_still_answers_the_call(runner, r, monkeypatch) -> None:
    async def bug(name: str, arguments: str):
        raise KeyError("oops")

    monkeypatch.setattr(runner.registry, "run", bug)
    assert await runner.run_tool({"job_try": 1}, encode(job("echo", {"text": "x"}))) == "error"
    res = await result_of(r)
    assert res.is_error and "internal error in the tool worker (KeyError)" in res.content


async def test_redis_unavailable_retries_the_job(runner, monkeypatch) -> None:
    async def down(*a: Any, **k: Any):
        raise RedisConnectionError("down")

    monkeypatch.setattr(runner.barrier, "result", down)
    with pytest.raises(Retry):
        await runner.run_tool({"job_try": 1}, encode(job("echo", {"text": "x"})))


async def test_an_undecodable_job_is_dead_lettered(runner, r) -> None:
    assert await runner.run_tool({"job_try": 1}, b"\x93garbage") == "undecodable"
    assert await r.xlen(keys.DEAD) == 1


# --------------------------------------------------------------------------- deliveries
async def test_a_duplicate_delivery_does_nothing(runner, r) -> None:
    await runner.run(job("echo", {"text": "a"}))
    assert await runner.run(job("echo", {"text": "a"}), job_try=2) == "duplicate"
    assert CALLS == ["echo"]
    assert len(await events(r)) == 2  # one started, one result


async def test_a_non_idempotent_tool_is_not_rerun_after_an_interrupted_run(runner, r) -> None:
    await r.set(keys.tool_run("s", 0, 0), "running:tools-dead")  # a worker died mid-run
    await runner.run(job("book", {"what": "table"}), job_try=2)
    assert CALLS == []
    res = await result_of(r)
    assert res.is_error and "not run again" in res.content and "effect is unknown" in res.content


async def test_a_non_idempotent_outcome_survives_a_lost_recording(runner, r) -> None:
    j = job("book", {"what": "table"})
    assert await runner.outcome(j, 1)  # ran, then the worker died before recording
    await runner.run(j, job_try=2)
    assert CALLS == ["book"]
    assert (await result_of(r)).content == "booked table"


async def test_a_job_whose_workers_keep_dying_gets_an_error(runner, r) -> None:
    await runner.run(job("echo", {"text": "x"}), job_try=MAX_DELIVERIES + 1)
    assert CALLS == []
    res = await result_of(r)
    assert res.is_error and f"stopped {MAX_DELIVERIES} times" in res.content


async def test_the_last_result_continues_the_session(runner, r) -> None:
    await Sessions(r).create("s", [{"role": "user", "content": "hi"}], max_turns=4)
    await Barrier(r).turn_end("s", 0, 2)
    await runner.run(job("echo", {"text": "a"}, index=0))
    assert await r.xlen(keys.DECODE_JOBS) == 0
    await runner.run(job("echo", {"text": "b"}, index=1))
    [(_, fields)] = await r.xrange(keys.DECODE_JOBS)
    assert decode_job(fields[bus.FIELD]) == ContinueTurn(sid="s", turn=0)


# --------------------------------------------------------------------------- shutdown
@tool(idempotent=True, timeout_s=10.0)
async def nap(seconds: float) -> str:
    """Sleep.

    Args:
        seconds: how long
    """
    CALLS.append("nap")
    await asyncio.sleep(seconds)
    return "rested"


async def _serve(redis_url: str, r, stop: asyncio.Event, grace_s: float) -> asyncio.Task:
    from workers.tools.worker import run_tools_worker

    return asyncio.create_task(run_tools_worker(load_config(redis_url=redis_url), r, Registry([nap]), stop, grace_s))


async def _dispatch_nap(redis_url: str, seconds: float) -> None:
    from runtime.tool_catalog import ToolCatalog
    from runtime.tool_queue import Dispatcher, arq_pool
    from schemas.events import ToolCallReady

    arq = await arq_pool(redis_url)
    await Dispatcher(arq, ToolCatalog(arq)).dispatch("s", 0, 1, ToolCallReady(
        index=0, id="call_0_0", name="nap", arguments=json.dumps({"seconds": seconds})))
    await arq.aclose()


async def _until_event(r, kind: type, timeout_s: float = 5.0) -> Any:
    async with asyncio.timeout(timeout_s):
        while True:
            found = [b for b in await events(r) if isinstance(b, kind)]
            if found:
                return found[0]
            await asyncio.sleep(0.02)


async def test_stop_lets_a_running_job_finish(redis_url, r) -> None:
    stop = asyncio.Event()
    task = await _serve(redis_url, r, stop, grace_s=5.0)
    await _dispatch_nap(redis_url, 0.5)
    await _until_event(r, ToolStarted)
    stop.set()
    await task
    assert (await result_of(r)).content == "rested"


async def test_a_job_outliving_the_grace_is_requeued_at_once(redis_url, r) -> None:
    stop = asyncio.Event()
    task = await _serve(redis_url, r, stop, grace_s=0.1)
    await _dispatch_nap(redis_url, 1.0)
    await _until_event(r, ToolStarted)
    stop.set()
    await task
    assert [b for b in await events(r) if isinstance(b, ToolResult)] == []
    stop2 = asyncio.Event()
    task2 = await _serve(redis_url, r, stop2, grace_s=5.0)  # no lease to wait for: it starts at once
    res = await _until_event(r, ToolResult, timeout_s=2.5)
    stop2.set()
    await task2
    assert res.content == "rested" and CALLS == ["nap", "nap"]


# --------------------------------------------------------------------------- SIGKILL
TOOLS_TOML = """
[registry]
include_debug = true

[python.append_line]
target = "workers.tools.debug:append_line"
"""


def _calls(path: Path) -> list[str]:
    sleep = {"name": "debug_sleep", "arguments": {"text": "slept", "seconds": 3}}
    append = {"name": "append_line", "arguments": {"path": str(path), "line": "booked", "seconds": 3}}
    return [f"Both at once.\n<tool_call>\n{json.dumps(sleep)}\n</tool_call>\n<tool_call>\n{json.dumps(append)}\n"
            "</tool_call>", "Results: {{ results[0] }} | {{ results[1] }}"]


async def test_a_sigkilled_workers_jobs_finish_elsewhere_at_most_once(stack_factory, r, tmp_path) -> None:
    toml = tmp_path / "tools.toml"
    toml.write_text(TOOLS_TOML)
    side_effects = Path(__import__("tempfile").mkdtemp()) / "bookings.txt"
    stack = stack_factory(replay_rate=200, tools_config=str(toml))
    [first] = stack.procs["tools"]
    await start_session(r, "k", _calls(side_effects))
    bodies = await wait_for(r, "k", lambda b: len(of(b, "ToolStarted")) == 2)
    assert {b.worker.rsplit("-", 1)[1] for b in of(bodies, "ToolStarted")} == {str(first.pid)}
    async with asyncio.timeout(5):
        while not side_effects.exists():
            await asyncio.sleep(0.02)
    stack.start("tools")  # the other worker of the pool
    stack.kill(first)  # SIGKILL, mid-job: both calls are running
    bodies = await wait_for(r, "k", ended)
    slept, booked = sorted(of(bodies, "ToolResult"), key=lambda x: x.index)
    assert (slept.content, slept.is_error) == ("slept", False)  # idempotent: run again, completed
    assert booked.is_error and "not run again" in booked.content  # non-idempotent: refused, said so
    assert side_effects.read_text() == "booked\n"  # its side effect happened exactly once
    assert len(of(bodies, "ToolStarted")) == 2 and len(of(bodies, "ToolResult")) == 2
    final = of(bodies, "SessionEnded")[0].content
    assert "slept" in final and "not run again" in final  # the model received both results
    envelope = msgspec.msgpack.decode(await r.get(result_key_prefix + keys.tool_job_id("k", 0, 0)))
    assert envelope["t"] == 2  # arq's job model: the second try of the same job id
