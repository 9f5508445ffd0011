"""Several gateway processes on one port (``turnstream.gateways``): the rule that counts them, the
processes sharing the port, one ``/metrics`` for all of them, a process restarted, a failed start, and
``turnstream up`` saying how many it started."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai
import pytest
import redis

from runtime import cpu
from runtime.config import ConfigError, load_config
from schemas import keys
from turnstream import gateways
from turnstream.embedded import free_port

REPO = Path(__file__).resolve().parents[2]
# The supervisor in a process of its own, with a start grace short enough for a test to wait out.
SUPERVISOR = ("import sys, turnstream.gateways as g; from runtime.config import load_config; "
              "g.START_GRACE_S = float(sys.argv[1]); raise SystemExit(g.serve(load_config()))")


@pytest.mark.parametrize("cores,n", [(1, 1), (2, 1), (8, 1), (15, 1), (16, 2), (24, 3), (32, 4), (128, 4)])
def test_auto_starts_one_process_per_eight_cores_up_to_four(cores: int, n: int) -> None:
    assert gateways.processes_for(cores) == n


def test_a_number_is_taken_as_given_and_auto_says_why() -> None:
    assert gateways.resolve(load_config(gateway_processes="3")) == (3, "gateway_processes")
    n, why = gateways.resolve(load_config())
    assert n == gateways.processes_for(cpu.usable_cores()) and why.startswith("auto: ")
    for bad in ("0", "-1", "two", ""):
        with pytest.raises(ConfigError, match="gateway_processes"):
            load_config(gateway_processes=bad)
    with pytest.raises(ConfigError, match="reuse_port"):
        load_config(reuse_port="yes")


def test_usable_cores_follow_a_containers_cpu_quota(tmp_path: Path) -> None:
    limit = tmp_path / "cpu.max"
    affinity = len(os.sched_getaffinity(0))
    limit.write_text("150000 100000\n")  # --cpus 1.5
    assert cpu.usable_cores(limit) == min(affinity, 2)
    limit.write_text("max 100000\n")
    assert cpu.usable_cores(limit) == affinity
    assert cpu.usable_cores(tmp_path / "absent") == affinity


def _env(redis_url: str, port: int, **more: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNSTREAM_")}
    return {**env, "TURNSTREAM_REDIS_URL": redis_url, "TURNSTREAM_PORT": str(port), "TURNSTREAM_LOG_LEVEL": "WARNING",
            "TURNSTREAM_HEARTBEAT_MS": "200", "TURNSTREAM_HEARTBEAT_TTL_MS": "800", **more}


def _supervisor(redis_url: str, port: int, n: int, grace_s: float, **popen) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", SUPERVISOR, str(grace_s)], cwd=REPO,
                            env=_env(redis_url, port, TURNSTREAM_GATEWAY_PROCESSES=str(n)), **popen)


def _gateway_beats(r: redis.Redis) -> set[str]:
    """The live gateway processes' heartbeat keys."""
    return {k.decode() for k in r.scan_iter(match=keys.heartbeat("gateway", "*"))}


def _until(cond, timeout_s: float = 30.0):
    deadline = time.monotonic() + timeout_s
    while not (value := cond()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)
    return value


def _children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def _requests_counted(url: str) -> float:
    text = httpx.get(url + "/metrics", timeout=10).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith('turnstream_requests_total{api="models"'))


def test_processes_share_the_port_and_one_scrape_counts_them_all(redis_url: str) -> None:
    port, r = free_port(), redis.Redis.from_url(redis_url)
    sup = _supervisor(redis_url, port, 2, grace_s=1.0)
    url = f"http://127.0.0.1:{port}"
    try:
        _until(lambda: len(_gateway_beats(r)) == 2)
        first = _children(sup.pid)
        assert len(first) == 2
        for _ in range(20):  # a new connection each: the kernel spreads them over the two sockets
            assert httpx.get(url + "/v1/models", timeout=10).status_code == 200
        for _ in range(6):  # whichever process a scrape reaches reports both
            assert _requests_counted(url) == 20

        os.kill(first[0], signal.SIGKILL)  # past its start grace: the supervisor starts another
        _until(lambda: len(c := _children(sup.pid)) == 2 and first[0] not in c)
        _until(lambda: len(_gateway_beats(r)) >= 2)
        assert httpx.get(url + "/v1/models", timeout=10).status_code == 200
        _until(lambda: _requests_counted(url) == 21)  # the killed process's requests still count
        serving = _children(sup.pid)
    finally:
        sup.send_signal(signal.SIGTERM)
        rc = sup.wait(30)
    assert rc == 0
    for pid in serving:  # stopped with it, and reaped
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()


def test_a_port_held_by_another_program_fails_the_start_and_leaves_nothing(redis_url: str) -> None:
    port = free_port()
    holder = socket.socket()
    holder.bind(("127.0.0.1", port))  # no SO_REUSEPORT: nobody may share it
    holder.listen()
    try:
        sup = _supervisor(redis_url, port, 2, grace_s=30.0, stderr=subprocess.PIPE, text=True)
        rc = sup.wait(60)
        err = sup.stderr.read()
    finally:
        holder.close()
    assert rc != 0
    assert "within 30 s of its start; stopping" in err and "Address already in use" in err
    assert not _children(sup.pid)


def test_up_starts_the_processes_it_says(tmp_path: Path) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNSTREAM_")}
    log = (tmp_path / "up.log").open("w+")
    up = subprocess.Popen([sys.executable, "-m", "turnstream.cli", "up", "--gateway-processes", "2", "--port",
                           str(port), "--log-level", "WARNING"],
                          env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    try:
        _until(lambda: up.poll() is not None or "turnstream: up." in Path(log.name).read_text(), 120)
        assert up.poll() is None, Path(log.name).read_text()
        ready = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=10).json()
        assert ready["live"]["gateway"] == 2
        for _ in range(3):  # a client each: a connection each
            client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0)
            reply = client.chat.completions.create(model="tiny-agent", max_tokens=8,
                                                   messages=[{"role": "user", "content": "Hello! How are you?"}])
            assert reply.choices[0].message.content
            client.close()
    finally:
        up.send_signal(signal.SIGINT)
        up.wait(60)
    text = Path(log.name).read_text()
    assert f"turnstream: 2 gateway processes on port {port} (gateway_processes; --gateway-processes N to choose)" \
        in text


def test_a_free_port_is_never_one_just_handed_out(monkeypatch) -> None:
    """``turnstream up`` picks the embedded server's port after its caller picked the gateway's: the
    kernel may offer the same released port twice in a row (seen: both on one port, the gateway's bind
    refused)."""
    from turnstream import embedded

    offered = iter([41000, 41000, 41001])

    class Socket:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return None

        def bind(self, addr):
            self.port = next(offered)

        def getsockname(self):
            return ("127.0.0.1", self.port)

    monkeypatch.setattr(embedded.socket, "socket", Socket)
    assert embedded.free_port() == 41000
    assert embedded.free_port(avoid={41000}) == 41001
