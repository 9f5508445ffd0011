"""The five demo tools the tiny model is trained on, as OpenAI tool dicts (reusable by the tool layer)."""

from __future__ import annotations

from typing import Any


def _tool(name: str, description: str, props: dict[str, tuple[str, str]], required: list[str]) -> dict[str, Any]:
    properties = {k: {"type": t, "description": d} for k, (t, d) in props.items()}
    return {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": {"type": "object", "properties": properties, "required": required}}}


TOOLS: list[dict[str, Any]] = [
    _tool("get_weather", "Get the weather forecast for a city.",
          {"city": ("string", "City name."), "date": ("string", "Date as YYYY-MM-DD; today if omitted.")},
          ["city"]),
    _tool("book_restaurant", "Book a table at a restaurant.",
          {"restaurant": ("string", "Restaurant name."), "party_size": ("integer", "Number of guests."),
           "time": ("string", "Time as HH:MM.")},
          ["restaurant", "party_size", "time"]),
    _tool("get_time", "Get the current local time in a timezone.",
          {"timezone": ("string", "IANA timezone, e.g. Europe/Paris.")}, ["timezone"]),
    _tool("calculator", "Evaluate an arithmetic expression.",
          {"expression": ("string", "The expression, e.g. 12 * (3 + 4).")}, ["expression"]),
    _tool("search", "Search the web.", {"query": ("string", "The search query.")}, ["query"]),
]

TOOL_NAMES: tuple[str, ...] = tuple(t["function"]["name"] for t in TOOLS)

# What the runtime puts in the system prompt when a session names no tools: every built-in tool of
# workers/tools/builtin.py, in the registry's order (the chat template shows names and parameters
# only; a test checks this list renders exactly like the live registry's).
SERVER_TOOLS: list[dict[str, Any]] = [
    _tool("book_restaurant", "Book a table at a restaurant.",
          {"restaurant": ("string", ""), "party_size": ("integer", ""), "time": ("string", "")},
          ["restaurant", "party_size", "time"]),
    _tool("calculator", "Evaluate an arithmetic expression.", {"expression": ("string", "")}, ["expression"]),
    _tool("convert_time", "Convert a wall-clock time between time zones.",
          {"time": ("string", ""), "from_timezone": ("string", ""), "to_timezone": ("string", "")},
          ["time", "from_timezone", "to_timezone"]),
    _tool("get_time", "Current date and time in a time zone.", {"timezone": ("string", "")}, ["timezone"]),
    _tool("get_weather", "Weather forecast for a city.", {"city": ("string", ""), "date": ("string", "")}, ["city"]),
    _tool("http_get", "Fetch a web page.", {"url": ("string", "")}, ["url"]),
    _tool("search", "Search the web.", {"query": ("string", "")}, ["query"]),
]
