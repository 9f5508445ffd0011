"""Starting and stopping turnstream's own processes: the configuration passed as ``TURNSTREAM_*``
variables, each child dying with its parent; shared by ``turnstream up`` (``turnstream.stack``) and the
gateway's supervisor (``turnstream.gateways``)."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
from typing import Any

from runtime.config import Config
from turnstream.embedded import _die_with_parent


def child_env(cfg: Config) -> dict[str, str]:
    """The configuration, passed to children as ``TURNSTREAM_*`` variables."""
    env = dict(os.environ)
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        env[f"TURNSTREAM_{f.name.upper()}"] = ",".join(value) if isinstance(value, tuple) else str(value)
    return env


def spawn(args: list[str], cfg: Config, env: dict[str, str] | None = None, **popen: Any) -> subprocess.Popen:
    """``turnstream ARGS`` configured by ``cfg`` (``env``: ``child_env(cfg)`` with additions of its own)."""
    return subprocess.Popen([sys.executable, "-m", "turnstream.cli", *args], env=env or child_env(cfg),
                            preexec_fn=_die_with_parent, **popen)


def stop_all(procs: list[subprocess.Popen], grace_s: float = 10.0) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for p in procs:
        try:
            p.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
