"""Conformance cases of the families added to the first 11 (shapes from vLLM's and SGLang's parser
tests and the models' templates), each under every chunking; plus each family's own rules."""

from __future__ import annotations

import pytest
from parser_harness import Case, check_case

from schemas.events import ToolCallArgs
from workers.parser import collect, make_parser, parse_text

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
    "city": {"type": "string"}, "days": {"type": "integer"}, "opts": {"type": "object"}}}}}]
T = {"tools": TOOLS}
W = ("get_weather", {"city": "Paris", "days": 3})
J = '{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}'


def _dsml(block: str, params: str) -> str:
    return f'<｜DSML｜{block}>\n<｜DSML｜invoke name="get_weather">\n{params}</｜DSML｜invoke>\n</｜DSML｜{block}>'


_P = ('<｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>\n'
      '<｜DSML｜parameter name="days" string="false">3</｜DSML｜parameter>\n')
_P41 = _P.replace("｜DSML｜", "｜DSML｜ ")  # DeepSeek-V4.1: a space after the DSML token in every tag

NS = "]<]minimax[>["  # minimax_m3's tag marker
ORDER = [{"type": "function", "function": {"name": "create_order", "parameters": {"type": "object", "properties": {
    "user_id": {"type": "integer"}, "note": {"type": "string"}, "meta": {"type": "object"},
    "tags": {"type": "array", "items": {"type": "string"}},
    "items": {"type": "array", "items": {"type": "object", "properties": {"sku": {"type": "string"},
                                                                        "qty": {"type": "integer"}}}}}}}}]


def _m3(body: str, name: str = '"create_order"') -> str:
    return f"{NS}<tool_call>\n{NS}<invoke name={name}>{body}{NS}</invoke>\n{NS}</tool_call>"


def _el(key: str, value: str) -> str:
    return f"{NS}<{key}>{value}{NS}</{key}>"


def _k3(*calls: str) -> str:
    return "<|open|>tools<|sep|>" + "".join(calls) + "<|close|>tools<|sep|>"


def _k3_call(name: str, *args: tuple[str, str, str]) -> str:
    body = "".join(f'<|open|>argument key="{k}" type="{t}"<|sep|>{v}<|close|>argument<|sep|>' for k, t, v in args)
    return f'<|open|>call tool="{name}" index="1"<|sep|>{body}<|close|>call<|sep|>'


