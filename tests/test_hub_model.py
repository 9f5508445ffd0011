"""``HF_HUB_OFFLINE=1 turnstream up --model ORG/NAME`` serves a checkpoint from the hub cache, as a user
runs it: the bundled model copied into a cache laid out as the hub lays it out (tests/hub_cache.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import openai

from tests.hub_cache import add_snapshot
from turnstream.embedded import free_port

REPO = Path(__file__).resolve().parents[1]


def test_up_serves_a_hub_id_from_the_cache_offline(tmp_path: Path) -> None:
    add_snapshot(tmp_path / "hf", "acme/tiny-agent")
    port = free_port()
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("TURNSTREAM_")},
           "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"}
    log = (tmp_path / "up.log").open("w+")
    up = subprocess.Popen([sys.executable, "-m", "turnstream.cli", "up", "--model", "acme/tiny-agent",
                           "--port", str(port), "--data-dir", str(tmp_path / "data")],
                          env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    try:
        _wait_up(up, log, timeout_s=180)
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused")
        assert [m.id for m in client.models.list().data] == ["acme/tiny-agent"]
        reply = client.chat.completions.create(model="acme/tiny-agent", max_tokens=16,
                                               messages=[{"role": "user", "content": "Hello! How are you?"}])
        assert reply.choices[0].message.content and reply.model == "acme/tiny-agent"
    finally:
        up.send_signal(signal.SIGINT)
        up.wait(60)
    text = Path(log.name).read_text()
    assert "tool format hermes: the chat template writes '<tool_call>'" in text
    assert "reasoning none: no '<think>' in the chat template or tokens" in text


def _wait_up(up: subprocess.Popen, log, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert up.poll() is None, Path(log.name).read_text()
        if "turnstream: up." in Path(log.name).read_text():
            return
        time.sleep(0.2)
    raise AssertionError(f"not up after {timeout_s}s:\n{Path(log.name).read_text()}")
