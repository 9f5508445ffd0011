"""Every format's grammar against its parser: what the grammar accepts parses to valid calls.

Each format gets a call in its native syntax (as the parser's own cases write it).  The
grammar, compiled for a tokenizer that has the format's markers as added tokens (as real
models do) and for one that spells them as text, must accept that call under ``required``
and ``auto``, and the parser must read it back as the same call; an unoffered name, arguments
that break the schema, and (with no tools) the call itself must be refused.
"""

from __future__ import annotations

import functools
import json

import jsonschema
import pytest
from tokenizers import AddedToken, Tokenizer

from workers.decode.constraints import Calls, constraint_for
from workers.decode.constraints.formats import FORMATS
from workers.decode.constraints.guide import GrammarCompiler
from workers.decode.synthetic import build_tokenizer
from workers.parser import parse_text

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
                                           "unit": {"type": "string", "enum": ["c", "f"]}},
          "required": ["city", "days"]}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": SCHEMA}},
         {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}]
ARGS = {"city": "Paris", "days": 3, "unit": "c"}

# format -> (a valid call of get_weather with ARGS, markers that real tokenizers have as added tokens)
CALLS: dict[str, tuple[str, list[str]]] = {
    "hermes": ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3, "unit": "c"}}\n'
               '</tool_call>', ["<tool_call>", "</tool_call>"]),
    "qwen3_coder": ("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n"
                    "</parameter>\n<parameter=unit>\nc\n</parameter>\n</function>\n</tool_call>",
                    ["<tool_call>", "</tool_call>"]),
    "minimax_m2": ('<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">Paris</parameter>\n'
                   '<parameter name="days">3</parameter>\n<parameter name="unit">c</parameter>\n</invoke>\n'
                   "</minimax:tool_call>", ["<minimax:tool_call>", "</minimax:tool_call>"]),
    "glm45": ("<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>days</arg_key>\n"
              "<arg_value>3</arg_value>\n<arg_key>unit</arg_key>\n<arg_value>c</arg_value>\n</tool_call>",
              ["<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"]),
    "llama3_json": ('{"name": "get_weather", "parameters": {"city": "Paris", "days": 3, "unit": "c"}}', []),
    "pythonic": ("[get_weather(city='Paris', days=3, unit='c')]", []),
    "mistral": ('[TOOL_CALLS]get_weather{"city": "Paris", "days": 3, "unit": "c"}', ["[TOOL_CALLS]"]),
    "kimi_k2": ('<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>'
                '{"city": "Paris", "days": 3, "unit": "c"}<|tool_call_end|><|tool_calls_section_end|>',
                ["<|tool_calls_section_begin|>", "<|tool_call_begin|>", "<|tool_call_argument_begin|>",
                 "<|tool_call_end|>", "<|tool_calls_section_end|>"]),
    "deepseek_v3": ('<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n'
                    '{"city": "Paris", "days": 3, "unit": "c"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
                    ["<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>",
                     "<｜tool▁calls▁end｜>"]),
    "deepseek_v31": ('<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris", "days": 3, '
                     '"unit": "c"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
                     ["<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>",
                      "<｜tool▁calls▁end｜>"]),
    "harmony": ('<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris", "days": 3, '
                '"unit": "c"}<|call|>', ["<|channel|>", "<|constrain|>", "<|message|>", "<|call|>", "<|end|>",
                                          "<|start|>"]),
}
_J = '{"name": "get_weather", "arguments": {"city": "Paris", "days": 3, "unit": "c"}}'
_NS = "]<]minimax[>["  # minimax_m3's tag marker (a non-special added token of its tokenizer)
_DSML = ('<｜DSML｜{0}>\n<｜DSML｜invoke name="get_weather">\n<｜DSML｜parameter name="city" string="true">Paris'
         '</｜DSML｜parameter>\n<｜DSML｜parameter name="days" string="false">3</｜DSML｜parameter>\n<｜DSML｜parameter '
         'name="unit" string="true">c</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜{0}>')
