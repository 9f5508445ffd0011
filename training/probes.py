"""A small hand-written probe: everyday requests as a new user types them, run as full round trips
with the real tools (the third, smallest report; values may be ones the training data also uses).

Each probe is scored on: the tools of the first round, their values, and, after the real tools
answered (at most three rounds), a final answer that quotes every key value of the last results
and invents no number.  Small-talk probes must get no call at all.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from training.backends import Backend
from training.results import key_values
from training.scoring import grounded, parse_calls, same_calls
from training.tools_spec import SERVER_TOOLS
from workers.tools.builtin import book_restaurant, calculator, get_time, get_weather, search
from workers.tools.registry import ToolError

_TOOLS = {"get_weather": get_weather, "book_restaurant": book_restaurant, "get_time": get_time,
          "calculator": calculator, "search": search}


def _c(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


PROBES: list[tuple[str, list[dict[str, Any]]]] = [
    ("What's the weather like in Zürich today?", [_c("get_weather", city="Zürich")]),
    ("whats 1234 + 4321", [_c("calculator", expression="1234 + 4321")]),
    ("What time is it in Tokyo, and what's 15% of 80?",
     [_c("get_time", timezone="Asia/Tokyo"), _c("calculator", expression="15 / 100 * 80")]),
    ("Can you check the weather in São Paulo and tell me the time in New York?",
     [_c("get_weather", city="São Paulo"), _c("get_time", timezone="America/New_York")]),
    ("Book a table for 4 at Café de Flore at 8pm please",
     [_c("book_restaurant", restaurant="Café de Flore", party_size=4, time="20:00")]),
    ("Hi!", []),
    ("thanks, that's all!", []),
    ("Search the web for vegan restaurants in Kraków", [_c("search", query="vegan restaurants in Kraków")]),
    ("How cold is it in Reykjavík right now?", [_c("get_weather", city="Reykjavík")]),
    ("what is 987654321 * 123", [_c("calculator", expression="987654321 * 123")]),
    ("Is it raining in Москва?", [_c("get_weather", city="Москва")]),
    ("I need a reservation at Sushi Zen for two at 19:30",
     [_c("book_restaurant", restaurant="Sushi Zen", party_size=2, time="19:30")]),
    ("What's the time in London and the weather in Berlin?",
     [_c("get_time", timezone="Europe/London"), _c("get_weather", city="Berlin")]),
    ("Tell me the time in Sydney, then calculate 365 * 24",
     [_c("get_time", timezone="Australia/Sydney"), _c("calculator", expression="365 * 24")]),
    ("Who are you?", []),
    ("weather in 東京 tomorrow", [_c("get_weather", city="東京", date="tomorrow")]),
    ("Search for Eiffel Tower opening hours", [_c("search", query="Eiffel Tower opening hours")]),
    ("What's 2 to the power of 16?", [_c("calculator", expression="2 ** 16")]),
    ("Book Noma for 6 people at 21:00 and check the weather in Copenhagen",
     [_c("book_restaurant", restaurant="Noma", party_size=6, time="21:00"), _c("get_weather", city="Copenhagen")]),
    ("How warm is it in Lisbon in Fahrenheit?", [_c("get_weather", city="Lisbon")]),
    ("Good morning! What's the weather in Paris?", [_c("get_weather", city="Paris")]),
    ("the weather was lovely in Rome last week", []),
    ("time in UTC pls", [_c("get_time", timezone="UTC")]),
    ("Find me a table at Le Bernardin, 3 people, 7:15 pm",
     [_c("book_restaurant", restaurant="Le Bernardin", party_size=3, time="19:15")]),
    ("Divide 1000 by 8", [_c("calculator", expression="1000 / 8")]),
    ("What's the weather in Łódź and Gdańsk?", [_c("get_weather", city="Łódź"), _c("get_weather", city="Gdańsk")]),
]


def run_tool(call: dict[str, Any]) -> str:
    """The real tool's answer as the runtime renders it (errors as ``error: ...``)."""
    fn = _TOOLS.get(call["name"])
    if fn is None:
        return f"error: unknown tool {call['name']!r}"
    try:
        result = fn(**call["arguments"])
    except (ToolError, TypeError) as e:
        return f"error: {call['name']}: {e}"
    return result if isinstance(result, str) else json.dumps(result, ensure_ascii=False, separators=(",", ":"))


@dataclass
class ProbeResult:
    prompt: str
    transcript: list[str]
    right_tool: bool
    exact_args: bool
    answer_ok: bool | None  # None for small talk


def run_probe(backend: Backend, prompt: str, expected: list[dict[str, Any]], rounds: int = 3) -> ProbeResult:
    messages: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
    first = backend.complete(messages, 200, SERVER_TOOLS)
    transcript, text, last_results = [first], first, []
    calls, _ = parse_calls(first)
    names_ok = sorted(c["name"] for c in calls) == sorted(c["name"] for c in expected)
    exact = same_calls(calls, expected) if expected else not calls and "<tool_call>" not in first
    for _ in range(rounds):
        made, _ = parse_calls(text)
        if not made:
            break
        messages.append({"role": "assistant", "content": None,
                         "tool_calls": [{"type": "function", "function": c} for c in made]})
        last_results = [(c, run_tool(c)) for c in made]
        messages += [{"role": "tool", "content": content} for _, content in last_results]
        transcript += [f"tool> {content}" for _, content in last_results]
        text = backend.complete(messages, 200, SERVER_TOOLS)
        transcript.append(text)
    if not expected:
        return ProbeResult(prompt, transcript, not calls, exact, None)
    keys = [k for c, content in last_results if not content.startswith("error")
            for k in key_values(c["name"], json.loads(content) if content[:1] in "{[" else content)]
    context = prompt + " ".join(content for _, content in last_results)
    answer_ok = bool(last_results) and "<tool_call>" not in text and all(k in text for k in keys) and grounded(
        text.replace("<|im_end|>", ""), context)
    return ProbeResult(prompt, transcript, names_ok, exact, answer_ok)


def run_all(backend: Backend) -> list[ProbeResult]:
    return [run_probe(backend, p, e) for p, e in PROBES]
