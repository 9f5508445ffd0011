"""The real Claude Code (``@anthropic-ai/claude-code`` from npm) completes a task against the gateway.

Claude Code's prompt (a long system prompt and two dozen tools) exceeds the bundled model's
context, so the deployment's decoder runs the ReplayEngine with a configured script
(``Config.replay_script``: Claude Code cannot send the ``replay`` field): turn 0 calls Claude
Code's own Write tool, turn 1 answers with the tool's result.  Claude Code runs the tool
itself and sends its result back as a ``tool_result`` block, so the test checks the file it
wrote and the answer it printed.  Its environment reaches nothing but the gateway: a fresh
HOME, telemetry and updates off, and a proxy that goes nowhere for every other host.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from gateway_harness import MODEL, GwStack
from npm_harness import npm_bin

PACKAGE, VERSION = "@anthropic-ai/claude-code", "2.1.197"
KEY = "sk-ant-claude-code-test-42"
_DIR = Path(tempfile.mkdtemp(prefix="turnstream-claude-code-"))
WORK, TARGET, TEXT = _DIR / "work", _DIR / "work" / "hello.txt", "hello from turnstream\n"
_SCRIPT = _DIR / "script.json"
_SCRIPT.write_text(json.dumps([
    "I'll write the file.\n<tool_call>\n" + json.dumps({"name": "Write", "arguments": {
        "file_path": str(TARGET), "content": TEXT}}) + "\n</tool_call>",
    "Done. The Write tool said: {{ results[0] }}"]))
GATEWAY_CONFIG = dict(replay_script=str(_SCRIPT), api_keys=(KEY,))


@pytest.fixture(scope="module")
def claude() -> Iterator[Path]:
    try:
        yield npm_bin(PACKAGE, VERSION, "claude")
    finally:
        shutil.rmtree(_DIR, ignore_errors=True)


def harness_env(gw: GwStack, home: Path) -> dict[str, str]:
    """Only what Claude Code needs: the gateway, a key, a fresh HOME, nothing else reachable."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "ANTHROPIC_BASE_URL": gw.url,
            "ANTHROPIC_API_KEY": KEY, "ANTHROPIC_SMALL_FAST_MODEL": MODEL, "ANTHROPIC_DEFAULT_HAIKU_MODEL": MODEL,
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1", "DISABLE_TELEMETRY": "1",
            "DISABLE_ERROR_REPORTING": "1", "HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9",
            "NO_PROXY": "127.0.0.1,localhost"}


def test_claude_code_runs_its_write_tool_and_answers(claude: Path, gw: GwStack) -> None:
    WORK.mkdir(parents=True, exist_ok=True)
    (_DIR / "home").mkdir(exist_ok=True)
    proc = subprocess.run([str(claude), "-p", "Write hello.txt", "--model", MODEL, "--allowedTools", "Write"],
                          cwd=WORK, env=harness_env(gw, _DIR / "home"), capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, f"stdout: {proc.stdout[-2000:]}\nstderr: {proc.stderr[-2000:]}"
    assert TARGET.read_text() == TEXT
    answer = proc.stdout.strip()
    assert answer.startswith("Done. The Write tool said: ") and "File created successfully" in answer, answer
    assert str(TARGET) in answer
