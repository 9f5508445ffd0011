"""What a turn may write, decided from the request's intent: a library-neutral ``Constraint``.

    constraint_for(format, reasoning, tools, params)      (pure; the decoder calls it per turn)

    tool_choice            tools    ->  calls      tools a call may name
    ----------------------------------------------------------------------------------
    any                    none         (none)     -      a plain request: decoded freely, as on any
                                                           server; the parser returns its text as
                                                           content, so it never returns a call
                                                           (with an answer format, or grammar_plain=on:
                                                           FORBIDDEN)
    "none"                 some         FORBIDDEN  -      (a session that keeps its tools rendered)
    "auto"                 some         ALLOWED    all    text is free; a call is held to its tool
    "required" / "any"     some         REQUIRED   all    the turn is calls (after reasoning)
    named / {"type":"tool"} some        REQUIRED   that one

``params`` are the session's params as the gateway recorded them: ``tool_choice`` (OpenAI,
Responses and Anthropic spellings), ``response_format`` (chat) or ``text_format``
(Responses ``text.format``), ``parallel_tool_calls``.  Each tool is an OpenAI function dict
(server tools carry their registry schema the same way); ``function.strict`` holds its
arguments to the schema exactly (objects take no properties beyond those declared).  Every
engine compiles the same ``Constraint`` (native: llguidance masks; vLLM: structured outputs;
replay: validation of the script).
"""

from __future__ import annotations

import enum
import json
import re
from dataclasses import dataclass
from typing import Any

from workers.decode.errors import EngineError


class ConstraintError(EngineError, ValueError):
    """The request's constraint is impossible (unknown named tool, unusable schema or format)."""


class Calls(enum.Enum):
    FORBIDDEN = "forbidden"  # no call may begin
    ALLOWED = "allowed"  # free text; a call that begins must name an offered tool and match its schema
    REQUIRED = "required"  # the turn (after its reasoning) is one or more calls


@dataclass(frozen=True)
class ToolSpec:
    name: str
    parameters: dict[str, Any]  # the arguments' JSON schema
    strict: bool = False


@dataclass(frozen=True)
class Constraint:
    format: str  # the deployment's tool-call format (parser name)
    calls: Calls
    tools: tuple[ToolSpec, ...] = ()
    reasoning: str | None = None  # None | "think" | "think_forced"
    answer_schema: dict[str, Any] | None = None  # response_format: the answer text is JSON of this schema
    parallel: bool = True  # more than one call per turn
    grammar: str | None = None  # the client's own Lark grammar (``structured_outputs``): the whole turn

    def key(self) -> str:
        """A stable text identity (compiled grammars are cached by it)."""
        tools = [[t.name, t.parameters, t.strict] for t in self.tools]
        return json.dumps([self.format, self.calls.value, tools, self.reasoning, self.answer_schema, self.parallel,
                           self.grammar], sort_keys=True)


def turn_constraint(cfg: Any, tools: list[dict[str, Any]] | None, params: dict[str, Any] | None,
                    continuation: bool, turn: int = 0) -> Constraint | None:
    """The constraint of a session's turn under the process config (``tool_format``, ``reasoning``,
    ``grammar_auto``).  ``required`` and named choices bind the turn that answers the user; the
    turns that continue after tool results are ``auto`` (else a session loop could never answer).
    A client's ``structured_outputs`` for this turn replaces all of that with its own grammar."""
    params = dict(params or {})
    grammar = client_grammar(params.get("structured_outputs"), turn)
    if grammar is not None:
        specs = tuple(tool_spec(t) for t in tools or ())
        return Constraint(cfg.tool_format, Calls.ALLOWED, specs, cfg.reasoning or None, grammar=grammar)
    if continuation and normalize_choice(params.get("tool_choice")) != "none":
        params["tool_choice"] = "auto"
    return constraint_for(cfg.tool_format, cfg.reasoning or None, tools, params, cfg.grammar_auto != "off",
                          cfg.grammar_plain == "on")


