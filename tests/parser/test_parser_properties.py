"""Property tests, every format: any chunking gives the same turn; generated calls come back exactly."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workers.parser import FORMATS, collect, make_parser, parse_text

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])

_text = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=10)
json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(10**30), max_value=10**30), _text,
    st.sampled_from(["<tool_call>", "</tool_call>", "}]", '"', "\\", "a < b", "é漢😀", "\n", "[TOOL_CALLS]", "<|call|>"]),
)
json_values = st.recursive(json_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(_text, inner, max_size=3)), max_leaves=6)
arguments = st.dictionaries(st.text(alphabet="abcxyz_", min_size=1, max_size=6), json_values, max_size=4)
names = st.from_regex(r"[a-z][a-z0-9_]{0,10}", fullmatch=True)
PROSE_ALPHABET = "ab <>{}[]/\n_:é;,()\"'=|"

Render = Callable[[int, str, dict[str, Any]], str]


def _j(v: Any) -> str:
    return json.dumps(v, ensure_ascii=False)


def _py(v: Any) -> str:
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_py(k)}: {_py(x)}" for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ", ".join(_py(x) for x in v) + "]"
    return repr(v)


def _function_gemma(v: Any, top: bool = False) -> str:
    """FunctionGemma's notation: strings between ``<escape>`` tokens, top-level keys bare, nested keys quoted."""
    if isinstance(v, dict):
        return "{" + ",".join(f"{k if top else _function_gemma(k)}:{_function_gemma(x)}" for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ",".join(_function_gemma(x) for x in v) + "]"
    return f"<escape>{v}<escape>" if isinstance(v, str) else _j(v)


def _gemma(v: Any) -> str:
    """Gemma 4's argument syntax, as its template's ``format_argument`` writes it; a key that would not
    read back bare is quoted as a string (as the template's ``escape_keys`` does)."""
    if isinstance(v, str):
        return f'<|"|>{v}<|"|>'
    if isinstance(v, dict):
        return "{" + ",".join(f"{k if re.fullmatch(r'[A-Za-z0-9_]+', k) else _gemma(k)}:{_gemma(x)}"
                              for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ",".join(_gemma(x) for x in v) + "]"
    return _j(v)


def _raw(v: Any) -> str:
    """A bare XML parameter value (typed back by the schema made in ``_tools``)."""
    return v if isinstance(v, str) else _j(v)


def _dsml(block: str, n: str, a: dict[str, Any]) -> str:
    params = "".join(f'<｜DSML｜parameter name="{k}" string="{str(isinstance(v, str)).lower()}">{_raw(v)}</｜DSML｜parameter>\n'
                     for k, v in a.items())
    return f'<｜DSML｜{block}>\n<｜DSML｜invoke name="{n}">\n{params}</｜DSML｜invoke>\n</｜DSML｜{block}>'


_NS = "]<]minimax[>["  # minimax_m3's tag marker


def _xtml_type(v: Any) -> str:
    """The ``type`` attribute Kimi K3's template writes for a value."""
    return {dict: "object", list: "array", str: "string", bool: "boolean", int: "number", float: "number",
            type(None): "null"}[type(v)]


def _xml_ok(v: Any) -> bool:
    return not isinstance(v, str) or "</" not in v


RENDER: dict[str, Render] = {
    "hermes": lambda i, n, a: f"<tool_call>\n{_j({'name': n, 'arguments': a})}\n</tool_call>",
    "llama3_json": lambda i, n, a: ("<|python_tag|>" if i == 0 else "; ") + _j({"name": n, "parameters": a}),
    "mistral": lambda i, n, a: f"[TOOL_CALLS]{n}{_j(a)}" if i % 2 else f"[TOOL_CALLS][{_j({'name': n, 'arguments': a})}]",
    "pythonic": lambda i, n, a: f"[{n}(" + ", ".join(f"{k}={_py(v)}" for k, v in a.items()) + ")]",
    "deepseek_v3": lambda i, n, a: ("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>"
                                    f"{n}\n```json\n{_j(a)}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"),
    "deepseek_v31": lambda i, n, a: ("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>"
                                     f"{n}<｜tool▁sep｜>{_j(a)}<｜tool▁call▁end｜><｜tool▁calls▁end｜>"),
    "kimi_k2": lambda i, n, a: ("<|tool_calls_section_begin|><|tool_call_begin|>"
                                f"functions.{n}:{i}<|tool_call_argument_begin|>{_j(a)}<|tool_call_end|><|tool_calls_section_end|>"),
    "qwen3_coder": lambda i, n, a: (f"<tool_call>\n<function={n}>\n" + "".join(
        f"<parameter={k}>\n{_raw(v)}\n</parameter>\n" for k, v in a.items()) + "</function>\n</tool_call>"),
    "minimax_m2": lambda i, n, a: (f'<minimax:tool_call>\n<invoke name="{n}">\n' + "".join(
        f'<parameter name="{k}">\n{_raw(v)}\n</parameter>\n' for k, v in a.items()) + "</invoke>\n</minimax:tool_call>"),
    "glm45": lambda i, n, a: (f"<tool_call>{n}\n" + "".join(
        f"<arg_key>{k}</arg_key>\n<arg_value>{_raw(v)}</arg_value>\n" for k, v in a.items()) + "</tool_call>"),
    "harmony": lambda i, n, a: (f"<|start|>assistant<|channel|>commentary to=functions.{n} <|constrain|>json"
                                f"<|message|>{_j(a)}<|call|>"),
    "longcat": lambda i, n, a: f"<longcat_tool_call>{_j({'name': n, 'arguments': a})}</longcat_tool_call>",
    "ernie45": lambda i, n, a: f"<tool_call>\n{_j({'name': n, 'arguments': a})}\n</tool_call>",
    "internlm": lambda i, n, a: f"<|action_start|><|plugin|>\n{_j({'name': n, 'parameters': a})}<|action_end|>",
    "jamba": lambda i, n, a: f"<tool_calls>[{_j({'name': n, 'arguments': a})}]</tool_calls>",
    "hunyuan_a13b": lambda i, n, a: f"<tool_calls>[\n  {_j({'name': n, 'arguments': a})}\n]</tool_calls>",
    "minimax_m1": lambda i, n, a: f"<tool_calls>\n{_j({'name': n, 'arguments': a})}\n</tool_calls>",
    "cohere_command": lambda i, n, a: f"<|START_ACTION|>[{_j({'tool_call_id': str(i), 'tool_name': n, 'parameters': a})}]<|END_ACTION|>",
    "granite": lambda i, n, a: f"<|tool_call|>[{_j({'name': n, 'arguments': a})}]",
    "phi4_mini_json": lambda i, n, a: f"functools[{_j({'name': n, 'arguments': a})}]",
    "seed_oss": lambda i, n, a: (f"<seed:tool_call>\n<function={n}>\n" + "".join(
        f"<parameter={k}>\n{_raw(v)}\n</parameter>\n" for k, v in a.items()) + "</function>\n</seed:tool_call>"),
    "deepseek_v32": lambda i, n, a: _dsml("function_calls", n, a),
    "deepseek_v4": lambda i, n, a: _dsml("tool_calls", n, a),
    "gigachat3": lambda i, n, a: ("function call<|role_sep|>\n" if i % 2 else "<|function_call|>")
                                 + _j({"name": n, "arguments": a}),
    "step3": lambda i, n, a: ('<｜tool_calls_begin｜>\n<｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke name="' + n + '">\n'
                              + "".join(f'<steptml:parameter name="{k}">{_raw(v)}</steptml:parameter>\n' for k, v in a.items())
                              + "</steptml:invoke><｜tool_call_end｜>\n<｜tool_calls_end｜>"),
    "apertus": lambda i, n, a: f"<|tools_prefix|>[{_j({n: a})}]<|tools_suffix|>",
    "olmo3": lambda i, n, a: "<function_calls>" + n + "(" + ", ".join(f"{k}={_py(v)}" for k, v in a.items()) + ")</function_calls>",
    "xlam": lambda i, n, a: f"[{_j({'name': n, 'arguments': a})}]",
    "gemma4": lambda i, n, a: f"<|tool_call>call:{n}{_gemma(a)}<tool_call|>",
    "lfm2": lambda i, n, a: "<|tool_call_start|>[" + n + "(" + ", ".join(f"{k}={_py(v)}" for k, v in a.items()) + ")]<|tool_call_end|>",
    "functiongemma": lambda i, n, a: f"<start_function_call>call:{n}{_function_gemma(a, top=True)}<end_function_call>",
    "deepseek_v41": lambda i, n, a: (f'<｜DSML｜ calls>\n<｜DSML｜ invoke name="{n}">\n' + "".join(
        f'<｜DSML｜ parameter name="{k}" string="{str(isinstance(v, str)).lower()}">{_raw(v)}</｜DSML｜ parameter>\n'
        for k, v in a.items()) + "</｜DSML｜ invoke>\n</｜DSML｜ calls>"),
    "mimo": lambda i, n, a: (f"<tool_call><function={n}>" + "".join(
        f"<parameter={k}>{_raw(v)}</parameter>" for k, v in a.items()) + "</function></tool_call>"),
    "minimax_m3": lambda i, n, a: (f'{_NS}<tool_call>\n{_NS}<invoke name="{n}">' + "".join(
        f"{_NS}<{k}>{_raw(v)}{_NS}</{k}>" for k, v in a.items()) + f"{_NS}</invoke>\n{_NS}</tool_call>"),
    "kimi_k3": lambda i, n, a: (f'<|open|>tools<|sep|><|open|>call tool="{n}" index="{i + 1}"<|sep|>' + "".join(
        f'<|open|>argument key="{k}" type="{_xtml_type(v)}"<|sep|>{_raw(v)}<|close|>argument<|sep|>' for k, v in a.items())
                                + "<|close|>call<|sep|><|close|>tools<|sep|>"),
}
XML = {"qwen3_coder", "minimax_m2", "glm45", "seed_oss", "deepseek_v32", "deepseek_v4", "step3", "deepseek_v41", "mimo",
       "minimax_m3"}
# Prose characters that would start or end markup in a format (prose is drawn without them).
PROSE_BANNED = {"llama3_json": "{;", "pythonic": "[", "harmony": "<", "qwen3_coder": "<", "minimax_m2": "<",
                "glm45": "<", "hermes": "<", "mistral": "[", "deepseek_v3": "", "deepseek_v31": "", "kimi_k2": "<",
                "longcat": "<", "ernie45": "<", "internlm": "<", "jamba": "<", "hunyuan_a13b": "<", "minimax_m1": "<",
                "cohere_command": "<", "granite": "<", "phi4_mini_json": "", "seed_oss": "<", "deepseek_v32": "",
                "deepseek_v4": "", "lfm2": "<[", "gigachat3": "<", "step3": "", "apertus": "<", "olmo3": "<[", "xlam": "[",
                "functiongemma": "",
                "deepseek_v41": "", "mimo": "<",
                "minimax_m3": "", "kimi_k3": "", "gemma4": "<"}


def _wrap_prose(fmt: str, text: str) -> str:
    if fmt == "harmony" and text:
        return f"<|start|>assistant<|channel|>final<|message|>{text}<|end|>"
    return text


def _type(v: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer", float: "number", type(None): "null"}[type(v)]


def _tools(calls: list[tuple[str, dict]]) -> list[dict]:
    return [{"type": "function", "function": {"name": n, "parameters": {"type": "object", "properties": {
        k: {"type": _type(v)} for k, v in a.items()}}}} for n, a in calls]


@st.composite
def turns(draw: st.DrawFn, fmt: str) -> tuple[str, str, list[tuple[str, dict]]]:
    """(text, expected content, expected calls) for ``fmt``: prose and calls interleaved."""
    banned = PROSE_BANNED[fmt]
    prose = st.text(alphabet="".join(c for c in PROSE_ALPHABET if c not in banned), max_size=12)
    args = arguments.filter(lambda a: all(_xml_ok(v) for v in a.values())) if fmt in XML else arguments
    text, content, calls = [], [], []
    for i in range(draw(st.integers(0, 3))):
        p = draw(prose) if fmt != "llama3_json" or i == 0 else ""
        name = f"{draw(names)}{i}"
        a = draw(args)
        text += [_wrap_prose(fmt, p), RENDER[fmt](i, name, a)]
        content.append(p)
        calls.append((name, a))
    tail = draw(prose.filter(lambda s: not s.startswith((" ", "\n"))) if fmt in ("llama3_json", "pythonic") else prose)
    return "".join(text) + _wrap_prose(fmt, tail), "".join(content) + tail, calls


def split(text: str, cuts: list[int]) -> list[str]:
    points = sorted({c % (len(text) + 1) for c in cuts} | {0, len(text)})
    return [text[a:b] for a, b in zip(points, points[1:])]


def stream(fmt: str, chunks: list[str], **kw: Any):
    p = make_parser(fmt, **kw)
    events = []
    for c in chunks:
        events += p.feed(c)
    return collect(events + p.finish())


@pytest.mark.parametrize("fmt", FORMATS)
@SETTINGS
@given(data=st.data(), cuts=st.lists(st.integers(0, 10**6), max_size=30))
def test_roundtrip_any_chunking(fmt: str, data: st.DataObject, cuts: list[int]) -> None:
    text, content, calls = data.draw(turns(fmt))
    kw = {"tools": _tools(calls)} if fmt in XML else {}
    turn = stream(fmt, split(text, cuts), **kw)
    assert turn == parse_text(fmt, text, **kw)
    assert not turn.invalid, turn.invalid
    assert [(c.name, json.loads(c.arguments)) for c in turn.calls] == calls
    assert turn.content == content


GARBAGE = {fmt: "".join(sorted(set(RENDER[fmt](0, "ab", {"k": [1, "x"]})))) + " \n\"\\" for fmt in RENDER}


@pytest.mark.parametrize("fmt", FORMATS)
@SETTINGS
@given(data=st.data(), cuts=st.lists(st.integers(0, 10**6), max_size=20))
def test_garbage_is_chunking_invariant(fmt: str, data: st.DataObject, cuts: list[int]) -> None:
    pieces = st.one_of(st.text(alphabet=GARBAGE[fmt], max_size=8),
                       st.sampled_from([RENDER[fmt](0, "f", {"a": 1}), "<think>", "</think>"]))
    text = "".join(data.draw(st.lists(pieces, max_size=8)))
    for reasoning in (None, "think", "think_forced"):
        assert stream(fmt, split(text, cuts), reasoning=reasoning) == parse_text(fmt, text, reasoning=reasoning)
