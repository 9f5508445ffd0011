"""Shared fixtures: a real embedded Redis-compatible server, and the whole stack as processes."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis

from runtime.config import Config, load_config
from turnstream.embedded import EmbeddedRedis, free_port
from turnstream.processes import stop_all
from turnstream.stack import spawn_kind, start_processes

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def redis_server() -> Iterator[EmbeddedRedis]:
    with EmbeddedRedis() as server:
        yield server


@pytest.fixture
def redis_url(redis_server: EmbeddedRedis) -> str:
    """A clean database on the shared embedded server."""
    redis.Redis.from_url(redis_server.url).flushall()
    return redis_server.url


@pytest.fixture
async def r(redis_url: str):
    """An asyncio client (bytes replies) on the clean test database."""
    from runtime import bus

    client = bus.connect(redis_url)
    yield client
    await client.aclose()


@dataclass
class Stack:
    cfg: Config
    url: str
    procs: dict[str, list[subprocess.Popen]] = field(default_factory=dict)

    def start(self, kind: str, n: int = 1) -> list[subprocess.Popen]:
        new = [spawn_kind(kind, self.cfg) for _ in range(n)]
        self.procs.setdefault(kind, []).extend(new)
        return new

    def kill(self, proc: subprocess.Popen) -> None:
        proc.send_signal(signal.SIGKILL)
        proc.wait()

    def all(self) -> list[subprocess.Popen]:
        return [p for ps in self.procs.values() for p in ps]

    def stop(self) -> None:
        stop_all(self.all())


def make_stack(redis_url: str, parsers: int = 1, **overrides: object) -> Stack:
    """The whole pipeline as processes; the ReplayEngine unless ``engine=`` says otherwise."""
    overrides.setdefault("engine", "replay")
    overrides.setdefault("gateway_processes", "1")  # whatever the machine's cores: tests read one process's state
    cfg = load_config(redis_url=redis_url, port=free_port(), reclaim_idle_ms=1000, heartbeat_ms=300,
                      heartbeat_ttl_ms=1200, sweep_after_s=1.0, log_level="INFO", **overrides)
    stack = Stack(cfg, f"http://{cfg.host}:{cfg.port}")
    for kind, proc in start_processes(cfg, ["decode", *["parser"] * parsers, "tools", "gateway"]):
        stack.procs.setdefault(kind, []).append(proc)
    return stack


@pytest.fixture
def stack_factory(redis_url: str) -> Iterator:
    made: list[Stack] = []

    def factory(**kw: object) -> Stack:
        s = make_stack(redis_url, **kw)
        made.append(s)
        return s

    yield factory
    for s in made:
        s.stop()