CALLS.update({
    "longcat": (f"<longcat_tool_call>\n{_J}\n</longcat_tool_call>", ["<longcat_tool_call>", "</longcat_tool_call>"]),
    "ernie45": (f"<tool_call>\n{_J}\n</tool_call>", ["<tool_call>", "</tool_call>"]),
    "internlm": ('<|action_start|><|plugin|>\n{"name": "get_weather", "parameters": {"city": "Paris", "days": 3, '
                 '"unit": "c"}}<|action_end|>', ["<|action_start|>", "<|plugin|>", "<|action_end|>"]),
    "jamba": (f"<tool_calls>[{_J}]</tool_calls>", ["<tool_calls>", "</tool_calls>"]),
    "hunyuan_a13b": (f"<tool_calls>[{_J}]</tool_calls>", ["<tool_calls>", "</tool_calls>"]),
    "minimax_m1": (f"<tool_calls>\n{_J}\n</tool_calls>", ["<tool_calls>", "</tool_calls>"]),
    "cohere_command": ('<|START_ACTION|>[{"tool_name": "get_weather", "parameters": {"city": "Paris", "days": 3, '
                       '"unit": "c"}}]<|END_ACTION|>', ["<|START_ACTION|>", "<|END_ACTION|>"]),
    "granite": (f"<|tool_call|>[{_J}]", ["<|tool_call|>"]),
    "phi4_mini_json": (f"functools[{_J}]", []),
    "seed_oss": ("<seed:tool_call>\n<function=get_weather>\n<parameter=city>Paris</parameter>\n<parameter=days>3"
                 "</parameter>\n<parameter=unit>c</parameter>\n</function>\n</seed:tool_call>",
                 ["<seed:tool_call>", "</seed:tool_call>"]),
    "deepseek_v32": (_DSML.format("function_calls"), ["<｜DSML｜function_calls>", "</｜DSML｜function_calls>"]),
    "deepseek_v4": (_DSML.format("tool_calls"), ["<｜DSML｜tool_calls>", "</｜DSML｜tool_calls>"]),
    "gigachat3": (f"<|function_call|>{_J}", ["<|function_call|>"]),
    "step3": ('<｜tool_calls_begin｜>\n<｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke name="get_weather">\n'
              '<steptml:parameter name="city">Paris</steptml:parameter>\n<steptml:parameter name="days">3</steptml:parameter>\n'
              '<steptml:parameter name="unit">c</steptml:parameter>\n</steptml:invoke><｜tool_call_end｜>\n<｜tool_calls_end｜>',
              ["<｜tool_calls_begin｜>", "<｜tool_call_begin｜>", "<｜tool_sep｜>", "<｜tool_call_end｜>", "<｜tool_calls_end｜>"]),
    "apertus": ('<|tools_prefix|>[{"get_weather": {"city": "Paris", "days": 3, "unit": "c"}}]<|tools_suffix|>',
                ["<|tools_prefix|>", "<|tools_suffix|>"]),
    "olmo3": ("<function_calls>get_weather(city='Paris', days=3, unit='c')</function_calls>", []),
    "xlam": (f"[{_J}]", []),
    "gemma4": ('<|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:3,unit:<|"|>c<|"|>}<tool_call|>',
               ["<|tool_call>", "<tool_call|>", '<|"|>']),
    "lfm2": ("<|tool_call_start|>[get_weather(city='Paris', days=3, unit='c')]<|tool_call_end|>",
             ["<|tool_call_start|>", "<|tool_call_end|>"]),
    "functiongemma": ("<start_function_call>call:get_weather{city:<escape>Paris<escape>,days:3,unit:<escape>c<escape>}"
                      "<end_function_call>", ["<start_function_call>", "<end_function_call>", "<escape>"]),
    "deepseek_v41": (_DSML.format("tool_calls").replace("｜DSML｜", "｜DSML｜ ").replace("tool_calls>", "calls>"),
                     ["<｜DSML｜ calls>", "</｜DSML｜ calls>"]),
    "mimo": ("<tool_call><function=get_weather><parameter=city>Paris</parameter><parameter=days>3</parameter>"
             "<parameter=unit>c</parameter></function></tool_call>", ["<tool_call>", "</tool_call>"]),
    "minimax_m3": (f'{_NS}<tool_call>\n{_NS}<invoke name="get_weather">{_NS}<city>Paris{_NS}</city>{_NS}<days>3{_NS}</days>'
                   f"{_NS}<unit>c{_NS}</unit>{_NS}</invoke>\n{_NS}</tool_call>", [_NS]),
    "kimi_k3": ('<|open|>tools<|sep|><|open|>call tool="get_weather" index="1"<|sep|><|open|>argument key="city" '
                'type="string"<|sep|>Paris<|close|>argument<|sep|><|open|>argument key="days" type="number"<|sep|>3'
                '<|close|>argument<|sep|><|open|>argument key="unit" type="string"<|sep|>c<|close|>argument<|sep|>'
                "<|close|>call<|sep|><|close|>tools<|sep|>", ["<|open|>", "<|close|>", "<|sep|>"]),
})