CASES: dict[str, list[Case]] = {
    "longcat": [
        Case("basic", f"Let me check.<longcat_tool_call>{J}</longcat_tool_call>", content="Let me check.", calls=[W]),
        Case("two", f"<longcat_tool_call>\n{J}\n</longcat_tool_call>\n<longcat_tool_call>{{\"name\": \"now\", "
             '"arguments": {}}</longcat_tool_call>', content="\n", calls=[W, ("now", {})]),
        Case("invalid", '<longcat_tool_call>{"name": "f", "arguments": {"a": }}</longcat_tool_call>ok', content="ok",
             invalid=[("f", False)]),
        Case("truncated", '<longcat_tool_call>{"name": "f", "arguments": {"a": "x', invalid=[("f", True)]),
    ],
    "ernie45": [
        Case("think_then_call", f"<think>user wants weather</think>\n\n<tool_call>\n{J}\n</tool_call>\n",
             reasoning="user wants weather", content="\n\n\n", calls=[W], kw={"reasoning": "think"}),
        Case("marker_in_string", '<tool_call>{"name": "f", "arguments": {"s": "</tool_call>"}}</tool_call>',
             calls=[("f", {"s": "</tool_call>"})]),
        Case("truncated", '<tool_call>\n{"name": "f"', invalid=[("f", True)]),
    ],
    "internlm": [
        Case("basic", 'I will search.<|action_start|><|plugin|>\n{"name": "search", "parameters": {"query": "x"}}'
             "<|action_end|>", content="I will search.", calls=[("search", {"query": "x"})]),
        Case("arguments_key", '<|action_start|><|plugin|>{"name": "f", "arguments": {"a": 1}}<|action_end|>',
             calls=[("f", {"a": 1})]),
        Case("interpreter_is_text", "<|action_start|><|interpreter|>print(1)<|action_end|>",
             content="<|action_start|><|interpreter|>print(1)"),  # a stray close marker is dropped, as in hermes
        Case("invalid", '<|action_start|><|plugin|>{"name": "f" "parameters": {}}<|action_end|>x', content="x",
             invalid=[("f", False)]),
    ],
    "jamba": [
        Case("parallel", f'Sure. <tool_calls>[{J}, {{"name": "now", "arguments": {{}}}}]</tool_calls>',
             content="Sure. ", calls=[W, ("now", {})]),
        Case("spaced", f"<tool_calls>\n[\n  {J}\n]\n</tool_calls>", calls=[W]),
        Case("empty_list", "<tool_calls>[]</tool_calls>done", content="done"),
        Case("one_bad_of_two", '<tool_calls>[{"name": "f", "arguments": {"a": 1,}}, {"name": "g", "arguments": {}}]'
             "</tool_calls>", calls=[("g", {})], invalid=[("f", False)]),
        Case("not_a_list", "<tool_calls>oops</tool_calls> after", content=" after", invalid=[("", False)]),
        Case("truncated", '<tool_calls>[{"name": "f", "arguments": {"a": [1', invalid=[("f", True)]),
    ],
    "hunyuan_a13b": [
        Case("think_answer", f"<think>need weather</think>\n<tool_calls>[{J}]</tool_calls>", reasoning="need weather",
             content="\n", calls=[W], kw={"reasoning": "think"}),
    ],
    "minimax_m1": [
        Case("lines", f'<tool_calls>\n{J}\n{{"name": "now", "arguments": {{}}}}\n</tool_calls>', calls=[W, ("now", {})]),
        Case("one_line", f"x<tool_calls>{J}</tool_calls>y", content="xy", calls=[W]),
        Case("invalid", '<tool_calls>\n{"name": "f", "arguments": nope}\n</tool_calls>z', content="z",
             invalid=[("f", False)]),
        Case("stray_text", f"<tool_calls>\n{J}\nthen text", calls=[W], invalid=[("", True)]),  # skipped to a close never seen
    ],
    "cohere_command": [
        Case("action", '<|START_THINKING|>I will look it up.<|END_THINKING|><|START_ACTION|>[\n    {"tool_call_id": "0", '
             '"tool_name": "get_weather", "parameters": {"city": "Paris", "days": 3}}\n]<|END_ACTION|>',
             content="<|START_THINKING|>I will look it up.<|END_THINKING|>", calls=[W]),
        Case("two", '<|START_ACTION|>[{"tool_call_id": "0", "tool_name": "a", "parameters": {}}, {"tool_call_id": "1", '
             '"tool_name": "b", "parameters": {"x": [1]}}]<|END_ACTION|>', calls=[("a", {}), ("b", {"x": [1]})]),
        Case("truncated", '<|START_ACTION|>[{"tool_call_id": "0", "tool_name": "a", "parameters": {"q": "', invalid=[("a", True)]),
    ],
    "granite": [
        Case("basic", f"<|tool_call|>[{J}]", calls=[W]),
        Case("parallel_then_text", f'<|tool_call|>[{J}, {{"name": "now", "arguments": {{}}}}] ok',
             content=" ok", calls=[W, ("now", {})]),
        Case("invalid", '<|tool_call|>[{"name": "f", "arguments": {"a": 1}]', content="]", invalid=[("f", False)]),
        # one bare object per marker, as vLLM's Granite 3.0 template writes a past call (a model may copy it)
        Case("bare_objects", f'<|tool_call|> {J}\n<|tool_call|> {{"name": "now", "arguments": {{}}}} ok',
             content="\n ok", calls=[W, ("now", {})]),
        Case("thinking_response", "<think>user wants weather</think><response>Checking.</response>",
             reasoning="user wants weather", content="Checking.", kw={"reasoning": "think"}),
    ],
    "phi4_mini_json": [
        Case("basic", f"functools[{J}]", calls=[W]),
        Case("word_in_prose", "Python's functools module is useful.", content="Python's functools module is useful."),
        Case("truncated", 'functools[{"name": "f", "arguments": {', invalid=[("f", True)]),
    ],
    "seed_oss": [
        Case("think_and_call", "<seed:think>The user wants weather.</seed:think>Checking.\n<seed:tool_call>\n"
             "<function=get_weather>\n<parameter=city>Barcelona, Spain</parameter>\n<parameter=days>2</parameter>\n"
             "</function>\n</seed:tool_call>", reasoning="The user wants weather.", content="Checking.\n",
             calls=[("get_weather", {"city": "Barcelona, Spain", "days": 2})], kw={**T, "reasoning": "think"}),
        Case("multiline_value", "<seed:tool_call>\n<function=get_weather>\n<parameter=city>\nNew\nYork\n</parameter>\n"
             "</function>\n</seed:tool_call>", calls=[("get_weather", {"city": "New\nYork"})], kw=T),
        Case("truncated", "<seed:tool_call>\n<function=get_weather>\n<parameter=city>Par", invalid=[("get_weather", True)], kw=T),
    ],
    "deepseek_v32": [
        Case("typed", "Let me check." + _dsml("function_calls", _P + '<｜DSML｜parameter name="opts" string="false">'
             '{"unit": "c"}</｜DSML｜parameter>\n'), content="Let me check.",
             calls=[("get_weather", {"city": "Paris", "days": 3, "opts": {"unit": "c"}})], kw=T),
        Case("two_invokes", '<｜DSML｜function_calls>\n<｜DSML｜invoke name="a">\n</｜DSML｜invoke>\n<｜DSML｜invoke name="b">\n'
             '<｜DSML｜parameter name="x" string="true">1 < 2</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜function_calls>',
             calls=[("a", {}), ("b", {"x": "1 < 2"})]),
        Case("truncated", _dsml("function_calls", _P)[:60], invalid=[("get_weather", True)], kw=T),
    ],
    "deepseek_v4": [
        Case("basic", _dsml("tool_calls", _P), calls=[W], kw=T),
    ],
    "gigachat3": [
        Case("v3", 'Sure.<|message_sep|>\n\nfunction call<|role_sep|>\n' + J + "</s>", content="Sure.\n\n", calls=[W]),
        Case("v31", "<|function_call|>" + J, calls=[W]),
        Case("invalid", '<|function_call|>{"name": "f", "arguments": {"a": tru}} after', content=" after",
             invalid=[("f", False)]),
        Case("truncated", '<|function_call|>{"name": "f", "arguments": {"a": "', invalid=[("f", True)]),
    ],
    "step3": [
        Case("two", 'ok<｜tool_calls_begin｜>\n<｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke name="get_weather">\n'
             '<steptml:parameter name="city">Paris</steptml:parameter>\n<steptml:parameter name="days">3</steptml:parameter>\n'
             '</steptml:invoke><｜tool_call_end｜>\n<｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke name="get_weather">'
             '<steptml:parameter name="city">if a < b</steptml:parameter></steptml:invoke><｜tool_call_end｜>\n<｜tool_calls_end｜>',
             content="ok", calls=[W, ("get_weather", {"city": "if a < b"})], kw=T),
        Case("truncated", '<｜tool_calls_begin｜><｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke name="get_weather">'
             '<steptml:parameter name="city">Par', invalid=[("get_weather", True)], kw=T),
    ],
    "apertus": [
        Case("think_and_calls", '<|inner_prefix|>Need weather.<|inner_suffix|>Sure.<|tools_prefix|>[{"get_weather": '
             '{"city": "Paris", "days": 3}}, {"now": {}}]<|tools_suffix|>', reasoning="Need weather.", content="Sure.",
             calls=[W, ("now", {})], kw={"reasoning": "think"}),
        Case("name_key_in_args", '<|tools_prefix|>[{"f": {"name": "x", "arguments": 1}}]<|tools_suffix|>',
             calls=[("f", {"name": "x", "arguments": 1})]),
        Case("two_names", '<|tools_prefix|>[{"a": {}, "b": {}}]<|tools_suffix|>ok', content="ok", invalid=[("a", False)]),
        Case("no_name", "<|tools_prefix|>[{}]<|tools_suffix|>", invalid=[("", False)]),
        Case("truncated", '<|tools_prefix|>[{"f": {"q": "', invalid=[("f", True)]),
    ],
    "olmo3": [
        Case("lines", "Checking.<function_calls>get_weather(city='Paris', days=3)\nnow()</function_calls> Done.",
             content="Checking. Done.", calls=[W, ("now", {})]),
        Case("padded", "<function_calls>\n  get_weather(city='Paris', days=3)\n\n</function_calls>", calls=[W]),
        Case("one_bad_line", "<function_calls>f(1)\ng(x=None)</function_calls>", calls=[("g", {"x": None})],
             invalid=[("f", False)]),
        Case("truncated", "<function_calls>get_weather(city='Par", invalid=[("get_weather", True)]),
    ],
    "xlam": [
        Case("list", f'Here: [{J}, {{"name": "now", "arguments": {{}}}}] done', content="Here:  done", calls=[W, ("now", {})]),
        Case("prose_brackets", 'See [1, 2], [{"a": 1}] and [ {"b"', content='See [1, 2], [{"a": 1}] and [ {"b"'),
        Case("invalid", '[{"name": "f", "arguments": {"a": 1}]', content="]", invalid=[("f", False)]),
        Case("truncated", '[{"name": "f", "arguments": {"a": "', invalid=[("f", True)]),
    ],
    "lfm2": [
        Case("tagged", "Sure.<|tool_call_start|>[get_weather(city='Paris', days=3)]<|tool_call_end|>Done.",
             content="Sure.Done.", calls=[W]),
        Case("two", "<|tool_call_start|>[a(), b(x=[1, 2])]<|tool_call_end|>", calls=[("a", {}), ("b", {"x": [1, 2]})]),
        Case("positional", "<|tool_call_start|>[f(1)]<|tool_call_end|>", invalid=[("f", False)]),
    ],
    "functiongemma": [
        Case("basic", "Sure.<start_function_call>call:get_weather{city:<escape>Paris<escape>,days:3}<end_function_call>"
             "<start_function_response>", content="Sure.", calls=[W]),
        Case("parallel", "<start_function_call>call:get_weather{city:<escape>Paris<escape>,days:3}<end_function_call>"
             "<start_function_call>call:now{}<end_function_call>", calls=[W, ("now", {})]),
        Case("nested", "<start_function_call>call:get_weather{opts:{units:[<escape>c<escape>, <escape>f<escape>],"
             "<escape>a, b<escape>:{x:null,y:[true,-1.5e3]}}}<end_function_call>",
             calls=[("get_weather", {"opts": {"units": ["c", "f"], "a, b": {"x": None, "y": [True, -1.5e3]}}})]),
        Case("markers_in_string", "<start_function_call>call:get_weather{city:<escape>}<end_function_call>{a:1,<escape>}"
             "<end_function_call>", calls=[("get_weather", {"city": "}<end_function_call>{a:1,"})]),
        Case("typed_by_schema", "<start_function_call>call:get_weather{city:75001,days:<escape>3<escape>}<end_function_call>",
             calls=[("get_weather", {"city": "75001", "days": 3})], exact_args=['{"city": "75001", "days": 3}'], kw=T),
        Case("unknown_tool_bare_word", "<start_function_call>call:book_table{party:4,when:tonight}<end_function_call>",
             calls=[("book_table", {"party": 4, "when": "tonight"})]),
        Case("trailing_comma", "<start_function_call>call:f{a:1,}<end_function_call>ok", content="ok",
             invalid=[("f", False)]),
        Case("no_head", "<start_function_call>get_weather{}<end_function_call>ok", content="ok", invalid=[("", False)]),
        Case("no_close", "<start_function_call>call:f{a:1}<start_function_response>", invalid=[("f", True)]),
        Case("think_then_call", "<think>weather</think><start_function_call>call:now{}<end_function_call>",
             reasoning="weather", calls=[("now", {})], kw={"reasoning": "think"}),
        Case("truncated", "<start_function_call>call:get_weather{city:<escape>Par", invalid=[("get_weather", True)]),
    ],
    "deepseek_v41": [
        Case("think_then_two", "<think>weather</think>Sure.\n\n" + _dsml(" calls", _P41 + "</｜DSML｜ invoke>\n"
             '<｜DSML｜ invoke name="now">\n\n').replace("｜DSML｜invoke", "｜DSML｜ invoke"), reasoning="weather",
             content="Sure.\n\n", calls=[W, ("now", {})], kw={**T, "reasoning": "think"}),
        Case("no_string_flag", '<｜DSML｜ calls><｜DSML｜ invoke name="get_weather"><｜DSML｜ parameter name="days">3'
             "</｜DSML｜ parameter></｜DSML｜ invoke></｜DSML｜ calls>", calls=[("get_weather", {"days": 3})], kw=T),
        Case("v4_markup_is_text", _dsml("tool_calls", _P), content=_dsml("tool_calls", _P), kw=T),
        Case("junk", '<｜DSML｜ calls>\n<｜DSML｜ invoke name="f">\njunk</｜DSML｜ invoke>\n</｜DSML｜ calls>ok', content="ok",
             invalid=[("f", False)]),
        Case("truncated", '<｜DSML｜ calls>\n<｜DSML｜ invoke name="get_weather">\n<｜DSML｜ parameter name="city" string="true">Par',
             invalid=[("get_weather", True)], kw=T),
    ],
    "mimo": [
        Case("compact", "Checking.<tool_call><function=get_weather><parameter=city>Paris</parameter><parameter=days>3"
             "</parameter></function></tool_call>", content="Checking.", calls=[W], kw=T),
        Case("verbatim_newlines", "<tool_call><function=get_weather><parameter=city>\nParis\n\n</parameter></function>"
             "</tool_call>", calls=[("get_weather", {"city": "\nParis\n\n"})], kw=T),
        Case("think_then_call", "<think>need weather</think><tool_call><function=get_weather><parameter=days>3</parameter>"
             "</function></tool_call>", reasoning="need weather", calls=[("get_weather", {"days": 3})],
             kw={**T, "reasoning": "think"}),
        Case("junk", "<tool_call><function=f>junk</function></tool_call>ok", content="ok", invalid=[("f", False)]),
        Case("truncated", "<tool_call><function=get_weather><parameter=city>Par", invalid=[("get_weather", True)], kw=T),
    ],
    "minimax_m3": [
        # the shape of vLLM's minimax_m3 docstring: elements named after arguments, nested, typed by the schema
        Case("nested", "I will order." + _m3(_el("user_id", "42") + "\n" + _el("items", _el("item", _el("sku", "book-001")
             + _el("qty", "2"))) + _el("tags", _el("item", "a") + _el("item", "b")) + _el("note", "a < b & </x>\n")) + "Done.",
             content="I will order.Done.", calls=[("create_order", {"user_id": 42, "items": [{"sku": "book-001", "qty": 2}],
                                                                    "tags": ["a", "b"], "note": "a < b & </x>\n"})],
             exact_args=['{"user_id": 42, "items": [{"sku": "book-001", "qty": 2}], "tags": ["a", "b"], '
                         '"note": "a < b & </x>\\n"}'], kw={"tools": ORDER}),
        Case("array_names_free", _m3(_el("tags", _el("t", "x") + _el("t", "y"))), calls=[("create_order", {"tags": ["x", "y"]})],
             kw={"tools": ORDER}),
        Case("repeated_child_is_a_list", _m3(_el("meta", _el("k", "1") + _el("k", "2") + _el("j", "z"))),
             calls=[("create_order", {"meta": {"k": [1, 2], "j": "z"}})], kw={"tools": ORDER}),
        Case("empty_containers", _m3(_el("items", "") + _el("meta", "") + _el("note", "")),
             calls=[("create_order", {"items": [], "meta": {}, "note": ""})], kw={"tools": ORDER}),
        Case("json_in_element", _m3(_el("items", '[{"sku": "s", "qty": 1}]')),
             calls=[("create_order", {"items": [{"sku": "s", "qty": 1}]})], kw={"tools": ORDER}),
        Case("two_invokes_quotes", f"{NS}<tool_call>\n{NS}<invoke name='get_weather'>{_el('city', 'Paris')}"
             f"{_el('days', '3')}{NS}</invoke>\n{NS}<invoke name=now>{NS}</invoke>\n{NS}</tool_call>",
             calls=[W, ("now", {})], kw=T),
        Case("unknown_tool", _m3(_el("a", "1") + _el("b", _el("c", "x")), '"mystery"'), calls=[("mystery", {"a": 1, "b": {"c": "x"}})]),
        Case("think_closer_dropped", "</mm:think>Sure." + _m3(_el("user_id", "7")), content="Sure.",
             calls=[("create_order", {"user_id": 7})], kw={"tools": ORDER}),
        Case("think", "<mm:think>plan</mm:think>ok" + _m3(""), reasoning="plan", content="ok", calls=[("create_order", {})],
             kw={"reasoning": "think"}),
        Case("mismatched_close", _m3(_el("items", f"{NS}<item>{NS}<sku>s{NS}</item>")) + "after", content="after",
             invalid=[("create_order", False)], kw={"tools": ORDER}),
        Case("given_twice", _m3(_el("user_id", "1") + _el("user_id", "2")), invalid=[("create_order", False)], kw={"tools": ORDER}),
        Case("element_in_string", _m3(_el("note", _el("b", "x"))), invalid=[("create_order", False)], kw={"tools": ORDER}),
        Case("text_beside_children", _m3(_el("meta", "hi" + _el("k", "1"))), invalid=[("create_order", False)],
             kw={"tools": ORDER}),
        Case("not_an_invoke", f"{NS}<tool_call>hello{NS}</tool_call>after", content="after", invalid=[("", False)]),
        Case("text_between_params", _m3(_el("user_id", "1") + "oops" + _el("note", "x")), invalid=[("create_order", False)],
             kw={"tools": ORDER}),
        Case("unclosed_invoke_then_block_close", f"{NS}<tool_call>{NS}<invoke name=\"f\">{_el('a', '1')}{NS}</tool_call>x",
             content="x", invalid=[("f", False)]),
        Case("truncated", _m3(_el("note", "par"))[:-40], invalid=[("create_order", True)], kw={"tools": ORDER}),
    ],
    "kimi_k3": [
        # what the model writes after its think channel (vLLM's kimi_k3 parsers, llama.cpp's Kimi-K3 template)
        Case("channels", "weather, so call it<|close|>think<|sep|><|open|>response<|sep|>Checking.<|close|>response<|sep|>"
             + _k3(_k3_call("get_weather", ("city", "string", "Paris"), ("days", "number", "3")))
             + "<|close|>message<|sep|><|end_of_msg|>", reasoning="weather, so call it", content="Checking.", calls=[W],
             kw={"reasoning": "think_forced"}),
        Case("typed", _k3(_k3_call("f", ("s", "string", ' "raw"\n<b> '), ("n", "number", "1e2"), ("b", "boolean", "true"),
                                   ("z", "null", "null"), ("o", "object", '{"a": [1]}'), ("l", "array", "[]"))),
             calls=[("f", {"s": ' "raw"\n<b> ', "n": 100.0, "b": True, "z": None, "o": {"a": [1]}, "l": []})],
             exact_args=['{"s": " \\"raw\\"\\n<b> ", "n": 1e2, "b": true, "z": null, "o": {"a": [1]}, "l": []}']),
        Case("not_json_is_a_string", _k3(_k3_call("f", ("n", "number", "three"))), calls=[("f", {"n": "three"})]),
        Case("no_type_is_a_string", _k3('<|open|>call tool="f"<|sep|><|open|>argument key="n"<|sep|>3<|close|>argument<|sep|>'
                                        "<|close|>call<|sep|>"), calls=[("f", {"n": "3"})]),
        Case("escaped_attributes", _k3(_k3_call("a&amp;b", ("k&quot;1", "string", "v"))), calls=[("a&b", {'k"1': "v"})]),
        Case("two_calls_no_args", _k3(_k3_call("now"), _k3_call("get_weather", ("city", "string", "Paris"),
                                                                 ("days", "number", "3"))), calls=[("now", {}), W]),
        Case("json_block", _k3('<|open|>call tool="f" index="1"<|sep|><|open|>json type="object"<|sep|>{"a": {"b": 1}}'
                               "<|close|>json<|sep|><|close|>call<|sep|>"), calls=[("f", {"a": {"b": 1}})]),
        Case("json_block_not_an_object", _k3('<|open|>call tool="f"<|sep|><|open|>json type="object"<|sep|>[1]'
                                             "<|close|>json<|sep|><|close|>call<|sep|>"), invalid=[("f", False)]),
        Case("json_after_argument", _k3('<|open|>call tool="f"<|sep|><|open|>argument key="a" type="string"<|sep|>x'
                                        '<|close|>argument<|sep|><|open|>json type="object"<|sep|>{}<|close|>json<|sep|>'
                                        "<|close|>call<|sep|>") + "ok", content="ok", invalid=[("f", False)]),
        Case("no_tool_attribute", _k3('<|open|>call index="1"<|sep|><|close|>call<|sep|>'), invalid=[("", False)]),
        Case("text_in_call", _k3('<|open|>call tool="f"<|sep|>oops<|close|>call<|sep|>', _k3_call("now")),
             calls=[("now", {})], invalid=[("f", False)]),
        Case("no_key", _k3('<|open|>call tool="f"<|sep|><|open|>argument type="string"<|sep|>x<|close|>argument<|sep|>'
                           "<|close|>call<|sep|>"), invalid=[("f", False)]),
        Case("truncated", _k3(_k3_call("f", ("s", "string", "abc")))[:-45], invalid=[("f", True)]),
    ],
}
_G = '<|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:3}<tool_call|>'
_GEMMA_TYPES = ('{s:<|"|>a "q" \\ b\nc<|"|>,i:-42,f:1.5e-3,b:true,nb:false,z:null,'
                'o:{k:[1,<|"|>x<|"|>,{}],<|"|>a key: {odd}<|"|>:[]},l:[]}')
