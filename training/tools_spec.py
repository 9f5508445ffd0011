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
