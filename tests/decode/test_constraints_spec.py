"""The turn's constraint from the request's intent: every API's spelling of tool_choice, strict, response_format."""

from __future__ import annotations

import pytest

from runtime.config import load_config
from workers.decode.constraints import Calls, ConstraintError, constraint_for, turn_constraint
from workers.decode.constraints.spec import answer_schema, normalize_choice, tool_spec

OBJ = {"type": "object", "properties": {"a": {"type": "object", "properties": {"b": {"type": "string"}}}}}
TOOLS = [{"type": "function", "function": {"name": "f", "parameters": OBJ}},
         {"type": "function", "function": {"name": "g", "parameters": OBJ, "strict": True}}]


@pytest.mark.parametrize("choice,expected", [
    (None, "auto"), ("auto", "auto"), ("none", "none"), ("required", "required"),
    ("any", "required"), ({"type": "any"}, "required"), ({"type": "auto"}, "auto"), ({"type": "none"}, "none"),
    ({"type": "function", "function": {"name": "f"}}, {"name": "f"}),  # chat completions
    ({"type": "function", "name": "f"}, {"name": "f"}),  # Responses
    ({"type": "tool", "name": "f"}, {"name": "f"}),  # Anthropic
])
def test_every_apis_tool_choice_maps_onto_one_meaning(choice, expected) -> None:
    assert normalize_choice(choice) == expected


def test_unknown_choices_and_named_tools_are_errors() -> None:
    with pytest.raises(ConstraintError):
        normalize_choice("sometimes")
    with pytest.raises(ConstraintError, match="'h' is not among the tools"):
        constraint_for("hermes", None, TOOLS, {"tool_choice": {"name": "h"}})


def test_the_choice_decides_what_calls_may_be() -> None:
    def calls(tools, choice):
        c = constraint_for("hermes", None, tools, {"tool_choice": choice})
        return c.calls, [t.name for t in c.tools]

    assert calls(TOOLS, None) == (Calls.ALLOWED, ["f", "g"])
    assert constraint_for("hermes", None, [], {}) is None  # a plain request decodes freely (as vLLM)
    assert constraint_for("hermes", None, [], {"tool_choice": "none"}) is None
    fmt = {"response_format": {"type": "json_object"}}
    assert constraint_for("hermes", None, [], fmt).calls is Calls.FORBIDDEN  # an answer format: JSON, no call
    assert calls(TOOLS, "none") == (Calls.FORBIDDEN, [])
    assert calls(TOOLS, "required") == (Calls.REQUIRED, ["f", "g"])
    assert calls(TOOLS, {"type": "tool", "name": "g"}) == (Calls.REQUIRED, ["g"])


def test_strict_tools_and_schemas_take_no_undeclared_properties() -> None:
    loose, strict = tool_spec(TOOLS[0]), tool_spec(TOOLS[1])
    assert "additionalProperties" not in loose.parameters and not loose.strict
    assert strict.parameters["additionalProperties"] is False
    assert strict.parameters["properties"]["a"]["additionalProperties"] is False  # nested objects too
    assert strict.parameters["properties"]["a"]["properties"]["b"] == {"type": "string"}
    fmt = {"type": "json_schema", "json_schema": {"name": "r", "schema": OBJ, "strict": True}}
    assert answer_schema(fmt)["additionalProperties"] is False
    assert answer_schema({"type": "json_schema", "name": "r", "schema": OBJ}) == OBJ  # Responses text.format
    assert answer_schema({"type": "json_object"}) == {"type": "object"} and answer_schema({"type": "text"}) is None


def test_parallel_tool_calls_false_allows_one_call() -> None:
    assert not constraint_for("hermes", None, TOOLS, {"parallel_tool_calls": False}).parallel
    assert constraint_for("hermes", None, TOOLS, {}).parallel


def test_the_process_config_sets_format_reasoning_and_the_auto_switch() -> None:
    cfg = load_config(tool_format="qwen3_coder", reasoning="think")
    c = turn_constraint(cfg, TOOLS, {}, continuation=False)
    assert (c.format, c.reasoning, c.calls) == ("qwen3_coder", "think", Calls.ALLOWED)
    off = load_config(grammar_auto="off")
    assert turn_constraint(off, TOOLS, {}, continuation=False) is None  # auto with tools: free
    assert turn_constraint(off, [], {}, continuation=False) is None  # no tools: nothing to hold
    plain = load_config(grammar_plain="on")
    assert turn_constraint(plain, [], {}, continuation=False).calls is Calls.FORBIDDEN  # unless asked to
    assert turn_constraint(off, TOOLS, {"tool_choice": "required"}, continuation=False).calls is Calls.REQUIRED


def test_required_binds_the_turn_that_answers_the_user_not_the_continuations() -> None:
    cfg = load_config()
    assert turn_constraint(cfg, TOOLS, {"tool_choice": "required"}, continuation=False).calls is Calls.REQUIRED
    assert turn_constraint(cfg, TOOLS, {"tool_choice": "required"}, continuation=True).calls is Calls.ALLOWED
    assert turn_constraint(cfg, TOOLS, {"tool_choice": "none"}, continuation=True).calls is Calls.FORBIDDEN


def test_a_clients_structured_outputs_replace_the_grammar_turn_by_turn() -> None:
    cfg = load_config(grammar_auto="off")
    per_turn = {"structured_outputs": [{"grammar": "start: \"a\"\n"}, {"regex": "b/c"}], "tool_choice": "required"}
    first = turn_constraint(cfg, TOOLS, per_turn, continuation=False, turn=0)
    assert (first.grammar, first.calls) == ("start: \"a\"\n", Calls.ALLOWED)  # the client's grammar wins
    assert turn_constraint(cfg, TOOLS, per_turn, continuation=True, turn=1).grammar == "start: /b\\/c/\n"
    assert turn_constraint(cfg, TOOLS, per_turn, continuation=True, turn=2) is None  # past the list: as before
    every = {"structured_outputs": {"regex": "x+"}}
    assert turn_constraint(cfg, [], every, continuation=True, turn=7).grammar == "start: /x+/\n"
    assert first.key() != turn_constraint(cfg, TOOLS, per_turn, continuation=True, turn=1).key()