CASES["gemma4"] = [
    Case("basic", "Let me check." + _G, content="Let me check.", calls=[W], exact_args=['{"city": "Paris", "days": 3}']),
    Case("think_then_call", f"<|channel>thought\nuser wants weather<channel|>Sure.{_G}<|tool_response>",
         reasoning="\nuser wants weather", content="Sure.", calls=[W], kw={"reasoning": "think"}),
    Case("think_forced", f"weather, so get_weather<channel|>{_G}", reasoning="weather, so get_weather", calls=[W],
         kw={"reasoning": "think_forced"}),
    Case("between", f"A{_G}B<|tool_call>call:now{{}}<tool_call|>C", content="ABC", calls=[W, ("now", {})]),
    Case("types", f"<|tool_call>call:t{_GEMMA_TYPES}<tool_call|>",
         calls=[("t", {"s": 'a "q" \\ b\nc', "i": -42, "f": 1.5e-3, "b": True, "nb": False, "z": None,
                       "o": {"k": [1, "x", {}], "a key: {odd}": []}, "l": []})],
         exact_args=['{"s": "a \\"q\\" \\\\ b\\nc", "i": -42, "f": 1.5e-3, "b": true, "nb": false, "z": null, '
                     '"o": {"k": [1, "x", {}], "a key: {odd}": []}, "l": []}']),
    Case("markers_in_string", '<|tool_call>call:f{s:<|"|><tool_call|><|tool_call>call:x{}<channel|>}]<|"|>}<tool_call|>',
         calls=[("f", {"s": "<tool_call|><|tool_call>call:x{}<channel|>}]"})]),
    Case("spaced", '<|tool_call>\ncall: get_weather { city : <|"|>Paris<|"|> , days : 3 }\n<tool_call|>', content="\n",
         calls=[W]),
    Case("bare_key_with_space", "<|tool_call>call:f{New York:1}<tool_call|>", calls=[("f", {"New York": 1})]),
    Case("no_arguments", "<|tool_call>call:now<tool_call|>x", content="x", calls=[("now", {})]),
    Case("no_call_word", "<|tool_call>:now{}<tool_call|>", calls=[("now", {})]),  # vLLM reads it too
    Case("turn_ends_at_brace", _G.removesuffix("<tool_call|>"), calls=[W]),  # <turn|> (EOS) for <tool_call|>
    Case("bare_word", "<|tool_call>call:f{unit:celsius}<tool_call|>ok", content="ok",  # a string, as vLLM reads it
         calls=[("f", {"unit": "celsius"})]),
    Case("trailing_comma", "<|tool_call>call:f{a:1,}<tool_call|>ok", content="ok", invalid=[("f", False)]),
    Case("mismatched", "<|tool_call>call:f{a:[1}}<tool_call|>ok", content="ok", invalid=[("f", False)]),
    Case("json_string", '<|tool_call>call:f{a:"x"}<tool_call|>ok', content="ok", calls=[("f", {"a": "x"})]),
    Case("unclosed_object", "<|tool_call>call:f{a:1<tool_call|>ok", content="ok", invalid=[("f", False)]),
    Case("bad_header", "<|tool_call>get_weather{}<tool_call|>ok", content="ok", invalid=[("", False)]),
    Case("call_in_header", "<|tool_call>call:f<|tool_call>call:now{}<tool_call|>", calls=[("now", {})],
         invalid=[("", False)]),
    Case("truncated_string", '<|tool_call>call:f{a:<|"|>abc', invalid=[("f", True)]),
    Case("truncated_number", "<|tool_call>call:f{a:12", invalid=[("f", True)]),
    Case("truncated_header", "<|tool_call>call:get_wea", invalid=[("", True)]),
    Case("prose", 'a < b, <|"|> {x:1} and <|channel>thought', content='a < b, <|"|> {x:1} and <|channel>thought'),
]
ALL = [(fmt, c) for fmt, cases in CASES.items() for c in cases]