def test_every_grammar_format_has_a_case() -> None:
    assert set(CALLS) == set(FORMATS)


@functools.cache
def compiler(markers: tuple[str, ...]) -> tuple[GrammarCompiler, Tokenizer]:
    tok = build_tokenizer(512)
    tok.add_special_tokens([AddedToken(m, special=True, normalized=False) for m in markers])
    return GrammarCompiler(tok.to_str(), [tok.token_to_id("<|im_end|>")]), tok


def cases() -> list[tuple[str, bool]]:
    return [(fmt, as_tokens) for fmt in CALLS for as_tokens in (True, False) if as_tokens or fmt != "harmony"]


def violation(fmt: str, as_tokens: bool, params: dict, text: str, tools: list | None = TOOLS,
              plain: bool = False) -> str | None:
    markers = tuple(CALLS[fmt][1]) if as_tokens else ()
    comp, tok = compiler(markers)
    c = constraint_for(fmt, None, tools, params, constrain_plain=plain)
    return comp.violation(c, tok.encode(text, add_special_tokens=False).ids)


@pytest.mark.parametrize("fmt,as_tokens", cases())
def test_a_valid_call_is_accepted_and_parses_to_itself(fmt: str, as_tokens: bool) -> None:
    text = CALLS[fmt][0]
    for params in ({"tool_choice": "required"}, {}, {"tool_choice": {"name": "get_weather"}}):
        assert violation(fmt, as_tokens, params, text) is None, params
    turn = parse_text(fmt, text, tools=TOOLS)
    assert [(c.name, json.loads(c.arguments)) for c in turn.calls] == [("get_weather", ARGS)]
    jsonschema.validate(json.loads(turn.calls[0].arguments), SCHEMA)


@pytest.mark.parametrize("fmt,as_tokens", cases())
def test_an_unoffered_tool_is_refused(fmt: str, as_tokens: bool) -> None:
    text = CALLS[fmt][0].replace("get_weather", "book_table")
    assert violation(fmt, as_tokens, {"tool_choice": "required"}, text) is not None
    assert violation(fmt, as_tokens, {}, text) is not None  # auto: the call is held to the offered tools
    named = CALLS[fmt][0]
    assert violation(fmt, as_tokens, {"tool_choice": {"name": "get_time"}}, named) is not None


_BAD_DAYS = {"pythonic": ("days=3", "days='three'"), "qwen3_coder": (">\n3\n<", ">\nthree\n<"),
             "minimax_m2": (">3<", ">three<"), "glm45": (">3<", ">three<"), "seed_oss": (">3<", ">three<"),
             "deepseek_v32": (">3<", ">three<"), "deepseek_v4": (">3<", ">three<"), "step3": (">3<", ">three<"), "olmo3": ("days=3", "days='three'"), "lfm2": ("days=3", "days='three'"),
             "functiongemma": ("days:3", "days:<escape>three<escape>"),
             "deepseek_v41": (">3<", ">three<"), "mimo": (">3<", ">three<"),
             "minimax_m3": ("<days>3", "<days>three"), "kimi_k3": ("<|sep|>3", "<|sep|>three"),
             "gemma4": ("days:3", 'days:<|"|>three<|"|>')}


