"""The OpenAI Agents SDK (``openai-agents``) runs an agent with a Python function tool to its final
answer against the gateway's Responses API (ReplayEngine: the script calls the tool, then answers
from its result, which the SDK ran and sent back)."""

from __future__ import annotations

import asyncio

import openai
from agents import Agent, ModelSettings, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled
from gateway_harness import MODEL, GwStack

SCRIPT = ['<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
          "The weather in Paris: {{ results[0] }}."]


def test_an_agent_with_a_function_tool_runs_to_its_final_answer(gw: GwStack) -> None:
    set_tracing_disabled(True)  # no export to OpenAI's tracing endpoint
    seen: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """The current weather of a city."""
        seen.append(city)
        return f"sunny and 21 C in {city}"

    client = openai.AsyncOpenAI(base_url=gw.url + "/v1", api_key="unused-in-open-mode", max_retries=0)
    agent = Agent(name="weather", instructions="Answer with the tools.", tools=[get_weather],
                  model=OpenAIResponsesModel(model=MODEL, openai_client=client),
                  model_settings=ModelSettings(extra_body={"replay": SCRIPT}))
    result = asyncio.run(Runner.run(agent, "What's the weather in Paris?"))
    assert seen == ["Paris"]
    assert result.final_output == "The weather in Paris: sunny and 21 C in Paris."
    calls = [i for i in result.new_items if i.type == "tool_call_item"]
    outputs = [i for i in result.new_items if i.type == "tool_call_output_item"]
    assert len(calls) == 1 and len(outputs) == 1 and outputs[0].output == "sunny and 21 C in Paris"
    assert len(result.raw_responses) == 2 and all(r.response_id.startswith("resp_") for r in result.raw_responses)


def test_an_agent_with_hosted_mcp_tools_gets_them_run_by_the_server(gw: GwStack) -> None:
    from agents import HostedMCPTool

    set_tracing_disabled(True)
    script = ['<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
              "Server says: {{ results[0] }}"]
    client = openai.AsyncOpenAI(base_url=gw.url + "/v1", api_key="unused-in-open-mode", max_retries=0)
    hosted = HostedMCPTool(tool_config={"type": "mcp", "server_label": "turnstream", "allowed_tools": ["get_weather"],
                                        "require_approval": "never"})
    agent = Agent(name="weather", tools=[hosted], model=OpenAIResponsesModel(model=MODEL, openai_client=client),
                  model_settings=ModelSettings(extra_body={"replay": script}))
    result = asyncio.run(Runner.run(agent, "What's the weather in Paris?"))
    assert result.final_output.startswith("Server says: {") and '"city":"Paris"' in result.final_output
    assert len(result.raw_responses) == 1  # one response: the server ran the tool inside it
    [call] = [o for o in result.raw_responses[0].output if o.type == "mcp_call"]
    assert (call.server_label, call.name, call.status) == ("turnstream", "get_weather", "completed")
