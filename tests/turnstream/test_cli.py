"""The command line: each command offers its processes' configuration flags, with help and defaults
from the one table of keys; ``--version``; unknown ``TURNSTREAM_*`` variables are reported; logs
can be JSON lines carrying the session id; ``status`` lists live processes."""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys
import time
from dataclasses import fields

import pytest

from runtime.config import KINDS, Config, ConfigError, load_config, unknown_env
from turnstream import __version__
from turnstream.cli import _parser
from turnstream.logs import JsonFormatter, session_context
from turnstream.status import render

CLI = [sys.executable, "-m", "turnstream.cli"]


def _flags(*argv: str) -> set[str]:
    """The long options a command's --help lists."""
    out = subprocess.run(CLI + [*argv, "--help"], capture_output=True, text=True, check=True).stdout
    return {w.rstrip(",") for w in out.split() if w.startswith("--")} - {"--help"}


def test_every_key_has_a_flag_and_help_with_its_default() -> None:
    for f in fields(Config):
        assert f.metadata["help"] and f.metadata["kinds"], f.name
    up = _flags("up")
    assert {"--" + f.name.replace("_", "-") for f in fields(Config)} <= up
    help_text = subprocess.run(CLI + ["up", "--help"], capture_output=True, text=True, check=True).stdout
    assert "(default: 'native')" in help_text and "(default: 3000)" in help_text


@pytest.mark.parametrize("argv, has, lacks", [
    (("gateway",), {"--port", "--api-keys-file", "--max-tokens-limit"}, {"--engine", "--pool", "--coalesce-ms"}),
    (("worker", "decode"), {"--engine", "--coalesce-ms", "--pin-max-s"}, {"--port", "--pool", "--api-keys"}),
    (("worker", "parser"), {"--tool-format", "--dispatch", "--queue-url"}, {"--engine", "--port", "--pool"}),
    (("worker", "tools"), {"--pool", "--tools-config", "--tool-max-jobs"}, {"--engine", "--port", "--dispatch"}),
])
def test_a_command_offers_only_its_processes_flags(argv, has, lacks) -> None:
    flags = _flags(*argv)
    assert has <= flags and not (lacks & flags)


def test_version() -> None:
    out = subprocess.run(CLI + ["--version"], capture_output=True, text=True, check=True).stdout
    assert out.strip() == f"turnstream {__version__}"


def test_flags_parse_into_the_config_with_validation() -> None:
    args = _parser().parse_args(["worker", "decode", "--engine", "replay", "--coalesce-tokens", "8"])
    assert (args.kind, args.engine, args.coalesce_tokens) == ("decode", "replay", "8")
    with pytest.raises(ConfigError, match="engine: invalid value 'gpu'"):
        load_config(engine="gpu")
    assert load_config(api_keys="a, b,").api_keys == ("a", "b")
    assert {f.name for f in Config.keys_for("tools")} >= {"pool", "redis_url", "log_format"}
    assert all(set(f.metadata["kinds"]) <= set(KINDS) for f in fields(Config))


def test_unknown_variables_are_reported_with_a_suggestion() -> None:
    env = {"TURNSTREAM_REDIS_URL": "redis://x", "TURNSTREAM_ROUTE_MAX_WAITING": "3", "TURNSTREAM_NOPE": "1",
           "PATH": "/bin"}
    assert unknown_env(env) == ["TURNSTREAM_NOPE", "TURNSTREAM_ROUTE_MAX_WAITING (did you mean "
                                                   "TURNSTREAM_ROUTE_MAX_IMBALANCE?)"]
    run = subprocess.run(CLI + ["status"], capture_output=True, text=True,
                         env={"PATH": "/bin", "TURNSTREAM_ROUTE_MAX_WAITING": "3"})
    assert "unknown configuration variable TURNSTREAM_ROUTE_MAX_WAITING" in run.stderr
    assert run.returncode == 2 and "--redis-url" in run.stdout  # no deployment named


def test_json_logs_carry_the_session_id() -> None:
    buf = io.StringIO()
    handler = logging.StreamHandler(buf)
    handler.setFormatter(JsonFormatter())
    log = logging.getLogger("turnstream.test.json")
    log.addHandler(handler)
    log.propagate = False
    log.setLevel(logging.INFO)
    log.warning("sid=%s turn=%d parsed: %d calls", "ab12cd", 3, 2)
    token = session_context.set("ffee00")
    log.info("no sid in this line")
    session_context.reset(token)
    access = logging.LogRecord("uvicorn.access", logging.INFO, "", 0, '%s - "%s %s HTTP/%s" %d',
                               ("127.0.0.1:5", "GET", "/v1/sessions/0123abcd/events", "1.1", 200), None)
    handler.handle(access)
    first, second, third = (json.loads(line) for line in buf.getvalue().splitlines())
    assert (first["sid"], first["turn"], first["level"], first["msg"]) == ("ab12cd", 3, "WARNING",
                                                                           "sid=ab12cd turn=3 parsed: 2 calls")
    assert second["sid"] == "ffee00"
    assert (third["sid"], third["method"], third["status"]) == ("0123abcd", "GET", 200)


def test_status_lists_live_processes_by_kind() -> None:
    now = time.time()
    beats = {"a": {"kind": "decode", "worker": "decode-h-1", "t": now - 0.5, "engine": "native", "turns": 2},
             "b": {"kind": "gateway", "worker": "gateway-x", "t": now, "port": 8000},
             "c": {"kind": "tools", "worker": "tools-h-3", "t": now, "pool": "default", "running": 1}}
    lines = render(beats, now).splitlines()
    assert [ln.split()[0] for ln in lines[1:4]] == ["gateway", "decode", "tools"]
    assert "engine=native turns=2" in lines[2] and lines[-1] == "live: 1 gateway, 1 decode, 0 parser, 1 tools"