@pytest.mark.parametrize("fmt,as_tokens", cases())
def test_arguments_that_break_the_schema_are_refused(fmt: str, as_tokens: bool) -> None:
    old, new = _BAD_DAYS.get(fmt, ('"days": 3', '"days": "three"'))  # an integer written as a word
    bad = CALLS[fmt][0].replace(old, new)
    assert bad != CALLS[fmt][0]
    assert violation(fmt, as_tokens, {"tool_choice": "required"}, bad) is not None
    assert violation(fmt, as_tokens, {}, "I will look. " + bad) is not None  # auto holds the arguments too


@pytest.mark.parametrize("fmt,as_tokens", cases())
def test_without_tools_no_call_can_begin(fmt: str, as_tokens: bool) -> None:
    """With tools and ``tool_choice: none`` no call can begin; without tools nothing is constrained by
    default (the parser returns the text as content), and ``grammar_plain=on`` forbids calls there too."""
    text = "Sure, let me check. " + CALLS[fmt][0]
    assert constraint_for(fmt, None, [], {}) is None
    assert violation(fmt, as_tokens, {}, text, tools=[], plain=True) is not None
    assert violation(fmt, as_tokens, {"tool_choice": "none"}, text) is not None
    if fmt != "harmony":  # harmony's plain answer is a final-channel message
        assert violation(fmt, as_tokens, {}, "Sure, the sea is wide [1, 2] {\"a\": 1}.", tools=[], plain=True) is None


@pytest.mark.parametrize("fmt,as_tokens", [c for c in cases() if c[0] != "harmony"])
def test_auto_lets_text_come_before_and_after_a_call(fmt: str, as_tokens: bool) -> None:
    text = "Let me check [1, 2]. " + CALLS[fmt][0]
    assert violation(fmt, as_tokens, {}, text) is None
    assert parse_text(fmt, text, tools=TOOLS).calls[0].name == "get_weather"
    assert violation(fmt, as_tokens, {"tool_choice": "required"}, text) is not None  # required: calls only


def test_required_constraint_shape() -> None:
    c = constraint_for("hermes", None, TOOLS, {"tool_choice": {"type": "function", "function": {"name": "get_time"}}})
    assert c.calls is Calls.REQUIRED and [t.name for t in c.tools] == ["get_time"]


@pytest.mark.parametrize("as_tokens", [True, False])
def test_a_reasoning_model_thinks_before_the_required_call(as_tokens: bool) -> None:
    markers = ("<tool_call>", "</tool_call>", "<think>", "</think>") if as_tokens else ()
    comp, tok = compiler(markers)
    call = CALLS["hermes"][0]

    def violation_of(reasoning: str, params: dict, text: str, tools: list = TOOLS) -> str | None:
        c = constraint_for("hermes", reasoning, tools, params, constrain_plain=not tools)  # grammar_plain=on
        return comp.violation(c, tok.encode(text, add_special_tokens=False).ids)

    thought = "<think>The user wants the weather; I call get_weather.</think>\n\n"
    assert violation_of("think", {"tool_choice": "required"}, thought + call) is None
    assert violation_of("think", {"tool_choice": "required"}, call) is None  # the span is optional
    assert violation_of("think", {"tool_choice": "required"}, thought + "It is sunny.") is not None
    assert violation_of("think_forced", {"tool_choice": "required"}, thought.removeprefix("<think>") + call) is None
    assert violation_of("think", {}, thought + "No call needed.", tools=[]) is None
    assert violation_of("think", {}, thought + call, tools=[]) is not None
    inside = "<think>Let me call " + call + " now.</think>\n"  # the parser would read that as a call
    assert violation_of("think", {"tool_choice": "none"}, inside + "Done.") is not None
    assert violation_of("think", {}, inside.replace("get_weather", "book_table") + call) is not None


