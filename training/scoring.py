"""Scoring one model turn against what an evaluation item expects.

Item kinds and the metrics they count towards:
  call    well_formed (every <tool_call> block parses, nothing else in the turn, it stopped),
          right_tool (the multiset of called tools is the expected one),
          exact_args (every expected call is made with the right values, no other call; as in the
          first evaluation, a turn with stray text around right calls still counts here)
  none    no_tool (no call at all: small talk)
  answer  answer_values (no call, and the answer quotes every key value of the results),
          answer_grounded (every number in the answer occurs in the results or the conversation)

"Right values" (``same_value``) means equal up to what the tool itself ignores: the demo tools
read city, restaurant and query case-insensitively, a calculation is right when it uses the same
numbers and gives the same result.  ``strict=True`` compares the JSON exactly (the legacy set's rule).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

from workers.tools.calculator import evaluate
from workers.tools.registry import ToolError

_CALL = re.compile(r"<tool_call>\n(.*?)\n</tool_call>", re.S)
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_CASELESS = {"city", "restaurant", "query"}


def parse_calls(text: str) -> tuple[list[dict[str, Any]], bool]:
    """The tool calls in an assistant turn, and whether the turn is well formed."""
    calls, ok = [], True
    for block in _CALL.findall(text):
        try:
            call = json.loads(block)
        except json.JSONDecodeError:
            ok = False
            continue
        if not (isinstance(call, dict) and isinstance(call.get("name"), str) and isinstance(call.get("arguments"), dict)):
            ok = False
            continue
        calls.append({"name": call["name"], "arguments": call["arguments"]})
    rest = _CALL.sub("", text).replace("<|im_end|>", "").strip()
    return calls, ok and bool(calls) and not rest and text.endswith("<|im_end|>")


def _numbers(expr: str) -> Counter:
    return Counter(float(n) for n in _NUMBER.findall(expr))


def same_value(key: str, got: Any, want: Any) -> bool:
    if key == "expression" and isinstance(got, str) and isinstance(want, str):
        try:
            return _numbers(got) == _numbers(want) and abs(evaluate(got) - evaluate(want)) < 1e-9
        except (ToolError, TypeError):
            return False
    if key in _CASELESS and isinstance(got, str) and isinstance(want, str):
        return got.strip().casefold() == want.strip().casefold()
    return type(got) is type(want) and got == want


def same_call(got: dict[str, Any], want: dict[str, Any], strict: bool = False) -> bool:
    if strict:
        return json.dumps(got, sort_keys=True) == json.dumps(want, sort_keys=True)
    ga, wa = got["arguments"], want["arguments"]
    return got["name"] == want["name"] and ga.keys() == wa.keys() and all(same_value(k, ga[k], wa[k]) for k in wa)


def same_calls(got: list[dict[str, Any]], want: list[dict[str, Any]], strict: bool = False) -> bool:
    """Whether ``got`` is ``want`` in some order (each expected call matched by exactly one made)."""
    if len(got) != len(want):
        return False
    left = list(got)
    for w in want:
        match = next((g for g in left if same_call(g, w, strict)), None)
        if match is None:
            return False
        left.remove(match)
    return True


def grounded(answer: str, context: str) -> bool:
    """Every number in ``answer`` also occurs in ``context`` (no invented or spliced numbers)."""
    have = set(_NUMBER.findall(context))
    return all(n in have for n in _NUMBER.findall(answer))


def score(kind: str, text: str, calls: list[dict[str, Any]], keys: list[str], context: str = "",
          strict: bool = False) -> dict[str, bool]:
    """The metrics this turn counts towards, each True or False (see the module docstring)."""
    made, well_formed = parse_calls(text)
    if kind == "none":
        return {"no_tool": not made and "<tool_call>" not in text}
    if kind == "answer":
        clean = "<tool_call>" not in text
        return {"answer_values": clean and all(k in text for k in keys),
                "answer_grounded": clean and grounded(text.replace("<|im_end|>", ""), context)}
    names = Counter(c["name"] for c in made)
    return {"well_formed": well_formed, "right_tool": names == Counter(c["name"] for c in calls),
            "exact_args": same_calls(made, calls, strict)}
