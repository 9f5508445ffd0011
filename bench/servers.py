"""The servers ``bench serve`` compares: each an OpenAI-compatible HTTP server run as one process tree.

    vllm-server        vLLM's own server (``python -m vllm.entrypoints.openai.api_server``, .venv-vllm)
    turnstream-vllm    ``turnstream up --engine vllm`` on the same engine arguments (.venv-vllm)
    turnstream-native  ``turnstream up`` on the native engine (this interpreter)

Every server serves the same local model under the same name, offline.  A server is ready when
a completion through it succeeds (the engine is loaded and, for turnstream, a decoder is live).
``cpu_seconds`` counts the whole tree: vLLM's engine-core process, or turnstream's embedded
server, decoder, parser, tool worker and gateway.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bench.common import process_tree, process_tree_cpu, tree_cpu_seconds, vllm_env
from turnstream.embedded import _die_with_parent, free_port

KINDS = ("vllm-server", "turnstream-vllm", "turnstream-native")


@dataclass
class Server:
    """One server under test: how to start it, and its process once started."""

    name: str
    argv: list[str]
    env: dict[str, str]
    port: int = 0  # chosen as it starts: a port chosen earlier may be taken meanwhile (vLLM's processes bind
    # ephemeral ports while the servers before it start)
    proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, log: Path) -> None:
        self.port = self.port or free_port()
        argv = [a.replace("{port}", str(self.port)) for a in self.argv]
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(argv, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                         preexec_fn=_die_with_parent)

    def wait_ready(self, model: str, timeout_s: float) -> None:
        """Until one short completion succeeds; raises if the process exits or time runs out."""
        deadline = time.monotonic() + timeout_s
        body = {"model": model, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 4,
                "temperature": 0}
        while time.monotonic() < deadline:
            if self.proc is None or self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited during start-up")
            try:
                if httpx.post(self.url + "/v1/chat/completions", json=body, timeout=30).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(1.0)
        raise RuntimeError(f"{self.name} not ready after {timeout_s:.0f} s")

    def cpu_seconds(self) -> float:
        return tree_cpu_seconds(self.proc.pid) if self.proc else 0.0

    def cpu_by_process(self) -> dict[str, float]:
        """CPU seconds of each process of the tree, by what it is (``worker decode``, ``EngineCore``...)."""
        out: dict[str, float] = {}
        for pid, seconds in (process_tree_cpu(self.proc.pid) if self.proc else {}).items():
            label = process_label(pid)
            out[label] = out.get(label, 0.0) + seconds
        return out

    def pids(self) -> dict[str, list[int]]:
        """The tree's working processes by label (``process_label``): a process whose child has its label
        (a supervisor of several gateway processes) is left out."""
        tree = process_tree(self.proc.pid) if self.proc else {}
        labels = {pid: process_label(pid) for pid in tree}
        supervisors = {ppid for pid, (ppid, _) in tree.items() if labels.get(ppid) == labels[pid]}
        out: dict[str, list[int]] = {}
        for pid in sorted(tree):
            if pid not in supervisors:
                out.setdefault(labels[pid], []).append(pid)
        return out

    def stop(self) -> None:
        """SIGTERM (each server stops its own children), then the process group if it lingers."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)  # its own group (setpgrp in _die_with_parent)
            self.proc.wait()


def process_label(pid: int) -> str:
    """``turnstream worker decode`` -> "worker decode", vLLM's API server -> "vllm api server", else the name."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "exited"
    if argv == [""]:  # a zombie (exited, not yet reaped) keeps its comm but no command line
        return "exited"
    if "turnstream.cli" in argv:
        args = argv[argv.index("turnstream.cli") + 1:]
        return " ".join(args[:2] if args[:1] == ["worker"] else args[:1])
    if "vllm.entrypoints.openai.api_server" in argv:
        return "vllm api server"
    return comm


def vllm_cli_flags(engine_args: dict[str, Any]) -> list[str]:
    """``{"enforce_eager": true, "max_model_len": 2048}`` -> ``--enforce-eager --max-model-len 2048``."""
    flags = []
    for key, value in engine_args.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            flags.append(flag)
        elif value is not False:
            flags += [flag, str(value)]
    return flags


def make_server(kind: str, model: str, served: str, engine_args: dict[str, Any], vllm_python: Path | None,
                tmp: Path, ready_timeout_s: float) -> Server:
    """The server of ``kind`` (see ``KINDS``); ``{port}`` in its argv is filled in at start."""
    import json

    common = ["--model", model, "--served-model-name", served, "--port", "{port}"]
    if kind == "vllm-server":
        argv = [str(vllm_python), "-m", "vllm.entrypoints.openai.api_server", "--host", "127.0.0.1", *common,
                "--enable-prefix-caching", "--disable-uvicorn-access-log", *vllm_cli_flags(engine_args)]
        return Server(kind, argv, vllm_env(tmp))
    python = str(vllm_python) if kind == "turnstream-vllm" else sys.executable
    engine = ["--engine", "vllm", "--vllm-args", json.dumps(engine_args)] if kind == "turnstream-vllm" else []
    argv = [python, "-m", "turnstream.cli", "up", *common, *engine, "--log-level", "WARNING",
            "--ready-timeout", str(ready_timeout_s)]
    env = vllm_env(tmp) if kind == "turnstream-vllm" else dict(os.environ)
    return Server(kind, argv, env)