@pytest.mark.parametrize("as_tokens", [True, False])
def test_kimi_k3_content_sits_in_its_response_channel(as_tokens: bool) -> None:
    """K3 writes its answer inside ``<|open|>response<|sep|>..<|close|>response<|sep|>`` (special tokens in its
    tokenizer): the grammar lets those wrappers around free text and a required call, never a call inside them."""
    comp, tok = compiler(tuple(CALLS["kimi_k3"][1]) if as_tokens else ())
    call = CALLS["kimi_k3"][0]

    def violation_of(reasoning: str | None, params: dict, text: str) -> str | None:
        c = constraint_for("kimi_k3", reasoning, TOOLS, params)
        return comp.violation(c, tok.encode(text, add_special_tokens=False).ids)

    answer = "<|open|>response<|sep|>Checking.<|close|>response<|sep|>"
    thought = "Weather, so get_weather.<|close|>think<|sep|>"
    assert violation_of(None, {}, answer + call + "<|close|>message<|sep|>") is None
    assert violation_of("think_forced", {"tool_choice": "required"},
                        thought + "<|open|>response<|sep|><|close|>response<|sep|>" + call) is None
    assert violation_of("think_forced", {}, thought + answer) is None
    assert violation_of(None, {"tool_choice": "none"}, answer + call) is not None
    turn = parse_text("kimi_k3", thought + answer + call + "<|close|>message<|sep|>", reasoning="think_forced")
    assert (turn.reasoning, turn.content, [c.name for c in turn.calls]) == ("Weather, so get_weather.", "Checking.",
                                                                             ["get_weather"])


@pytest.mark.parametrize("as_tokens", [True, False])
def test_kimi_k3_types_each_argument_in_its_open_tag(as_tokens: bool) -> None:
    """One alternative per type a parameter's schema allows; the type attribute must be that value's."""
    comp, tok = compiler(tuple(CALLS["kimi_k3"][1]) if as_tokens else ())
    tools = [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"n": {"type": ["integer", "null"]}}, "required": ["n"]}}}]
    c = constraint_for("kimi_k3", None, tools, {"tool_choice": "required"})

    def call(kind: str, value: str) -> list[int]:
        return tok.encode('<|open|>tools<|sep|><|open|>call tool="f" index="1"<|sep|><|open|>argument key="n" '
                          f'type="{kind}"<|sep|>{value}<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|>',
                          add_special_tokens=False).ids

    assert comp.violation(c, call("number", "3")) is None
    assert comp.violation(c, call("null", "null")) is None
    assert comp.violation(c, call("string", "3")) is not None
    assert comp.violation(c, call("number", "null")) is not None


@pytest.mark.parametrize("as_tokens", [True, False])
def test_minimax_m3_writes_an_object_parameter_as_json_in_its_element(as_tokens: bool) -> None:
    comp, tok = compiler(tuple(CALLS["minimax_m3"][1]) if as_tokens else ())
    tools = [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"opts": {"type": "object", "properties": {"a": {"type": "integer"}}},
                                         "q": {"type": "string"}}, "required": ["opts"]}}}]
    c = constraint_for("minimax_m3", None, tools, {"tool_choice": "required"})
    text = (f'{_NS}<tool_call>\n{_NS}<invoke name="f">{_NS}<opts>{{"a": 1}}{_NS}</opts>{_NS}<q>x < y{_NS}</q>'
            f"{_NS}</invoke>\n{_NS}</tool_call>")
    assert comp.violation(c, tok.encode(text, add_special_tokens=False).ids) is None
    assert comp.violation(c, tok.encode(text.replace('{"a": 1}', '{"a": "one"}'), add_special_tokens=False).ids)
    turn = parse_text("minimax_m3", text, tools=tools)
    assert [(c.name, json.loads(c.arguments)) for c in turn.calls] == [("f", {"opts": {"a": 1}, "q": "x < y"})]
_GEMMA_SCHEMA = {"type": "object", "properties": {
    "q": {"type": "string"}, "n": {"type": "number"}, "tags": {"type": "array", "items": {"type": "string"}},
    "opts": {"type": "object", "properties": {"deep": {"type": "boolean"}, "mode": {"enum": ["a", 2]}}, "required": ["deep"]},
    "any": {}, "maybe": {"type": ["integer", "null"]}, "odd key": {"type": "string"}}, "required": ["q"]}
