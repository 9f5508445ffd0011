"""Operating a deployment: readiness, ``turnstream status``, JSON logs of a real gateway, and only tool
workers opening MCP servers (the parser and the gateway read the tool catalog instead)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
from turnstream.embedded import free_port
from turnstream.healthcheck import healthcheck
from turnstream.stack import spawn_kind

MCP_SERVER = Path(__file__).resolve().parent.parent / "tools" / "mcp_server.py"
CLI = [sys.executable, "-m", "turnstream.cli"]


def _mcp_children() -> list[tuple[int, int]]:
    """(pid, parent pid) of every running copy of the test MCP server, read from /proc (``ps`` cuts
    long command lines to the terminal's width, which CI sets)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            args = (proc / "cmdline").read_bytes().split(b"\0")
            stat = (proc / "stat").read_text()
        except OSError:  # it exited while we looked
            continue
        if str(MCP_SERVER).encode() in args:
            found.append((int(proc.name), int(stat.rsplit(")", 1)[1].split()[1])))
    return found


def test_only_tool_workers_open_mcp_servers(stack_factory, tmp_path) -> None:
    toml = tmp_path / "tools.toml"
    toml.write_text(f'[mcp.demo]\ncommand = "{sys.executable}"\nargs = ["{MCP_SERVER}"]\n'
                    'connect_timeout_s = 180\n')  # a loaded CI machine starts python + mcp slowly
    before = _mcp_children()
    stack = stack_factory(tools_config=str(toml), parsers=2)
    tools = httpx.get(stack.url + "/v1/tools").json()["data"]
    assert {"demo__add", "demo__shout"} <= {t["function"]["name"] for t in tools}  # the gateway sees them
    mine = [c for c in _mcp_children() if c not in before]
    [tool_worker] = stack.procs["tools"]
    assert [ppid for _, ppid in mine] == [tool_worker.pid]  # one server, under the one tool worker


def test_readiness_status_and_a_dead_decoder(stack_factory) -> None:
    stack = stack_factory()
    assert {"/healthz", "/readyz"} <= set(httpx.get(stack.url + "/openapi.json").json()["paths"])
    ready = httpx.get(stack.url + "/readyz")
    assert ready.status_code == 200 and ready.json()["live"] == {"gateway": 1, "decode": 1, "parser": 1, "tools": 1}
    run = subprocess.run(CLI + ["status", "--redis-url", stack.cfg.redis_url], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[-1] == "live: 1 gateway, 1 decode, 1 parser, 1 tools"
    for kind in ("decode", "parser", "tools", "gateway"):  # Docker's HEALTHCHECK of each container
        [proc] = stack.procs[kind]
        assert healthcheck(stack.cfg, pid=proc.pid) == 0, kind
    [decoder] = stack.procs["decode"]
    stack.kill(decoder)
    _until(lambda: httpx.get(stack.url + "/readyz").status_code != 200)  # until its heartbeat lapses
    unready = httpx.get(stack.url + "/readyz")
    assert unready.status_code == 503 and unready.json()["error"]["code"] == "not_ready"
    assert httpx.get(stack.url + "/healthz").status_code == 200  # the process itself is fine
    [parser] = stack.procs["parser"]
    parser.send_signal(signal.SIGSTOP)  # hung: the process is there, its heartbeat lapses
    try:
        _until(lambda: healthcheck(stack.cfg, pid=parser.pid) == 1)
    finally:
        parser.send_signal(signal.SIGCONT)
    _until(lambda: healthcheck(stack.cfg, pid=parser.pid) == 0)
    run = subprocess.run(CLI + ["status", "--redis-url", stack.cfg.redis_url], capture_output=True, text=True)
    assert run.returncode == 1 and "0 decode" in run.stdout


def _until(cond, timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline
        time.sleep(0.1)


def test_a_gateway_logs_json_lines_with_the_session_id(stack_factory) -> None:
    stack = stack_factory()
    cfg = stack.cfg.replace(port=free_port(), log_format="json")
    gw = spawn_kind("gateway", cfg, stderr=subprocess.PIPE)
    try:
        url = f"http://{cfg.host}:{cfg.port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(url + "/healthz").status_code == 200:
                    break
            except httpx.HTTPError:
                assert time.monotonic() < deadline
                time.sleep(0.1)
        sid = httpx.post(url + "/v1/sessions", json={"messages": [{"role": "user", "content": "hi"}],
                                                     "replay": ["Hello."]}).json()["id"]
        httpx.get(url + f"/v1/sessions/{sid}")
    finally:
        gw.terminate()
        _, err = gw.communicate(timeout=20)
    lines = [json.loads(ln) for ln in err.decode().splitlines() if ln.strip()]  # every line is one JSON object
    assert any(ln.get("sid") == sid and ln["logger"] != "uvicorn.access" for ln in lines)  # "sid=... queued"
    access = [ln for ln in lines if ln["logger"] == "uvicorn.access" and ln.get("sid") == sid]
    assert ("GET", 200) in {(a["method"], a["status"]) for a in access}  # GET /v1/sessions/{sid}