@pytest.mark.parametrize(("fmt", "case"), ALL, ids=[f"{f}-{c.id}" for f, c in ALL])
def test_family_case(fmt: str, case: Case) -> None:
    check_case(fmt, case)


def test_dsml_string_flag_is_not_part_of_the_key() -> None:
    turn = parse_text("deepseek_v32", _dsml("function_calls", _P))
    assert [c.arguments for c in turn.calls] == ['{"city": "Paris", "days": 3}']


def _args_so_far(events: list) -> str:
    return "".join(e.delta for e in events if isinstance(e, ToolCallArgs))


def test_minimax_m3_streams_a_string_parameter_and_writes_others_when_they_close() -> None:
    p = make_parser("minimax_m3", tools=ORDER)
    events = p.feed(f'{NS}<tool_call>\n{NS}<invoke name="create_order">{NS}<note>line one\n')
    events += p.feed(f"line two{NS}</note>{NS}<items>{NS}<item>{NS}<sku>s")
    assert _args_so_far(events) == '{"note": "line one\\nline two"'  # the array waits for its element to close
    events += p.feed(f"{NS}</sku>{NS}</item>{NS}</items>")
    assert _args_so_far(events) == '{"note": "line one\\nline two", "items": [{"sku": "s"}]'
    events += p.feed(f"{NS}</invoke>\n{NS}</tool_call>") + p.finish()
    assert collect(events).calls[0].arguments == '{"note": "line one\\nline two", "items": [{"sku": "s"}]}'


