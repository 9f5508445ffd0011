"""Generated tool-calling requests for the grammar benchmark and tests, with schemas the model never saw.

The bundled model was trained on five tools (get_weather, book_restaurant, get_time,
calculator, search) with fixed argument names.  Each case offers variants of them: tools
renamed (``weather_lookup``, ``reserve_table`` ...), arguments renamed (``city`` -> ``location``),
types changed (``party_size`` as a string, a new integer ``days``), enums added (``unit``,
``timezone``), and often only some of the tools, so a request may ask for what no offered tool
does.  ``judge`` reads a completion back with the parser and checks every call against the tool
that was offered under its name.

    cases = build_cases(seed, n)          # Case(messages, tools, mode, named)
    judge(fmt, text, case) -> Verdict     # calls, unoffered, invalid_args, ...
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any

import jsonschema

from workers.parser import parse_text

MODES = ("required", "named", "auto", "no_tools")
CITIES = ("Paris", "Oslo", "Lima", "Kyoto", "Porto", "Quito", "Dakar", "Hanoi")


def _fn(name: str, props: dict[str, Any], required: list[str], desc: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": desc, "parameters": {
        "type": "object", "properties": props, "required": required}}}


def _weather(rng: random.Random) -> dict[str, Any]:
    city = rng.choice(["city", "location", "place"])
    props: dict[str, Any] = {city: {"type": "string"}}
    if rng.random() < 0.5:
        props["unit"] = {"type": "string", "enum": ["celsius", "fahrenheit"]}
    if rng.random() < 0.4:
        props["days"] = {"type": "integer", "minimum": 1, "maximum": 7}
    return _fn(rng.choice(["get_weather", "weather_lookup", "get_forecast"]), props, list(props)[:2], "Weather.")


def _booking(rng: random.Random) -> dict[str, Any]:
    size = {"type": "string"} if rng.random() < 0.5 else {"type": "integer", "minimum": 1}
    props = {rng.choice(["restaurant", "venue"]): {"type": "string"}, rng.choice(["party_size", "guests"]): size,
             "time": {"type": "string", "pattern": "^[0-2][0-9]:[0-5][0-9]$"}}
    return _fn(rng.choice(["book_restaurant", "reserve_table", "book_table"]), props, list(props), "Book a table.")


def _time(rng: random.Random) -> dict[str, Any]:
    zone = {"type": "string", "enum": ["Europe/Paris", "Europe/Oslo", "Asia/Tokyo", "America/Lima"]}
    return _fn(rng.choice(["get_time", "current_time"]), {rng.choice(["timezone", "tz"]): zone}, [], "Local time.")


def _calc(rng: random.Random) -> dict[str, Any]:
    props = {rng.choice(["expression", "expr"]): {"type": "string"}}
    if rng.random() < 0.5:
        props["precision"] = {"type": "integer", "minimum": 0, "maximum": 10}
    return _fn(rng.choice(["calculator", "evaluate"]), props, list(props)[:1], "Arithmetic.")


def _search(rng: random.Random) -> dict[str, Any]:
    props = {rng.choice(["query", "q", "terms"]): {"type": "string"}}
    if rng.random() < 0.5:
        props["limit"] = {"type": "integer", "minimum": 1, "maximum": 20}
    return _fn(rng.choice(["search", "web_search"]), props, list(props)[:1], "Web search.")


FAMILIES = {"weather": _weather, "booking": _booking, "time": _time, "calc": _calc, "search": _search}
ASKS = {
    "weather": ["What's the weather in {city} today?", "Will it rain in {city} tomorrow?"],
    "booking": ["Book a table for {n} at Chez {city} at 19:30.", "Reserve dinner for {n} at Casa {city} at 20:00."],
    "time": ["What time is it in {city}?", "Tell me the local time in {city}."],
    "calc": ["What is {n} times 17?", "Compute 12 * ({n} + 4)."],
    "search": ["Search the web for the population of {city}.", "Look up the history of {city}."],
    "none": ["Hello! How are you?", "Tell me a long story about the sea.", "Thanks, that's all."],
}


@dataclass(frozen=True)
class Case:
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    mode: str  # required | named | auto | no_tools
    named: str | None = None

    @property
    def tool_choice(self) -> Any:
        return {"required": "required", "named": {"type": "function", "function": {"name": self.named}},
                "auto": "auto", "no_tools": None}[self.mode]


def build_cases(seed: int, n: int, modes: tuple[str, ...] = MODES) -> list[Case]:
    """``n`` cases, the modes in turn; auto cases often lack the tool their question needs."""
    rng = random.Random(seed)
    return [_case(rng, modes[i % len(modes)]) for i in range(n)]


def _case(rng: random.Random, mode: str) -> Case:
    ask = rng.choice(list(ASKS))
    text = rng.choice(ASKS[ask]).format(city=rng.choice(CITIES), n=rng.randint(2, 9))
    messages = [{"role": "user", "content": text}]
    if mode == "no_tools":
        return Case(messages, [], mode)
    families = rng.sample(sorted(FAMILIES), rng.randint(1, 3))
    tools = [FAMILIES[f](rng) for f in families]
    names = [t["function"]["name"] for t in tools]
    if len(set(names)) != len(names):
        tools = [t for i, t in enumerate(tools) if names.index(names[i]) == i]
    named = rng.choice(tools)["function"]["name"] if mode == "named" else None
    return Case(messages, [t for t in tools if named is None or t["function"]["name"] == named], mode, named)


@dataclass
class Verdict:
    calls: int = 0
    unoffered: int = 0  # calls naming a tool the request did not offer
    invalid_args: int = 0  # calls whose arguments are not JSON or break the offered tool's schema
    malformed: int = 0  # calls the parser could not read at all (complete but broken)
    truncated: int = 0  # calls cut off by max_tokens (reported, never dispatched)
    no_call: bool = False  # a required/named turn without a valid call
    wrong_name: int = 0  # named choice: calls of another tool
    notes: list[str] = field(default_factory=list)


def judge(fmt: str, text: str, case: Case) -> Verdict:
    """Read ``text`` as the parser does and check every call against the offered tools."""
    turn = parse_text(fmt, text, tools=case.tools)
    offered = {t["function"]["name"]: t["function"]["parameters"] for t in case.tools}
    cut = sum(bad.truncated for bad in turn.invalid)
    v = Verdict(calls=len(turn.calls) + len(turn.invalid), malformed=len(turn.invalid) - cut, truncated=cut)
    for call in turn.calls:
        if call.name not in offered:
            v.unoffered += 1
            v.notes.append(f"unoffered {call.name}")
            continue
        if case.named is not None and call.name != case.named:
            v.wrong_name += 1
        try:
            jsonschema.validate(json.loads(call.arguments), offered[call.name])
        except (json.JSONDecodeError, jsonschema.ValidationError) as exc:
            v.invalid_args += 1
            v.notes.append(f"{call.name}: {str(exc).splitlines()[0][:80]}")
    v.no_call = case.mode in ("required", "named") and not any(c.name in offered for c in turn.calls)
    return v
