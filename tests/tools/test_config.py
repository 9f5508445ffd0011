"""The tools TOML file: loading every kind of tool, errors that name key and value, rendering."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from workers.tools import ErrorKind, format_registry, open_registry
from workers.tools.config import load_registry_config
from workers.tools.config import ToolConfigError, load_config
from workers.tools.render import type_label

from .conftest import MCP_SERVER, LocalServer
from .test_registry import assert_error

PLUGIN = '''
from workers.tools import tool

@tool(pool="shop", timeout_s=3.0)
def lookup_order(order_id: str) -> dict:
    """Look up an order.

    Args:
        order_id: the order number
    """
    return {"order_id": order_id, "status": "shipped"}

def plain(n: int = 1) -> int:
    """Double a number."""
    return 2 * n

NOT_CALLABLE = 3
'''


@pytest.fixture
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """An importable module ``ts_plugin`` with two tool functions."""
    (tmp_path / "ts_plugin.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "ts_plugin", raising=False)
    return "ts_plugin"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "tools.toml"
    path.write_text(textwrap.dedent(text))
    return path


def config_error(tmp_path: Path, text: str) -> str:
    """The message of the ``ToolConfigError`` that loading ``text`` raises."""
    path = write(tmp_path, text)
    with pytest.raises(ToolConfigError) as info:
        load_registry_config(path)
    message = str(info.value)
    assert message.startswith(str(path)), message
    return message


def test_empty_file_gives_the_builtin_tools(tmp_path: Path) -> None:
    reg = load_registry_config(write(tmp_path, ""))
    assert {"calculator", "get_time", "get_weather", "book_restaurant", "search", "http_get"} <= set(reg.names())
    assert "debug_sleep" not in reg


async def test_full_config(tmp_path: Path, plugin: str, local_http: LocalServer,
                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TS_TEST_KEY", "secret-1")
    path = write(tmp_path, f"""
        [registry]
        max_output_bytes = 2048
        builtins = ["calculator", "get_weather", "http_get"]
        include_debug = true

        [http_get]
        allow_hosts = ["127.0.0.1"]

        [python.lookup_order]
        target = "{plugin}:lookup_order"

        [python.double]
        target = "{plugin}:plain"
        description = "Double it."
        pool = "cpu"
        idempotent = true
        retries = 1

        [mcp.demo]
        command = "{sys.executable}"
        args = ["{MCP_SERVER}"]
        include = ["add"]
        pool = "mcp"

        [http.echo_order]
        url = "{local_http.url}/echo"
        description = "Echo an order."
        headers = {{ X-Api-Key = "${{TS_TEST_KEY}}" }}
        parameters = {{ type = "object", properties = {{ id = {{ type = "string" }} }}, required = ["id"] }}

        [tools.get_weather]
        pool = "fast"
        timeout_s = 1.5

        [tools.demo__add]
        timeout_s = 4
    """)
    reg = load_registry_config(path)
    async with reg:
        assert reg.names() == ["calculator", "debug_sleep", "demo__add", "double", "echo_order", "get_weather",
                               "http_get", "lookup_order"]
        assert reg.pools() == {"default", "fast", "shop", "cpu", "mcp"}
        assert reg.max_output_bytes == 2048
        weather, add = reg.get("get_weather"), reg.get("demo__add")
        assert weather is not None and (weather.pool, weather.timeout_s, weather.retries) == ("fast", 1.5, 2)
        assert add is not None and (add.pool, add.timeout_s) == ("mcp", 4)
        double = reg.get("double")
        assert double is not None and (double.description, double.pool, double.retries) == ("Double it.", "cpu", 1)

        assert json.loads((await reg.run("lookup_order", '{"order_id": "7"}')).content)["status"] == "shipped"
        assert (await reg.run("double", '{"n": 21}')).content == "42"
        assert (await reg.run("demo__add", '{"a": 1, "b": 2}')).content == "3"
        assert json.loads((await reg.run("echo_order", '{"id": "A"}')).content) == {"received": {"id": "A"}}
        assert local_http.last_headers["X-Api-Key"] == "secret-1"
        hello = await reg.run("http_get", json.dumps({"url": f"{local_http.url}/hello"}))
        assert "hello from the test server" in hello.content
        assert_error(await reg.run("search", '{"query": "x"}'), ErrorKind.UNKNOWN_TOOL)


@pytest.mark.parametrize("text, fragments", [
    ("[registry\n", ["Expected ']'"]),
    ("[bogus]\nx = 1\n", ["unknown section [bogus]", "expected one of registry"]),
    ("[registry]\nmax_output_bytes = 'big'\n", ["registry.max_output_bytes = 'big'", "Expected `int`, got `str`"]),
    ("[registry]\nmax_output_bytes = 10\n", ["registry", "max_output_bytes must be >= 256, got 10"]),
    ("[registry]\nbuiltins = ['calculator', 'teleport']\n", ["registry.builtins", "no built-in tool 'teleport'"]),
    ("[registry]\nthreads = 0\n", ["threads must be >= 1, got 0"]),
    ("[tools.get_weather]\ntimeout_s = -1\n", ["tools.get_weather", "timeout_s must be > 0, got -1"]),
    ("[tools.get_weather]\ntiemout_s = 2\n", ["tools.get_weather", "unknown field `tiemout_s`"]),
    ("[tools.get_weather]\npool = 'a b'\n", ["tools.get_weather", "pool 'a b' must match"]),
    ("[tools.teleport]\npool = 'x'\n", ["[tools.teleport]", "no tool named 'teleport'"]),
    ("[tools.book_restaurant]\nretries = 2\n",
     ["tools.toml: [tools.book_restaurant]: tool book_restaurant: retries=2 needs idempotent=True"]),
    ("[mcp.fs]\nargs = []\n", ["mcp.fs", "exactly one of command or url"]),
    ("[mcp.fs]\ncommand = 'x'\nprefix = 'other'\n", ["mcp.fs.prefix = 'other'", "the table name sets it"]),
    ("[mcp.a__b]\ncommand = 'x'\n", ["mcp.a__b", "prefix 'a__b'"]),
    ("[mcp.fs]\nurl = 'http://h/mcp'\nheaders = { A = '${TS_SURELY_UNSET_VAR}' }\n",
     ["mcp.fs.headers.A", "TS_SURELY_UNSET_VAR is not set"]),
    ("[mcp.fs]\ncommand = 'x'\ntimeout_s = 'slow'\n", ["mcp.fs.timeout_s = 'slow'", "Expected `float`"]),
    ("[http.t]\ndescription = 'd'\n", ["http.t", "missing required field `url`"]),
    ("[http.t]\nurl = 'http://h/'\ndescription = 'd'\nmethod = 'DELETE'\n", ["http.t.method = 'DELETE'"]),
    ("[python.t]\ntarget = 'no_such_module_xyz:f'\n",
     ["python.t.target = 'no_such_module_xyz:f'", "cannot import"]),
    ("[python.t]\ntarget = 'json'\n", ["python.t", "target 'json' must look like 'package.module:function'"]),
    ("[python.t]\ntarget = 'json:nope'\n", ["python.t.target", "cannot import"]),
    ("[python.calculator]\ntarget = 'json:dumps'\n", ["python.calculator.target = 'json:dumps'"]),
    ("mcp = 3\n", ["mcp = 3", "expected a table"]),
    ("[http_get]\nallow_hosts = 'example.com'\n", ["http_get.allow_hosts = 'example.com'", "Expected `array`"]),
])
def test_errors_name_the_key_and_the_value(tmp_path: Path, text: str, fragments: list[str]) -> None:
    message = config_error(tmp_path, text)
    for fragment in fragments:
        assert fragment in message, message


def test_python_target_problems(tmp_path: Path, plugin: str) -> None:
    assert "not a function" in config_error(tmp_path, f"[python.t]\ntarget = '{plugin}:NOT_CALLABLE'\n")
    duplicate = config_error(tmp_path, f"[python.calculator]\ntarget = '{plugin}:plain'\n")
    assert "[python.calculator]" in duplicate and "already registered" in duplicate


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ToolConfigError, match="No such file"):
        load_config(tmp_path / "absent.toml")


def test_format_registry(tmp_path: Path) -> None:
    reg = load_registry_config(write(tmp_path, """
        [registry]
        builtins = ["get_weather", "calculator"]
        [tools.calculator]
        pool = "cpu"
    """))
    text = format_registry(reg)
    assert text.splitlines()[0] == "2 tools in 2 pool(s): cpu, default"
    assert "== pool cpu ==" in text and text.index("calculator") < text.index("== pool default ==")
    assert "get_weather  (python, timeout 5s, idempotent, retries 2)" in text
    assert '    date: string = "today" - ISO date or \'today\'' in text
    assert "    city: string, required - the city name" in text
    full = format_registry(reg, json_schema=True)
    assert '"required": [' in full and '"additionalProperties": false' in full


def test_type_label() -> None:
    assert type_label({"type": ["integer", "null"]}) == "integer | null"
    assert type_label({"type": "array", "items": {"type": "number"}}) == "array of number"
    assert type_label({"enum": ["a", 1]}) == 'one of "a", 1'
    assert type_label({"anyOf": [{"type": "string"}, {"type": "integer"}]}) == "string | integer"
    assert type_label({}) == "any"


async def test_open_registry_starts_it_and_cleans_up_on_failure(tmp_path: Path) -> None:
    reg = await open_registry(None, include_debug=True)
    assert "debug_sleep" in reg
    await reg.aclose()
    path = write(tmp_path, f"""
        [mcp.gone]
        command = "{sys.executable}"
        args = ["-c", "raise SystemExit(2)"]
    """)
    with pytest.raises(ToolConfigError, match="mcp.gone"):
        await open_registry(path)