def test_kimi_k3_streams_a_string_argument() -> None:
    p = make_parser("kimi_k3")
    events = p.feed('<|open|>tools<|sep|><|open|>call tool="w" index="1"<|sep|><|open|>argument key="text" type="string"<|sep|>'
                    "part one <|")
    assert _args_so_far(events) == '{"text": "part one '  # "<|" may begin the close marker: held
    events += p.feed("x|> two<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|>") + p.finish()
    assert collect(events).calls[0].arguments == '{"text": "part one <|x|> two"}'
def test_gemma4_streams_string_values_as_json() -> None:
    p = make_parser("gemma4")
    events = p.feed('<|tool_call>call:w{zip:<|"|>line "one"\n')
    events += p.feed("line two<|")
    frags = "".join(e.delta for e in events if isinstance(e, ToolCallArgs))
    assert frags == '{"zip": "line \\"one\\"\\nline two'  # "<|" is held: it may open <|"|>
    events += p.feed('"|>,n:7}<tool_call|>') + p.finish()
    assert collect(events).calls[0].arguments == '{"zip": "line \\"one\\"\\nline two", "n": 7}'


def test_gemma4_names_why_a_call_is_invalid() -> None:
    turn = parse_text("gemma4", "<|tool_call>call:f{a:[1}}<tool_call|>")
    assert turn.invalid[0].error == "expected ',' or ']', got '}'"
    assert turn.invalid[0].raw == "<|tool_call>call:f{a:[1}}"