def constraint_for(fmt: str, reasoning: str | None, tools: list[dict[str, Any]] | None,
                   params: dict[str, Any] | None, constrain_auto: bool = True,
                   constrain_plain: bool = False) -> Constraint | None:
    """The turn's constraint; None when nothing is constrained: no tools rendered (none offered, or
    a client API's ``tool_choice: "none"``, which renders none) and no answer format -- a plain
    request decodes as on any other server, and the parser returns its whole text as content,
    never a call; ``constrain_plain`` (``grammar_plain=on``) holds it to text without call markup
    instead -- or ``auto`` with tools, switched off (``grammar_auto``)."""
    params = params or {}
    specs = tuple(tool_spec(t) for t in tools or ())
    choice = normalize_choice(params.get("tool_choice"))
    answer = answer_schema(params.get("response_format") or params.get("text_format"))
    parallel = params.get("parallel_tool_calls", True) is not False
    if not specs and answer is None and not constrain_plain:
        return None
    if choice == "none" or not specs:
        calls, specs = Calls.FORBIDDEN, ()
    elif choice == "auto":
        calls = Calls.ALLOWED
        if not constrain_auto and answer is None:
            return None
    else:
        calls = Calls.REQUIRED
        if choice != "required":
            specs = tuple(s for s in specs if s.name == choice["name"])
            if not specs:
                raise ConstraintError(f"tool_choice: function {choice['name']!r} is not among the tools")
    return Constraint(fmt, calls, specs, reasoning or None, answer, parallel)


def client_grammar(outputs: dict[str, str] | list[dict[str, str]] | None, turn: int) -> str | None:
    """The Lark text of ``structured_outputs`` for ``turn`` (a list holds one per turn, a dict every
    turn; None past the list's end): ``grammar`` as given, ``regex`` as the one rule of a grammar."""
    if isinstance(outputs, list):
        outputs = outputs[turn] if turn < len(outputs) else None
    if not outputs:
        return None
    if "grammar" in outputs:
        return outputs["grammar"]
    return "start: /" + re.sub(r"(?<!\\)/", r"\\/", outputs["regex"]) + "/\n"


def normalize_choice(choice: Any) -> str | dict[str, str]:
    """"auto" | "none" | "required" | {"name": ...} from any API's spelling."""
    if choice in (None, "auto"):
        return "auto"
    if choice in ("none", "required"):
        return choice
    if choice == "any" or (isinstance(choice, dict) and choice.get("type") in ("any", "required")):
        return "required"
    if isinstance(choice, dict):
        if choice.get("type") in ("auto", "none"):
            return choice["type"]
        name = choice.get("name") or (choice.get("function") or {}).get("name")
        if isinstance(name, str):
            return {"name": name}
    raise ConstraintError(f"tool_choice: unsupported value {choice!r}")


def tool_spec(tool: dict[str, Any]) -> ToolSpec:
    """A ``ToolSpec`` from an OpenAI tool dict (``{"type": "function", "function": {...}}`` or the bare function)."""
    fn = tool.get("function", tool)
    params = fn.get("parameters") or {"type": "object", "properties": {}}
    strict = bool(fn.get("strict"))
    return ToolSpec(fn["name"], _closed(params) if strict else params, strict)


def answer_schema(fmt: dict[str, Any] | None) -> dict[str, Any] | None:
    """The JSON schema of a ``response_format`` / ``text.format``; None for plain text."""
    if not fmt or fmt.get("type") in (None, "text"):
        return None
    if fmt["type"] == "json_object":
        return {"type": "object"}
    if fmt["type"] == "json_schema":
        spec = fmt.get("json_schema", fmt)  # chat nests it; Responses puts name/schema/strict on the format
        schema = spec.get("schema") or {"type": "object"}
        return _closed(schema) if spec.get("strict") else schema
    raise ConstraintError(f"response_format: unsupported type {fmt['type']!r}")


_MAPS = ("properties", "$defs", "definitions", "patternProperties")  # name -> schema
_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")  # [schema]
_ONE = ("items", "not", "additionalProperties")  # schema


def _closed(schema: Any) -> Any:
    """OpenAI strict mode: every object schema without ``additionalProperties`` gets ``false``."""
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    for k in _MAPS:
        if isinstance(out.get(k), dict):
            out[k] = {name: _closed(s) for name, s in out[k].items()}
    for k in _LISTS:
        if isinstance(out.get(k), list):
            out[k] = [_closed(s) for s in out[k]]
    for k in _ONE:
        if isinstance(out.get(k), dict):
            out[k] = _closed(out[k])
    if out.get("type") == "object" or "properties" in out:
        out.setdefault("additionalProperties", False)
    return out
