"""The gateway served from the decoder's process (``gateway_in_decoder``; ``turnstream.colocated``): when
``turnstream up`` chooses it, that it serves every API through the same Redis protocol, and that it stops
whole."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import anthropic
import httpx
import openai
import pytest
import redis

from bench.servers import process_label
from runtime.config import ConfigError, load_config
from turnstream.colocated import serve_with_gateway
from turnstream.embedded import free_port
from schemas import keys
from turnstream.stack import StackError, colocate

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("mode, engine, kinds, gateways, cores, fused, why", [
    ("auto", "vllm", ["decode", "parser", "tools"], 1, 2, True,
     "auto: vLLM's engine, one decoder, one gateway process, 2 usable CPU cores"),
    ("auto", "vllm", ["decode", "parser", "tools"], 1, 8, False, "auto: 8 usable CPU cores, a core each"),
    ("auto", "vllm", ["decode", "parser", "tools"], 2, 2, False, "auto: 1 decoders, 2 gateway processes"),
    ("auto", "vllm", ["decode", "decode", "parser"], 1, 2, False, "auto: 2 decoders, 1 gateway processes"),
    ("auto", "vllm", ["parser", "tools"], 1, 2, False, "auto: 0 decoders, 1 gateway processes"),
    ("auto", "native", ["decode", "parser", "tools"], 1, 2, False,
     "auto: the native engine runs its model in the decoder's process"),
    ("off", "vllm", ["decode", "parser", "tools"], 1, 2, False, "gateway_in_decoder off"),
    ("on", "native", ["decode", "parser", "tools"], 1, 64, True, "gateway_in_decoder on"),
])
def test_up_colocates_vllms_one_decoder_with_one_gateway_process_where_cores_are_scarce(
        mode, engine, kinds, gateways, cores, fused, why) -> None:
    cfg = load_config(settle=False, gateway_in_decoder=mode, engine=engine)
    assert colocate(cfg, kinds, gateways, cores) == (fused, why)


@pytest.mark.parametrize("kinds, gateways", [(["decode", "parser"], 2), (["decode", "decode"], 1), (["parser"], 1)])
def test_on_is_refused_where_it_cannot_be(kinds, gateways) -> None:
    with pytest.raises(StackError, match="needs one gateway process and one decoder"):
        colocate(load_config(settle=False, gateway_in_decoder="on"), kinds, gateways, 2)


def test_the_setting_is_validated() -> None:
    with pytest.raises(ConfigError, match="gateway_in_decoder"):
        load_config(settle=False, gateway_in_decoder="yes")


def _children(pid: int) -> dict[int, str]:
    """``pid``'s turnstream children: what each runs (``worker decode``, ``gateway``...; the embedded server
    left out)."""
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    labels = {child: process_label(child) for child in map(int, out)}
    return {child: label for child, label in labels.items() if label == "gateway" or label.startswith("worker ")}


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"  # exited, not yet reaped
    except OSError:
        return True


def _up(tmp_path: Path, port: int, *flags: str) -> tuple[subprocess.Popen, Path]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNSTREAM_")}
    log = tmp_path / "up.log"
    up = subprocess.Popen([sys.executable, "-m", "turnstream.cli", "up", "--port", str(port), "--gateway-processes",
                           "1", "--log-level", "WARNING", *flags], env=env, cwd=REPO, stdout=log.open("w"),
                          stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while up.poll() is None and "turnstream: up." not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert up.poll() is None and "turnstream: up." in log.read_text(), log.read_text()
    return up, log


def test_up_serves_every_api_from_the_decoders_process_and_stops_whole(tmp_path: Path, redis_url: str) -> None:
    port = free_port()
    up, log = _up(tmp_path, port, "--gateway-in-decoder", "on", "--redis-url", redis_url)  # native (auto: apart), told
    kids: dict[int, str] = {}
    try:
        kids = _children(up.pid)
        assert sorted(kids.values()) == ["worker decode", "worker parser", "worker tools"], kids
        assert (f"turnstream: the gateway on port {port} runs in the decoder's process (gateway_in_decoder on; "
                "--gateway-in-decoder off for a process of its own)") in log.read_text()
        ready = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=10).json()
        assert ready["live"]["gateway"] == 1 and ready["live"]["decode"] == 1

        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0)
        stream = client.chat.completions.create(model="tiny-agent", max_tokens=16, stream=True,
                                                stream_options={"include_usage": True},
                                                messages=[{"role": "user", "content": "Hello! How are you?"}])
        chunks = list(stream)
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text and chunks[-1].usage.completion_tokens >= 1
        tools = [{"type": "function", "function": {"name": "get_weather", "description": "weather in a city",
                                                   "parameters": {"type": "object", "properties": {
                                                       "city": {"type": "string"}}, "required": ["city"]}}}]
        called = client.chat.completions.create(model="tiny-agent", max_tokens=64, tools=tools, tool_choice="required",
                                                messages=[{"role": "user", "content": "Weather in Paris?"}])
        call = called.choices[0].message.tool_calls[0]  # the parser worker's stage, through Redis as ever
        assert call.function.name == "get_weather" and called.choices[0].finish_reason == "tool_calls"
        response = client.responses.create(model="tiny-agent", input="Hello!", max_output_tokens=16)
        assert response.status == "completed" and response.output_text
        client.close()
        message = anthropic.Anthropic(base_url=f"http://127.0.0.1:{port}", api_key="unused", max_retries=0).messages.create(
            model="tiny-agent", max_tokens=16, messages=[{"role": "user", "content": "Hello!"}])
        assert message.content[0].text
        assert redis.Redis.from_url(redis_url).keys(keys.DECODER_HEARTBEAT_PATTERN)
    finally:
        began = time.monotonic()
        up.send_signal(signal.SIGTERM)
        rc = up.wait(60)
    assert rc == 0, log.read_text()
    assert time.monotonic() - began < 9, log.read_text()  # each stopped of itself: none waited for up's SIGKILL
    assert kids and all(_gone(pid) for pid in kids), log.read_text()
    r = redis.Redis.from_url(redis_url)
    assert not r.keys(keys.HEARTBEAT_PATTERN) and not r.hlen(keys.DECODE_LOAD)  # each said it left
    assert "Traceback" not in log.read_text(), log.read_text()


def test_up_runs_the_gateway_apart_on_the_native_engine(tmp_path: Path) -> None:
    port = free_port()
    up, log = _up(tmp_path, port)
    try:
        assert sorted(_children(up.pid).values()) == ["gateway", "worker decode", "worker parser", "worker tools"]
        assert f"turnstream: 1 gateway process on port {port} (gateway_processes" in log.read_text()
    finally:
        up.send_signal(signal.SIGTERM)
        assert up.wait(60) == 0


def test_up_refuses_on_with_several_gateway_processes() -> None:
    out = subprocess.run([sys.executable, "-m", "turnstream.cli", "up", "--gateway-in-decoder", "on",
                          "--gateway-processes", "2", "--port", str(free_port())],
                         cwd=REPO, capture_output=True, text=True, timeout=60,
                         env={k: v for k, v in os.environ.items() if not k.startswith("TURNSTREAM_")})
    assert out.returncode == 2
    assert ("turnstream: configuration error: gateway_in_decoder on needs one gateway process and one decoder "
            "(here 2 and 1)") in out.stderr
    assert "starting redis" not in out.stdout  # refused before anything started


@pytest.mark.parametrize("flags, here", [(["--gateway-processes", "2"], "(here 2 and 1)"),
                                         (["--gateway-processes", "1", "--workers", "decode,decode,parser"],
                                          "(here 1 and 2)")])
def test_up_refuses_on_before_it_resolves_the_model(monkeypatch, capsys, flags, here) -> None:
    """A hub model's weights are not fetched for a stack that cannot start."""
    from runtime import model_source
    from turnstream import cli

    for var in [v for v in os.environ if v.startswith("TURNSTREAM_")]:
        monkeypatch.delenv(var)

    def resolve(cfg, weights):
        raise AssertionError(f"{cfg.model} resolved (weights={weights}) before the stack was refused")

    monkeypatch.setattr(model_source, "resolve", resolve)
    assert cli.main(["up", "--gateway-in-decoder", "on", "--model", "org/some-model", *flags]) == 2
    assert ("turnstream: configuration error: gateway_in_decoder on needs one gateway process and one decoder "
            f"{here}") in capsys.readouterr().err


