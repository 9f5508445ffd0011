"""Helpers for the gateway tests: a stack on its own database, event assertions, WS/SSE readers."""

from __future__ import annotations

import asyncio
import itertools
import json
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import redis
import websockets

from schemas import keys
from schemas.codec import encode
from schemas.events import ContentDelta, Event, SessionEnded
from runtime.config import Config, load_config
from turnstream.embedded import free_port
from turnstream.processes import stop_all
from turnstream.stack import spawn_kind, wait_ready

ALL_KINDS = ("decode", "parser", "tools", "gateway")
MODEL = "tiny"
_DBS = itertools.count()

# turn 0: text, then a call of a server tool; turn 1: an answer quoting the result
WEATHER = ["Let me check the weather in Paris for you.\n"
           "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
           "The forecast says: {{ results[0] }}. Enjoy Paris!"]


@dataclass
class GwStack:
    """Processes of one test stack (all on Redis database ``cfg.redis_url``)."""

    cfg: Config
    url: str
    procs: list = field(default_factory=list)
    log_path: Path | None = None  # the gateway's stdout and stderr

    def gateway_log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path else ""

    def tracebacks(self) -> int:
        """How many tracebacks the gateway has logged so far."""
        return self.gateway_log().count("Traceback (most recent call last)")

    @property
    def ws(self) -> str:
        return self.url.replace("http", "ws", 1)

    def redis(self) -> redis.Redis:
        return redis.Redis.from_url(self.cfg.redis_url)

    def stop(self) -> None:
        stop_all(self.procs)
        if self.log_path is not None:
            sys.stderr.write(self.gateway_log())  # shown with a failing test's captured output
            shutil.rmtree(self.log_path.parent, ignore_errors=True)
            self.log_path = None


def start_stack(server_url: str, kinds: tuple[str, ...] = ALL_KINDS, **overrides: Any) -> GwStack:
    """Start ``kinds`` on a fresh database of the shared embedded server."""
    db = next(_DBS) % 15 + 1
    url = server_url.rsplit("/", 1)[0] + f"/{db}"
    redis.Redis.from_url(url).flushdb()
    settings = dict(redis_url=url, port=free_port(), gateway_processes="1", reclaim_idle_ms=1000, heartbeat_ms=300, heartbeat_ttl_ms=1200,
                    sweep_after_s=1.0, log_level="WARNING", engine="replay", replay_rate=400, served_model_name=MODEL)
    settings.update(overrides)
    cfg = load_config(**settings)
    stack = GwStack(cfg, f"http://{cfg.host}:{cfg.port}")
    stack.log_path = Path(tempfile.mkdtemp(prefix="turnstream-gw-")) / "gateway.log"
    with stack.log_path.open("wb") as log:
        procs = [(k, spawn_kind(k, cfg)) for k in kinds if k != "gateway"]
        procs.append(("gateway", spawn_kind("gateway", cfg, stdout=log, stderr=log)))
    stack.procs = [p for _, p in procs]
    try:
        wait_ready(stack.url, procs)
    except BaseException:
        stack.stop()
        raise
    return stack


def event_bytes(sid: str, turn: int, seq: int, body: Any) -> bytes:
    return encode(Event(sid=sid, turn=turn, attempt=1, seq=seq, src="test", body=body))


def publish_script(r: redis.Redis, sid: str, n: int, key_of) -> list[str]:
    """XADD ``n`` content deltas and a session.ended to ``sid``'s event stream; returns the ids."""
    pipe = r.pipeline(transaction=False)
    for i in range(n):
        pipe.xadd(key_of(sid), {b"d": event_bytes(sid, 0, i + 1, ContentDelta(text=f"t{i} "))})
    pipe.xadd(key_of(sid), {b"d": event_bytes(sid, 0, n + 1, SessionEnded(reason="stop"))})
    return [i.decode() for i in pipe.execute()]


def kinds(events: list[dict[str, Any]]) -> list[str]:
    return [e["body"]["type"] for e in events]


