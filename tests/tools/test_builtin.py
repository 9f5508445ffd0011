"""Built-in tools: the calculator's arithmetic and its safety, clocks, http_get limits, demo tools."""

from __future__ import annotations

import datetime as dt
import importlib.util
import json
import warnings
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workers.tools import ErrorKind, ToolError, default_registry
from workers.tools.builtin import book_restaurant, get_weather, make_http_get, search
from workers.tools.calculator import evaluate, format_number
from workers.tools.registry import Registry

from .conftest import LocalServer
from .test_registry import assert_error

TRAINING_SPEC = Path(__file__).resolve().parents[2] / "training" / "tools_spec.py"


# --------------------------------------------------------------------------- calculator
@pytest.mark.parametrize("expression, expected", [
    ("2 + 3 * 4", "14"), ("(2 + 3) * 4", "20"), ("2 ** 10", "1024"), ("7 // 2", "3"), ("7 % 3", "1"),
    ("-3 + +5", "2"), ("7 / 2", "3.5"), ("0.1 + 0.2", "0.3"), ("sqrt(16)", "4"), ("2 * pi", "6.28318530718"),
    ("log(e)", "1"), ("log(8, 2)", "3"), ("factorial(5)", "120"), ("max(1, 7, 3)", "7"),
    ("round(2.567, 2)", "2.57"),
    ("2 ** -2", "0.25"), ("2 ** 4000 // 2 ** 3999", "2"), ("abs(-4.5)", "4.5"), ("1e3 * 2", "2000"),
])
def test_calculator_evaluates(expression: str, expected: str) -> None:
    assert format_number(evaluate(expression)) == expected


@pytest.mark.parametrize("expression, fragment", [
    ("().__class__", "attribute access"),
    ("(1).real", "attribute access '.real'"),
    ("__import__('os').system('true')", "unsupported syntax"),
    ("open('/etc/passwd')", "unknown function 'open'"),
    ("x + 1", "unknown name 'x'"),
    ("[1, 2][0]", "unsupported syntax"),
    ("'a' * 3", "not a number"),
    ("True + 1", "unsupported literal True"),
    ("lambda: 1", "unsupported syntax"),
    ("[i for i in range(9)]", "unsupported syntax"),
    ("sqrt(x=4)", "without keyword arguments"),
    ("9 ** 9 ** 9", "result too large"),
    ("10 ** 10000", "result too large"),
    ("2 ** 5000", "exceeds 4096 bits"),
    ("(2 ** 4000) * (2 ** 4000)", "result too large"),
    ("10.0 ** 400", "result too large"),
    ("factorial(10 ** 6)", "factorial needs an integer between 0 and"),
    ("1 / 0", "division by zero"),
    ("5 % 0", "division by zero"),
    ("sqrt(-1)", "math error"),
    ("(-8) ** 0.5", "complex"),
    ("1 +", "cannot parse"),
    ("1; 2", "cannot parse"),
    ("1" * 501, "too long"),
    ("(" * 240 + "1" + ")" * 240, "cannot parse"),
    ("-" * 400 + "1", None),
])
def test_calculator_rejects_unsafe_or_huge_input(expression: str, fragment: str | None) -> None:
    if fragment is None:  # deep but legal: evaluates without blowing the stack
        assert evaluate(expression) == 1
        return
    with pytest.raises(ToolError) as info:
        evaluate(expression)
    assert fragment in str(info.value)