async def test_a_worker_that_ends_stops_the_gateway_and_its_error_is_raised(redis_url: str) -> None:
    cfg = load_config(settle=False, redis_url=redis_url, port=free_port(), gateway_in_decoder="on")
    served = asyncio.Event()

    async def failing_worker(stop: asyncio.Event) -> None:
        for _ in range(200):  # until the gateway answers
            try:
                async with httpx.AsyncClient() as client:
                    if (await client.get(f"http://127.0.0.1:{cfg.port}/healthz")).status_code == 200:
                        served.set()
                        break
            except httpx.HTTPError:
                await asyncio.sleep(0.05)
        raise RuntimeError("engine failed to start")

    with pytest.raises(RuntimeError, match="engine failed to start"):
        await asyncio.wait_for(serve_with_gateway(cfg, failing_worker), 30)
    assert served.is_set()
    with pytest.raises(httpx.HTTPError):  # the gateway is gone with it
        httpx.get(f"http://127.0.0.1:{cfg.port}/healthz", timeout=2)


def test_processes_started_beside_a_gateway_process_never_serve_one(monkeypatch) -> None:
    """``start_processes`` (the benches' stacks, ``up`` apart): a decoder started beside a ``gateway`` entry
    serves none, whatever ``gateway_in_decoder`` says (every decoder would bind the gateway's port)."""
    from turnstream import stack

    started: list[tuple[str, str]] = []
    monkeypatch.setattr(stack, "spawn_kind", lambda kind, cfg: started.append((kind, cfg.gateway_in_decoder)))
    monkeypatch.setattr(stack, "wait_ready", lambda *a, **kw: None)
    cfg = load_config(settle=False, gateway_in_decoder="on")
    stack.start_processes(cfg, ["decode", "decode", "gateway"])
    assert started == [("decode", "off"), ("decode", "off"), ("gateway", "off")]
    started.clear()
    stack.start_processes(cfg, ["decode", "parser"])  # up's own choice, made before (``run_stack``)
    assert started == [("decode", "on"), ("parser", "on")]
