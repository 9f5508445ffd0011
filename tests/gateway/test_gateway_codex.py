"""The real Codex CLI (``@openai/codex`` from the npm registry) completes a task against the gateway.

``codex exec`` talks to the gateway's Responses API (``wire_api = "responses"``, streamed, stateless:
``store: false`` with the whole item list each time).  Its prompt is far beyond the bundled model's
context, so the turns are scripted (ReplayEngine, the stack's ``replay_script``): turn 0 calls Codex's
own ``exec_command`` tool to write a file, turn 1 answers.  Codex runs the command itself, sends the
result back as a ``function_call_output`` item and prints the answer.  Its only network peer is the
gateway: update checks and analytics are off, and web search is disabled (the gateway answers 400 to
tool types it cannot run, such as ``web_search``).  Codex's namespaced tools (``multi_agent_v1``) go
to the model as plain function tools.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path

from gateway_harness import MODEL, GwStack
from npm_harness import npm_bin

CODEX_VERSION = os.environ.get("TURNSTREAM_CODEX_VERSION", "0.171.0")
FILE, TEXT = "hello.txt", "hello from codex"
ANSWER = "I wrote hello.txt for you."
_SCRIPT = Path(tempfile.mkdtemp(prefix="turnstream-codex-")) / "script.json"
_SCRIPT.write_text(json.dumps([
    f'<tool_call>\n{{"name": "exec_command", "arguments": {{"cmd": "printf \'{TEXT}\' > {FILE}"}}}}\n</tool_call>',
    ANSWER]))
GATEWAY_CONFIG = {"replay_script": str(_SCRIPT), "replay_rate": 2000}
KEY = "codex-test-key"

CONFIG = f"""
model = "{MODEL}"
model_provider = "turnstream"
check_for_update_on_startup = false
web_search = "disabled"

[analytics]
enabled = false

[features]
goals = false

[model_providers.turnstream]
name = "turnstream"
base_url = "{{url}}/v1"
wire_api = "responses"
env_key = "TURNSTREAM_TEST_KEY"
"""


def test_codex_exec_runs_its_own_tool_and_answers(gw: GwStack, tmp_path: Path) -> None:
    codex = npm_bin("@openai/codex", CODEX_VERSION, "codex")
    home, work = tmp_path / "home", tmp_path / "work"
    (home / ".codex").mkdir(parents=True)
    work.mkdir()
    (home / ".codex" / "config.toml").write_text(CONFIG.replace("{url}", gw.url))
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "CODEX_HOME": str(home / ".codex"),
           "TURNSTREAM_TEST_KEY": KEY, "NO_COLOR": "1"}
    proc = subprocess.run([str(codex), "exec", "--skip-git-repo-check", "--ephemeral", "--strict-config",
                           "--dangerously-bypass-approvals-and-sandbox", "--color", "never", "-C", str(work),
                           "Write 'hello from codex' into hello.txt, then tell me."],
                          cwd=work, env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (work / FILE).read_text() == TEXT  # Codex ran its own tool, as the model asked
    assert proc.stdout.strip().splitlines()[-1] == ANSWER, proc.stdout[-2000:]