def test_calculator_rejects_a_typo_without_a_warning_on_stderr() -> None:
    """"2or 3" (a model's typo) is a parse error for the caller, not a SyntaxWarning on the worker's stderr."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with pytest.raises(ToolError, match="cannot parse"):
            evaluate("2or 3")
    assert [str(w.message) for w in seen] == []


@settings(max_examples=150, deadline=None)
@given(st.recursive(st.integers(-1000, 1000).map(str),
                    lambda inner: st.tuples(inner, st.sampled_from(["+", "-", "*"]), inner)
                    .map(lambda t: f"({t[0]} {t[1]} {t[2]})"), max_leaves=12))
def test_calculator_matches_python_integer_arithmetic(expression: str) -> None:
    assert evaluate(expression) == eval(expression)  # noqa: S307 - the reference, on generated input only


async def test_calculator_tool_errors_are_outcomes() -> None:
    async with default_registry() as reg:
        assert (await reg.run("calculator", '{"expression": "6 * 7"}')).content == "42"
        assert_error(await reg.run("calculator", '{"expression": "os.getcwd()"}'), ErrorKind.TOOL_ERROR,
                     "calculator:", "attribute access")


# --------------------------------------------------------------------------- time
async def test_get_time_and_convert_time() -> None:
    async with default_registry() as reg:
        out = json.loads((await reg.run("get_time", '{"timezone": "Asia/Tokyo"}')).content)
        now = dt.datetime.fromisoformat(out["datetime"])
        assert out["utc_offset"] == "+0900" and now.utcoffset() == dt.timedelta(hours=9)
        assert abs(now - dt.datetime.now(dt.timezone.utc)) < dt.timedelta(minutes=1)
        request = {"time": "2025-01-15T12:00", "from_timezone": "Europe/Paris", "to_timezone": "America/New_York"}
        conv = json.loads((await reg.run("convert_time", json.dumps(request))).content)
        assert conv == {"from": "2025-01-15T12:00:00+01:00", "to": "2025-01-15T06:00:00-05:00"}


@pytest.mark.parametrize("zone", ["Mars/Olympus", "../../etc/passwd", ""])
async def test_get_time_unknown_zone_is_a_clear_error(zone: str) -> None:
    async with default_registry() as reg:
        assert_error(await reg.run("get_time", json.dumps({"timezone": zone})), ErrorKind.TOOL_ERROR,
                     "unknown time zone", "Europe/Paris")


# --------------------------------------------------------------------------- demo tools
def test_demo_tools_are_deterministic_and_labelled() -> None:
    def forecast(city: str, date: str = "today") -> tuple[int, str]:
        weather = get_weather(city, date)
        return weather["temperature"], weather["condition"]

    assert forecast("Paris", "2025-06-01") == forecast("paris ", "2025-06-01")
    assert len({forecast(city) for city in ("Paris", "Lima", "Oslo", "Tokyo", "Cairo")}) > 1
    weather = get_weather("Paris")
    assert -5 <= weather["temperature"] <= 35 and isinstance(weather["condition"], str)
    booking = book_restaurant("Chez Nous", 2, "19:30")
    assert booking["booking_id"] == book_restaurant("Chez Nous", 2, "19:30")["booking_id"]
    assert booking["booking_id"] != book_restaurant("Chez Nous", 3, "19:30")["booking_id"]
    assert len(search("rust async")["results"]) == 3
    reg = default_registry()
    for name in ("get_weather", "search"):
        assert "DEMO DATA" in reg.get(name).description  # type: ignore[union-attr]
    assert "DEMO" in reg.get("book_restaurant").description  # type: ignore[union-attr]


def test_book_restaurant_is_the_non_idempotent_example() -> None:
    reg = default_registry()
    assert not reg.get("book_restaurant").idempotent  # type: ignore[union-attr]
    assert reg.get("get_weather").idempotent  # type: ignore[union-attr]
    with pytest.raises(ToolError, match="party_size"):
        book_restaurant("X", 0, "19:00")


def test_schemas_match_the_training_tool_spec() -> None:
    assert TRAINING_SPEC.exists(), "training/tools_spec.py is part of the repository"
    module_spec = importlib.util.spec_from_file_location("_training_tools_spec", TRAINING_SPEC)
    assert module_spec is not None and module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    reg = default_registry()
    for trained in module.TOOLS:
        fn = trained["function"]
        ours = reg.get(fn["name"])
        assert ours is not None, fn["name"]
        params = ours.parameters
        assert set(params["properties"]) == set(fn["parameters"]["properties"]), fn["name"]
        assert params["required"] == fn["parameters"]["required"], fn["name"]
        for arg, schema in fn["parameters"]["properties"].items():
            assert params["properties"][arg]["type"] == schema["type"], (fn["name"], arg)


def test_default_registry_includes_debug_tools_only_when_asked() -> None:
    assert "debug_sleep" not in default_registry()
    assert "debug_sleep" in default_registry(include_debug=True)
    expected = {"calculator", "get_time", "http_get", "get_weather", "book_restaurant", "search"}
    assert expected <= set(default_registry().names())


async def test_debug_sleep_runs_concurrently() -> None:
    import asyncio
    import time

    async with default_registry(include_debug=True) as reg:
        start = time.perf_counter()
        outs = await asyncio.gather(*[reg.run("debug_sleep", json.dumps({"text": str(i), "seconds": 0.3}))
                                      for i in range(50)])
        assert [o.content for o in outs] == [str(i) for i in range(50)]
        assert time.perf_counter() - start < 3.0  # serially: 15 s


# --------------------------------------------------------------------------- http_get
async def test_http_get_denies_everything_by_default() -> None:
    async with default_registry() as reg:
        assert_error(await reg.run("http_get", '{"url": "http://127.0.0.1:1/"}'), ErrorKind.TOOL_ERROR,
                     "no hosts are allow-listed")


async def test_http_get_fetches_from_an_allowed_host(local_http: LocalServer) -> None:
    async with default_registry(http_allow_hosts=["127.0.0.1"]) as reg:
        out = await reg.run("http_get", json.dumps({"url": f"{local_http.url}/hello"}))
        assert not out.is_error
        assert out.content.startswith("HTTP 200 OK, text/plain") and "hello from the test server" in out.content
        missing = await reg.run("http_get", json.dumps({"url": f"{local_http.url}/missing"}))
        assert not missing.is_error and missing.content.startswith("HTTP 404")


@pytest.mark.parametrize("url, fragment", [
    ("http://localhost/", "host 'localhost' is not allowed; allowed hosts: 127.0.0.1, *.example.org"),
    ("http://example.org.evil.com/", "is not allowed"),
    ("ftp://127.0.0.1/", "need an absolute http:// or https:// URL"),
    ("not a url", "need an absolute http"),
])
async def test_http_get_rejects_hosts_and_schemes(url: str, fragment: str) -> None:
    async with Registry([make_http_get(["127.0.0.1", "*.example.org"])]) as reg:
        assert_error(await reg.run("http_get", json.dumps({"url": url})), ErrorKind.TOOL_ERROR, fragment)


async def test_http_get_blocks_redirects_to_other_hosts(local_http: LocalServer) -> None:
    async with Registry([make_http_get(["127.0.0.1"])]) as reg:
        out = await reg.run("http_get", json.dumps({"url": f"{local_http.url}/redirect-out"}))
        assert_error(out, ErrorKind.TOOL_ERROR, "host 'elsewhere.invalid' is not allowed")


async def test_http_get_size_and_time_limits(local_http: LocalServer) -> None:
    async with Registry([make_http_get(["127.0.0.1"], max_bytes=1000, timeout_s=0.5)],
                        retry_delay_s=0.0) as reg:
        big = await reg.run("http_get", json.dumps({"url": f"{local_http.url}/big"}))
        assert not big.is_error and "[body cut at 1000 bytes]" in big.content and len(big.content) < 1200
        binary = await reg.run("http_get", json.dumps({"url": f"{local_http.url}/binary"}))
        assert "binary content (not shown)" in binary.content
        slow = await reg.run("http_get", json.dumps({"url": f"{local_http.url}/slow"}))
        assert_error(slow, ErrorKind.UNAVAILABLE, "ReadTimeout")
