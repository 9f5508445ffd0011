"""Server tools in a response: ``{"type": "mcp", ...}`` tools run on the tool workers while the model
generates, appear as ``mcp_call`` items, and the loop goes on inside the same response.  The label
``turnstream`` is the server's own registry; ``calc`` is a configured MCP server (the test server in
``tests/tools/mcp_server.py``, over stdio)."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import openai
import pytest
from gateway_harness import MODEL, GwStack

REPO = Path(__file__).resolve().parents[2]
_TOOLS = Path(tempfile.mkdtemp(prefix="turnstream-resp-mcp-")) / "tools.toml"
_TOOLS.write_text(f"[mcp.calc]\ncommand = {json.dumps(sys.executable)}\n"
                  f"args = [{json.dumps(str(REPO / 'tests' / 'tools' / 'mcp_server.py'))}]\n"
                  "connect_timeout_s = 60\n")  # a loaded CI machine starts it slowly
GATEWAY_CONFIG = {"tools_config": str(_TOOLS)}

CALC = {"type": "mcp", "server_label": "calc", "allowed_tools": ["add", "fail"], "require_approval": "never"}
OWN = {"type": "mcp", "server_label": "turnstream", "allowed_tools": ["get_weather"], "require_approval": "never"}
GET_TIME = {"type": "function", "name": "get_time", "parameters": {"type": "object", "properties": {}}}


def call(name: str, args: dict) -> str:
    return f'<tool_call>\n{{"name": "{name}", "arguments": {json.dumps(args)}}}\n</tool_call>'


@pytest.fixture(scope="module")
def client(gw: GwStack) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.url + "/v1", api_key="unused-in-open-mode", max_retries=0, timeout=60)


def test_server_tools_run_and_the_loop_goes_on_in_one_response(client: openai.OpenAI) -> None:
    script = [call("calc__add", {"a": 2, "b": 3}) + "\n" + call("get_weather", {"city": "Paris"}) + "\n"
              + call("calc__fail", {"message": "boom"}),
              "2 + 3 = {{ results[0] }}; failed: {{ results[2] }}"]
    events = list(client.responses.create(model=MODEL, input="Add 2 and 3, and the weather?", tools=[CALC, OWN],
                                          stream=True, extra_body={"replay": script}))
    final = events[-1].response
    assert final.status == "completed" and [o.type for o in final.output] == ["mcp_call"] * 3 + ["message"]
    add, weather, fail = final.output[:3]
    assert (add.server_label, add.name, json.loads(add.arguments), add.output) == ("calc", "add", {"a": 2, "b": 3},
                                                                                   "5")
    assert weather.server_label == "turnstream" and json.loads(weather.output)["city"] == "Paris"
    assert fail.status == "failed" and fail.error is not None and fail.output is None
    assert final.output_text.startswith("2 + 3 = 5; failed:") and final.usage.input_tokens > 0
    kinds = {e.type for e in events}
    assert {"response.mcp_call.in_progress", "response.mcp_call_arguments.delta", "response.mcp_call_arguments.done",
            "response.mcp_call.completed", "response.mcp_call.failed"} <= kinds


def test_a_turn_with_a_client_call_ends_the_response_once_its_server_calls_have_results(client: openai.OpenAI) -> None:
    script = [call("calc__add", {"a": 1, "b": 1}) + "\n" + call("get_time", {}), "Time {{ results[-1] }}."]
    first = client.responses.create(model=MODEL, input="Add 1 and 1, and the time?", tools=[CALC, GET_TIME],
                                    extra_body={"replay": script})
    assert [(o.type, o.status) for o in first.output] == [("mcp_call", "completed"), ("function_call", "completed")]
    assert first.output[0].output == "2" and first.status == "completed"
    fc = first.output[1]
    second = client.responses.create(model=MODEL, previous_response_id=first.id, tools=[CALC, GET_TIME],
                                     input=[{"type": "function_call_output", "call_id": fc.call_id,
                                             "output": "14:05"}], extra_body={"replay": script})
    assert second.output_text == "Time 14:05."
