"""What a user installs: a plain ``pip install .`` runs the gateway, the parser and the tool workers
without torch (a decoder with the ReplayEngine too); the engine and the benchmarks are extras.  A wheel
carries the bundled model, so ``pip install '.[engine]'`` (not editable) serves it with no checkout."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parent.parent


def _fresh_venv(tmp_path_factory, requirement: str) -> Path:
    """A fresh virtual environment with ``pip install <requirement>`` (a wheel built from the checkout)."""
    venv = tmp_path_factory.mktemp("venv") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = subprocess.run([str(venv / "bin/pip"), "install", "-q", requirement], capture_output=True, text=True)
    if pip.returncode != 0 and "No matching distribution" in pip.stderr + pip.stdout:
        pytest.skip(f"no package index reachable for a plain install: {pip.stderr[-300:]}")
    assert pip.returncode == 0, pip.stderr[-2000:]
    return venv


@pytest.fixture(scope="module")
def plain_venv(tmp_path_factory) -> Path:
    """``pip install .`` and nothing else."""
    return _fresh_venv(tmp_path_factory, str(REPO))


@pytest.fixture(scope="module")
def engine_venv(tmp_path_factory) -> Path:
    """``pip install '.[engine]'``: the native engine too."""
    return _fresh_venv(tmp_path_factory, f"{REPO}[engine]")


def test_a_plain_install_serves_without_torch(plain_venv: Path, tmp_path: Path) -> None:
    py = str(plain_venv / "bin/python")
    no_torch = subprocess.run([py, "-c", "import torch"], capture_output=True, text=True)
    assert no_torch.returncode != 0 and "No module named 'torch'" in no_torch.stderr
    bench = subprocess.run([py, "-m", "turnstream.cli", "bench", "engine"], capture_output=True, text=True,
                           cwd=tmp_path)
    assert bench.returncode != 0 and "pip install 'turnstream[bench]'" in bench.stderr
    with _up(py, tmp_path, TURNSTREAM_ENGINE="replay") as url:
        body = {"messages": [{"role": "user", "content": "What is 6*7?"}],
                "replay": ['<tool_call>\n{"name": "calculator", "arguments": {"expression": "6*7"}}\n</tool_call>',
                           "It is {{ results[0] }}."]}
        sid = httpx.post(f"{url}/v1/sessions", json=body).json()["id"]
        deadline = time.monotonic() + 60
        while (state := httpx.get(f"{url}/v1/sessions/{sid}").json())["status"] == "active":
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert state["messages"][-1]["content"] == "It is 42."  # gateway, decoder, parser, tool worker all ran


def test_a_wheel_serves_the_bundled_model_from_inside_the_package(engine_venv: Path, tmp_path: Path) -> None:
    """No checkout on the path and no ``--model``: the default model is the wheel's copy, and the native
    engine generates with it."""
    py = str(engine_venv / "bin/python")
    where = subprocess.run([py, "-c", "from runtime.config import DEFAULT_MODEL_DIR as d; print(d.resolve())"],
                           capture_output=True, text=True, cwd=tmp_path, check=True).stdout.strip()
    assert Path(where).is_relative_to(engine_venv.resolve()) and (Path(where) / "model.safetensors").is_file()
    with _up(py, tmp_path, TURNSTREAM_ENGINE="native") as url:
        reply = httpx.post(f"{url}/v1/chat/completions", timeout=120, json={
            "model": "tiny-agent", "max_tokens": 16, "messages": [{"role": "user", "content": "Hello!"}]})
    assert reply.status_code == 200, reply.text
    answer = reply.json()
    assert answer["usage"]["completion_tokens"] > 0 and answer["choices"][0]["finish_reason"] in ("stop", "length")


@contextmanager
def _up(py: str, cwd: Path, **env_vars: str) -> Iterator[str]:
    """``turnstream up`` of an installed venv, with no ``TURNSTREAM_*`` from this process (the default model);
    its URL while it serves, then a clean stop."""
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TURNSTREAM_")}
    env.update(TURNSTREAM_PORT=str(port), TURNSTREAM_LOG_LEVEL="WARNING", **env_vars)
    up = subprocess.Popen([py, "-m", "turnstream.cli", "up"], env=env, cwd=cwd, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, start_new_session=True)
    try:
        _wait_up(up)
        yield f"http://127.0.0.1:{port}"
    finally:
        up.terminate()
        out, _ = up.communicate(timeout=30)
    assert up.returncode == 0, out.decode()[-2000:]


def _wait_up(proc: subprocess.Popen) -> None:
    """Until ``turnstream up`` says it is up: every process started and ready (the gateway alone may answer
    /readyz sooner, and a stop signal before "up." is an interrupted start, exit 130)."""
    deadline, said = time.monotonic() + 120, b""
    while time.monotonic() < deadline:
        if not select.select([proc.stdout], [], [], 0.5)[0]:
            continue
        chunk = os.read(proc.stdout.fileno(), 65536)  # raw reads: nothing waits in a Python buffer unseen
        assert chunk, f"turnstream up exited before it was up: {said.decode()[-2000:]}"
        said += chunk
        if b"\nturnstream: up." in b"\n" + said:
            return
    raise AssertionError("the plain install's stack did not come up")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
