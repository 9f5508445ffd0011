"""Registry: schema derivation from type hints and docstrings, and every path of ``run``."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Annotated, Any, Literal, Optional

import pytest

from workers.tools import ErrorKind, Registry, ToolError, ToolOutcome, ToolSpec, tool
from workers.tools.registry import ToolConfigError, ToolUnavailable, cap_output, spec_of
from workers.tools.schema import function_schema, parse_docstring


def assert_error(outcome: ToolOutcome, kind: ErrorKind, *fragments: str) -> None:
    """An error outcome of ``kind`` whose model-facing content contains every fragment."""
    assert outcome.is_error, outcome
    assert outcome.error_kind == kind, outcome
    assert outcome.content.startswith("error: "), outcome.content
    for fragment in fragments:
        assert fragment in outcome.content, outcome.content
    assert outcome.duration_ms >= 0


# --------------------------------------------------------------------------- schema derivation
def test_schema_from_type_hints_defaults_and_docstring() -> None:
    def plan(city: str, nights: int, budget: float, refundable: bool, tags: list[str],
             mode: Literal["fast", "cheap"] = "cheap", note: Optional[str] = None,
             rooms: int | None = 1, scores: dict[str, float] | None = None,
             legs: tuple[int, ...] = (), anything: Any = None) -> str:
        """Plan a trip.

        More detail that continues
        over two lines.

        Args:
            city: where to go
            nights (int): how many nights,
                continued on the next line
            budget: in euros
            refundable: whether the booking can be cancelled
            tags: labels
            mode: speed or price

        Returns:
            a plan
        """
        return ""

    summary, schema = function_schema(plan)
    assert summary == "Plan a trip. More detail that continues over two lines."
    props = schema["properties"]
    assert schema["type"] == "object" and schema["additionalProperties"] is False
    assert schema["required"] == ["city", "nights", "budget", "refundable", "tags"]
    assert props["city"] == {"type": "string", "description": "where to go"}
    assert props["nights"] == {"type": "integer", "description": "how many nights, continued on the next line"}
    assert props["budget"]["type"] == "number" and props["refundable"]["type"] == "boolean"
    assert props["tags"] == {"type": "array", "items": {"type": "string"}, "description": "labels"}
    assert props["mode"] == {"type": "string", "enum": ["fast", "cheap"], "description": "speed or price",
                             "default": "cheap"}
    assert props["note"] == {"type": ["string", "null"], "default": None}
    assert props["rooms"] == {"type": ["integer", "null"], "default": 1}
    assert props["scores"] == {"type": ["object", "null"], "additionalProperties": {"type": "number"},
                               "default": None}
    assert props["legs"] == {"type": "array", "items": {"type": "integer"}, "default": []}
    assert props["anything"] == {"default": None}


def test_schema_annotated_literal_and_union() -> None:
    def f(n: Annotated[int, "how many", {"minimum": 1}], level: Literal[1, 2, 3],
          either: int | str, maybe: Literal["a", "b"] | None = None) -> None:
        """No args section."""

    _, schema = function_schema(f)
    props = schema["properties"]
    assert props["n"] == {"type": "integer", "description": "how many", "minimum": 1}
    assert props["level"] == {"type": "integer", "enum": [1, 2, 3]}
    assert props["either"] == {"anyOf": [{"type": "integer"}, {"type": "string"}]}
    assert props["maybe"] == {"type": ["string", "null"], "enum": ["a", "b", None], "default": None}


def test_schema_of_function_without_parameters() -> None:
    def nothing() -> str:
        """Nothing to pass."""
        return "ok"

    assert function_schema(nothing) == ("Nothing to pass.", {"type": "object", "properties": {}, "required": [],
                                                             "additionalProperties": False})


class Thing:
    pass


def test_schema_rejects_what_json_cannot_express() -> None:
    class Local:
        pass

    def untyped(x):  # type: ignore[no-untyped-def]
        pass

    def custom(x: Thing) -> None:
        pass

    def star(*args: int) -> None:
        pass

    def int_keys(x: dict[int, str]) -> None:
        pass

    def local(x: Local) -> None:  # unresolvable under postponed annotations
        pass

    for fn, fragment in [(untyped, "no type annotation"), (custom, "unsupported type"),
                         (local, "cannot resolve its type hints"),
                         (star, "plain keyword parameter"), (int_keys, "keys must be str")]:
        with pytest.raises(TypeError, match=fragment):
            function_schema(fn)


def test_parse_docstring_sections() -> None:
    summary, args = parse_docstring("Do it.\n\nArgs:\n    a: first\n    b (str): second\n\nRaises:\n    x: no")
    assert summary == "Do it."
    assert args == {"a": "first", "b": "second"}


# --------------------------------------------------------------------------- @tool and ToolSpec
@tool(pool="io", timeout_s=5.0, idempotent=True, retries=2)
def get_weather(city: str, date: str = "today") -> dict[str, Any]:
    """Weather forecast for a city.

    Args:
        city: the city name
        date: ISO date or 'today'
    """
    return {"city": city, "date": date}


def test_tool_decorator_attaches_spec_and_keeps_function() -> None:
    spec = spec_of(get_weather)
    assert get_weather("Oslo") == {"city": "Oslo", "date": "today"}
    assert (spec.name, spec.pool, spec.timeout_s, spec.idempotent, spec.retries, spec.source) == \
        ("get_weather", "io", 5.0, True, 2, "python")
    assert spec.description == "Weather forecast for a city."
    assert spec.openai() == {"type": "function", "function": {
        "name": "get_weather", "description": "Weather forecast for a city.", "parameters": spec.parameters}}


def test_toolspec_validates_its_policy() -> None:
    base = dict(description="", parameters={"type": "object"}, handler=lambda: None)
    with pytest.raises(ValueError, match="must match"):
        ToolSpec(name="has space", **base)
    with pytest.raises(ValueError, match="must match"):
        ToolSpec(name="x" * 65, **base)
    with pytest.raises(ValueError, match="idempotent"):
        ToolSpec(name="x", retries=1, **base)
    with pytest.raises(ValueError, match="timeout_s"):
        ToolSpec(name="x", timeout_s=0, **base)
    with pytest.raises(ValueError, match="pool"):
        ToolSpec(name="x", pool="a:b", **base)


def test_registry_queries() -> None:
    reg = Registry([spec_of(get_weather)])
    reg.add(tool(pool="cpu")(lambda_free_add))
    assert reg.names() == ["get_weather", "lambda_free_add"]
    assert reg.pools() == {"io", "cpu"}
    assert reg.get("nope") is None and "get_weather" in reg and len(reg) == 2
    assert [t["function"]["name"] for t in reg.openai_tools(["lambda_free_add"])] == ["lambda_free_add"]
    assert len(reg.openai_tools()) == 2
    with pytest.raises(KeyError, match="nope"):
        reg.openai_tools(["nope"])
    with pytest.raises(ValueError, match="already registered"):
        reg.add(spec_of(get_weather))


def lambda_free_add(a: int, b: int) -> int:
    """Add."""
    return a + b


def test_overrides_apply_on_add_and_unknown_ones_are_reported() -> None:
    reg = Registry(overrides={"get_weather": {"pool": "fast", "timeout_s": 1.0}})
    spec = reg.add(get_weather)
    assert (spec.pool, spec.timeout_s, spec.retries) == ("fast", 1.0, 2)
    reg.check_overrides()
    with pytest.raises(ToolConfigError, match=r"\[tools.get_weather\].*idempotent"):
        Registry([spec_of(get_weather)], overrides={"get_weather": {"idempotent": False}})
    with pytest.raises(ToolConfigError, match="no tool named 'ghost'"):
        Registry(overrides={"ghost": {"pool": "x"}}).check_overrides()


# --------------------------------------------------------------------------- run: success paths
async def test_run_sync_and_async_tools_and_serialises_results() -> None:
    @tool
    async def shout(text: str) -> str:
        return text.upper()

    async with Registry([spec_of(get_weather), spec_of(shout)]) as reg:
        out = await reg.run("get_weather", '{"city": "Oslo"}')
        assert out == ToolOutcome(content='{"city":"Oslo","date":"today"}', duration_ms=out.duration_ms)
        assert (await reg.run("shout", '{"text": "hi"}')).content == "HI"


async def test_run_treats_empty_arguments_as_an_empty_object() -> None:
    @tool
    def ping() -> str:
        return "pong"

    async with Registry([spec_of(ping)]) as reg:
        assert (await reg.run("ping", "")).content == "pong"
        assert (await reg.run("ping", " {} ")).content == "pong"


async def test_sync_tools_run_off_the_event_loop_concurrently() -> None:
    lock, running, peak = threading.Lock(), [0], [0]
    loop_thread = threading.get_ident()

    @tool
    def block(seconds: float) -> str:
        assert threading.get_ident() != loop_thread  # off the event loop
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(seconds)
        with lock:
            running[0] -= 1
        return "done"

    async with Registry([spec_of(block)]) as reg:
        outs = await asyncio.gather(*[reg.run("block", '{"seconds": 0.3}') for _ in range(8)])
        assert all(o.content == "done" for o in outs)
        assert peak[0] >= 2  # several ran at once (counted, not timed)


# --------------------------------------------------------------------------- run: every error path
async def test_run_unknown_tool_lists_available_ones() -> None:
    async with Registry([spec_of(get_weather)]) as reg:
        assert_error(await reg.run("get_wether", "{}"), ErrorKind.UNKNOWN_TOOL,
                     "unknown tool 'get_wether'", "available: get_weather")


async def test_run_invalid_json_and_non_object_arguments() -> None:
    async with Registry([spec_of(get_weather)]) as reg:
        assert_error(await reg.run("get_weather", '{"city": '), ErrorKind.INVALID_JSON,
                     "get_weather", "not valid JSON")
        assert_error(await reg.run("get_weather", '["Oslo"]'), ErrorKind.INVALID_ARGUMENTS,
                     "expected a JSON object, got list")


@pytest.mark.parametrize("arguments, fragment", [
    ("{}", "'city' is a required property"),
    ('{"city": 5}', "5 is not of type 'string' (at 'city')"),
    ('{"city": "Oslo", "when": "now"}', "'when' was unexpected"),
])
async def test_run_invalid_arguments_name_the_problem(arguments: str, fragment: str) -> None:
    async with Registry([spec_of(get_weather)]) as reg:
        assert_error(await reg.run("get_weather", arguments), ErrorKind.INVALID_ARGUMENTS,
                     "invalid arguments for get_weather", fragment)


async def test_run_timeout_for_async_and_sync_tools() -> None:
    @tool(timeout_s=0.1)
    async def stall() -> str:
        await asyncio.sleep(5)
        return "never"

    @tool(timeout_s=0.1)
    def stall_sync() -> str:
        time.sleep(0.5)
        return "never"

    async with Registry([spec_of(stall), spec_of(stall_sync)]) as reg:
        for name in ("stall", "stall_sync"):
            out = await reg.run(name, "{}")
            assert_error(out, ErrorKind.TIMEOUT, f"{name} timed out after 0.1 s")
            assert out.duration_ms < 450


async def test_run_exception_and_tool_error() -> None:
    @tool
    def broken(x: int) -> int:
        return {}[x]  # type: ignore[index]

    @tool
    def picky(x: int) -> int:
        raise ToolError(f"x must be even, got {x}")

    async with Registry([spec_of(broken), spec_of(picky)]) as reg:
        assert_error(await reg.run("broken", '{"x": 3}'), ErrorKind.EXCEPTION, "broken failed: KeyError: 3")
        assert_error(await reg.run("picky", '{"x": 3}'), ErrorKind.TOOL_ERROR, "picky: x must be even, got 3")


async def test_run_result_that_is_not_json_serialisable_is_an_exception_outcome() -> None:
    @tool
    def weird() -> object:
        return object()

    async with Registry([spec_of(weird)]) as reg:
        assert_error(await reg.run("weird", "{}"), ErrorKind.EXCEPTION, "weird failed")


async def test_run_caps_oversized_output_with_a_marker() -> None:
    @tool
    def flood(n: int) -> str:
        return "é" * n

    async with Registry([spec_of(flood)], max_output_bytes=1000) as reg:
        small = await reg.run("flood", '{"n": 10}')
        assert small.content == "é" * 10 and not small.truncated
        big = await reg.run("flood", '{"n": 100000}')
        assert not big.is_error and big.truncated
        assert len(big.content.encode()) <= 1000
        assert big.content.startswith("éé") and "[output truncated: 200000 bytes" in big.content


def test_cap_output_never_splits_a_character() -> None:
    for cap in range(60, 120):
        text, cut = cap_output("€" * 100, cap)
        assert cut and len(text.encode()) <= cap
        text.encode().decode()  # valid UTF-8


async def test_error_messages_are_short() -> None:
    @tool
    def loud() -> str:
        raise RuntimeError("x" * 10_000)

    async with Registry([spec_of(loud)]) as reg:
        out = await reg.run("loud", "{}")
        assert out.is_error and len(out.content) < 600


# --------------------------------------------------------------------------- retries
async def test_idempotent_tool_is_retried_after_transient_failures() -> None:
    calls: list[int] = []

    @tool(idempotent=True, retries=2)
    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise ToolUnavailable("backend down")
        return "ok"

    async with Registry([spec_of(flaky)], retry_delay_s=0.0) as reg:
        out = await reg.run("flaky", "{}")
        assert (out.content, out.attempts, len(calls)) == ("ok", 3, 3)


async def test_non_idempotent_tool_and_tool_errors_are_never_retried() -> None:
    calls: list[str] = []

    @tool
    def once() -> str:
        calls.append("once")
        raise RuntimeError("boom")

    @tool(idempotent=True, retries=3)
    def refuses() -> str:
        calls.append("refuses")
        raise ToolError("bad input")

    async with Registry([spec_of(once), spec_of(refuses)], retry_delay_s=0.0) as reg:
        assert (await reg.run("once", "{}")).attempts == 1
        assert (await reg.run("refuses", "{}")).attempts == 1
    assert calls == ["once", "refuses"]


async def test_retries_exhausted_report_the_last_error() -> None:
    @tool(idempotent=True, retries=1, timeout_s=0.05)
    async def hang() -> str:
        await asyncio.sleep(1)
        return ""

    async with Registry([spec_of(hang)], retry_delay_s=0.0) as reg:
        out = await reg.run("hang", "{}")
        assert_error(out, ErrorKind.TIMEOUT)
        assert out.attempts == 2


async def test_outcome_is_a_msgspec_struct_that_round_trips() -> None:
    import msgspec

    out = ToolOutcome(content="x", is_error=True, duration_ms=1.5, error_kind="timeout")
    assert msgspec.json.decode(msgspec.json.encode(out), type=ToolOutcome) == out
    assert json.loads(msgspec.json.encode(out))["error_kind"] == "timeout"


async def test_integral_floats_reach_integer_parameters_as_ints() -> None:
    @tool
    def kind(n: int, x: float) -> str:
        return f"{type(n).__name__} {type(x).__name__}"

    async with Registry([spec_of(kind)]) as reg:
        assert (await reg.run("kind", '{"n": 2.0, "x": 2.0}')).content == "int float"
        assert_error(await reg.run("kind", '{"n": 2.5, "x": 1}'), ErrorKind.INVALID_ARGUMENTS,
                     "2.5 is not of type")


def test_deadline_covers_every_attempt() -> None:
    reg = Registry([spec_of(get_weather)], retry_delay_s=0.1)  # timeout 5 s, 2 retries
    assert reg.deadline_s("get_weather") == pytest.approx(3 * 5.0 + 0.1 + 0.2)