_GEMMA_TOOLS = [{"type": "function", "function": {"name": "find", "parameters": _GEMMA_SCHEMA}}]


@pytest.mark.parametrize("as_tokens", [True, False])
def test_gemma4_arguments_are_typed_by_the_schema(as_tokens: bool) -> None:
    """Gemma 4 writes its own argument syntax: the grammar types each value by the schema, at any depth,
    and what it accepts the parser reads back as the same JSON."""
    comp, tok = compiler(tuple(CALLS["gemma4"][1]) if as_tokens else ())
    c = constraint_for("gemma4", None, _GEMMA_TOOLS, {"tool_choice": "required"})

    def violation_of(args: str) -> str | None:
        return comp.violation(c, tok.encode(f"<|tool_call>call:find{args}<tool_call|>", add_special_tokens=False).ids)

    ok = ('{q:<|"|>a "b" {c}<|"|>,n:-1.5e3,tags:[<|"|>x<|"|>,<|"|><|"|>],opts:{deep:true,mode:2},'
          'any:{k:[null,{<|"|>x y<|"|>:false}]},maybe:null,<|"|>odd key<|"|>:<|"|>v<|"|>}')
    assert violation_of(ok) is None
    turn = parse_text("gemma4", f"<|tool_call>call:find{ok}<tool_call|>")
    assert json.loads(turn.calls[0].arguments) == {
        "q": 'a "b" {c}', "n": -1.5e3, "tags": ["x", ""], "opts": {"deep": True, "mode": 2},
        "any": {"k": [None, {"x y": False}]}, "maybe": None, "odd key": "v"}
    assert violation_of('{q:<|"|>a<|"|>,maybe:7}') is None  # optional properties may be left out
    for bad in ('{n:1}', '{q:<|"|>a<|"|>,n:<|"|>1<|"|>}', '{q:<|"|>a<|"|>,opts:{mode:2}}', '{q:<|"|>a<|"|>,tags:[1]}',
                '{q:<|"|>a<|"|>,opts:{deep:yes}}', '{q:<|"|>a<|"|>,extra:1}', '{q:"a"}', '{q: <|"|>a<|"|>}'):
        assert violation_of(bad) is not None, bad


# A family that reasons in a span of its own: its span tokens, a turn reasoning there, and the reasoning read back.
OWN_SPAN = {
    "seed_oss": (("<seed:think>", "</seed:think>"), "<seed:think>Weather, so get_weather.</seed:think>\n",
                 "Weather, so get_weather."),
    "gemma4": (("<|channel>", "<channel|>"), "<|channel>thought\nWeather, so get_weather.<channel|>",
               "\nWeather, so get_weather."),
}


@pytest.mark.parametrize("fmt", OWN_SPAN)
@pytest.mark.parametrize("as_tokens", [True, False])
def test_a_family_reasons_in_its_own_span(fmt: str, as_tokens: bool) -> None:
    """Seed-OSS thinks in ``<seed:think>``, Gemma 4 in ``<|channel>thought ... <channel|>``: the grammar's span
    is the parser's, and ``<think>`` is not it."""
    span_tokens, thought, reasoning = OWN_SPAN[fmt]
    markers = tuple(CALLS[fmt][1]) + (span_tokens if as_tokens else ())
    comp, tok = compiler(markers)
    call = CALLS[fmt][0]
    c = constraint_for(fmt, "think", TOOLS, {"tool_choice": "required"})
    ok = thought + call
    assert comp.violation(c, tok.encode(ok, add_special_tokens=False).ids) is None
    wrong = "<think>Weather.</think>\n" + call
    assert comp.violation(c, tok.encode(wrong, add_special_tokens=False).ids) is not None
    turn = parse_text(fmt, ok, tools=TOOLS, reasoning="think")
    assert turn.reasoning == reasoning and [c.name for c in turn.calls] == ["get_weather"]