def id_key(event_id: str) -> tuple[int, int]:
    a, b = event_id.split("-")
    return int(a), int(b)


def assert_exactly_once_in_order(events: list[dict[str, Any]]) -> None:
    ids = [id_key(e["id"]) for e in events]
    assert ids == sorted(ids), "events out of order"
    assert len(set(ids)) == len(ids), "an event id was delivered twice"
    marks = [(e["turn"], e["attempt"], e["src"], e["seq"]) for e in events]
    assert len(set(marks)) == len(marks), "duplicate event"


async def create_session(url: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> str:
    async with httpx.AsyncClient(base_url=url, timeout=10, headers=headers) as http:
        resp = await http.post("/v1/sessions", json=body)
    assert resp.status_code == 201, resp.text
    return resp.json()["id"]


def assert_sound(gw: GwStack, headers: dict[str, str], baseline_tracebacks: int = 0) -> None:
    """The gateway logged no traceback since ``baseline_tracebacks``, still serves a normal request,
    and every session in the store is readable (by the key in ``headers``)."""
    assert gw.tracebacks() == baseline_tracebacks, gw.gateway_log()[-5000:]
    with httpx.Client(base_url=gw.url, timeout=30, headers=headers) as http:
        assert http.get("/healthz").status_code == 200
        chat = http.post("/v1/chat/completions", json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}],
                                                       "replay": ["fine"]})
        assert chat.status_code == 200 and chat.json()["choices"][0]["message"]["content"] == "fine", chat.text
        r = gw.redis()
        for key in r.scan_iter(match=keys.session("*"), count=1000):
            sid = key.decode()[len(keys.session("")) - 1:-1]
            read = http.get(f"/v1/sessions/{sid}")
            assert read.status_code == 200, (sid, read.text)


async def wait_for_subscribers(url: str, n: int, timeout_s: float = 10.0) -> None:
    """Until the gateway relays ``n`` subscriptions (its ``/metrics``), or fail after ``timeout_s``."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        while True:
            text = (await http.get("/metrics")).text
            if f"turnstream_relay_subscribers {float(n)}" in text:
                return
            assert asyncio.get_running_loop().time() < deadline, f"never {n} subscribers"
            await asyncio.sleep(0.02)


async def read_ws(ws_url: str, limit: int | None = None, **kw: Any) -> list[dict[str, Any]]:
    """Events of one WebSocket connection until the server closes it (or ``limit`` events)."""
    out: list[dict[str, Any]] = []
    async with websockets.connect(ws_url, **kw) as ws:
        async for frame in ws:
            msg = json.loads(frame)
            if "body" in msg:
                out.append(msg)
            if limit is not None and len(out) >= limit:
                break
    return out


async def read_sse(url: str, path: str, headers: dict[str, str] | None = None,
                   limit: int | None = None) -> list[dict[str, Any]]:
    """Events of one SSE response until it ends (or ``limit`` events)."""
    out: list[dict[str, Any]] = []
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        async with http.stream("GET", path, headers=headers) as resp:
            assert resp.status_code == 200, await resp.aread()
            async for line in resp.aiter_lines():
                if line.startswith("data: "):
                    out.append(json.loads(line[6:]))
                    if limit is not None and len(out) >= limit:
                        break
    return out


def assert_cancelled_mid_turn(r: redis.Redis, sid: str, full: str) -> None:
    """The oneshot session ``sid`` was cancelled and its decoder stopped before writing all of ``full``."""
    deadline = time.monotonic() + 60  # a bound for a loaded machine: the turn's end is the condition
    while time.monotonic() < deadline and r.hget(keys.session(sid), "asst:0") is None:
        time.sleep(0.05)
    status = r.hget(keys.session(sid), "status")
    assert status == b"cancelled", f"session {sid} is {status!r}, not cancelled"
    raw = json.loads(r.hget(keys.session(sid), "asst:0"))["raw"]
    assert 0 < len(raw) < len(full)  # the decoder stopped generating
