"""Each format's call syntax as grammar pieces (the same syntax ``workers/parser/formats`` reads).

A section of calls is::

    section_open  call_open(name) ARGS call_close  [joiner call_open(name) ARGS call_close ...]  section_close

Pieces are plain strings; the grammar builder (``lark.py``) writes a piece that is one of the
tokenizer's added tokens as that token and everything else as text.  ``ARGS`` is the
arguments' JSON (``%json`` of the tool's schema) or, for the XML-style formats, one element per
parameter (``params``: open, close, trim of the value).  ``opener_re`` matches the text that
makes the parser start a call (any name); free text never contains it, so a call cannot begin
outside the grammar's call rules.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

NAME = "\x00"  # stands for the tool's name in call_open
STRING_FLAG = "\x01"  # in Params.open: "true" for a string-typed parameter, else "false" (DSML)
XTML_TYPE = "\x02"  # in Params.open: the value's XTML type, string/number/boolean/null/object/array (kimi_k3)


@dataclass(frozen=True)
class Params:
    """XML-style parameters: ``open(key) value close`` each, values typed by the schema."""

    open: str  # with NAME standing for the parameter's key
    close: str  # NAME here too where the close tag names the key (minimax_m3)


@dataclass(frozen=True)
class Syntax:
    call_open: tuple[str, ...]
    call_close: tuple[str, ...]
    opener_re: str
    section_open: tuple[str, ...] = ()
    section_close: tuple[str, ...] = ()
    joiner: tuple[str, ...] = ()
    params: Params | None = None  # the XML-style parameter tags (args == "xml")
    args: str = "json"  # "json" | "xml" | "xtml" | "python" | "gemma" (see args.py)
    index: bool = False  # kimi_k2: a call index follows the name
    quote: str = ""  # args == "gemma": the token around every string
    index_end: tuple[str, ...] = ()  # what follows the index (default: kimi_k2's KIMI_INDEX_OPEN)
    content_marks: tuple[str, ...] = ()  # the format's content wrappers, allowed around free text (kimi_k3)


_DS_CALL, _DS_SEP, _DS_END = "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>"
_DS_RE = r"<｜tool▁calls?▁begin｜>"
_KIMI_RE = r"<\|tool_calls?_section_begin\|>|<\|tool_call_begin\|>"

SYNTAX: dict[str, Syntax] = {
    "hermes": Syntax(("<tool_call>", '\n{"name": "' + NAME + '", "arguments": '), ("}\n", "</tool_call>"),
                     "<tool_call>", joiner=("\n",)),
    "qwen3_coder": Syntax(("<tool_call>", "\n<function=" + NAME + ">\n"), ("</function>\n", "</tool_call>"),
                          r"<tool_call>|<function=", joiner=("\n",),
                          args="xml", params=Params("<parameter=" + NAME + ">\n", "\n</parameter>\n")),
    "minimax_m2": Syntax(('<invoke name="' + NAME + '">\n',), ("</invoke>\n",), r"<minimax:tool_call>",
                         section_open=("<minimax:tool_call>", "\n"), section_close=("</minimax:tool_call>",),
                         args="xml", params=Params('<parameter name="' + NAME + '">', "</parameter>\n")),
    "glm45": Syntax(("<tool_call>", NAME + "\n"), ("</tool_call>",), r"<tool_call>", joiner=("\n",),
                    args="xml", params=Params("<arg_key>" + NAME + "</arg_key>\n<arg_value>", "</arg_value>\n")),
    "llama3_json": Syntax(('{"name": "' + NAME + '", "parameters": ',), ("}",),
                          r'\{\s*"(name|parameters|arguments)"|<\|python_tag\|>', joiner=("; ",)),
    "pythonic": Syntax((NAME + "(",), (")",), r"\[[A-Za-z_][A-Za-z0-9_.]*\(|<\|python_start\|>",
                       section_open=("[",), section_close=("]",), joiner=(", ",), args="python"),
    # v11+ spelling; the older [TOOL_CALLS][{...}] list is read by the parser but not generated
    "mistral": Syntax(("[TOOL_CALLS]", NAME), (), r"\[TOOL_CALLS\]"),
    "kimi_k2": Syntax(("<|tool_call_begin|>", "functions." + NAME + ":"), ("<|tool_call_end|>",), _KIMI_RE,
                      section_open=("<|tool_calls_section_begin|>",), section_close=("<|tool_calls_section_end|>",),
                      index=True),
    "deepseek_v3": Syntax((_DS_CALL, "function", _DS_SEP, NAME + "\n```json\n"), ("\n```", _DS_END), _DS_RE,
                          section_open=("<｜tool▁calls▁begin｜>",), section_close=("<｜tool▁calls▁end｜>",)),
    "deepseek_v31": Syntax((_DS_CALL, NAME, _DS_SEP), (_DS_END,), _DS_RE,
                           section_open=("<｜tool▁calls▁begin｜>",), section_close=("<｜tool▁calls▁end｜>",)),
}
_JSON_CALL = '{"name": "' + NAME + '", "arguments": '
_M3 = "]<]minimax[>["  # minimax_m3's tag marker
_DSML_PARAMS = Params('<｜DSML｜parameter name="' + NAME + '" string="' + STRING_FLAG + '">', "</｜DSML｜parameter>\n")


def _dsml(block: str) -> Syntax:
    return Syntax(('<｜DSML｜invoke name="' + NAME + '">\n',), ("</｜DSML｜invoke>\n",), f"<｜DSML｜{block}>",
                  section_open=(f"<｜DSML｜{block}>", "\n"), section_close=(f"</｜DSML｜{block}>",),
                  args="xml", params=_DSML_PARAMS)


def _json_list(open_: str, close: str, opener_re: str, call_open: str = _JSON_CALL) -> Syntax:
    """``open [{call}, {call}] close`` (jamba, hunyuan_a13b, cohere_command, granite, phi4_mini_json)."""
    return Syntax((call_open,), ("}",), opener_re, section_open=(open_, "["), section_close=("]", close) if close else ("]",),
                  joiner=(", ",))


SYNTAX.update({
    "longcat": Syntax(("<longcat_tool_call>", "\n" + _JSON_CALL), ("}\n", "</longcat_tool_call>"), "<longcat_tool_call>",
                      joiner=("\n",)),
    "ernie45": Syntax(("<tool_call>", "\n" + _JSON_CALL), ("}\n", "</tool_call>"), "<tool_call>", joiner=("\n",)),
    "internlm": Syntax(("<|action_start|>", "<|plugin|>", '\n{"name": "' + NAME + '", "parameters": '),
                       ("}", "<|action_end|>"), r"<\|action_start\|>", joiner=("\n",)),
    "jamba": _json_list("<tool_calls>", "</tool_calls>", "<tool_calls>"),
    "hunyuan_a13b": _json_list("<tool_calls>", "</tool_calls>", "<tool_calls>"),
    "minimax_m1": Syntax((_JSON_CALL,), ("}",), "<tool_calls>", section_open=("<tool_calls>", "\n"),
                         section_close=("\n", "</tool_calls>"), joiner=("\n",)),
    "cohere_command": _json_list("<|START_ACTION|>", "<|END_ACTION|>", r"<\|START_ACTION\|>",
                                 '{"tool_name": "' + NAME + '", "parameters": '),
    "granite": _json_list("<|tool_call|>", "", r"<\|tool_call\|>"),
    "phi4_mini_json": _json_list("functools", "", r"functools\["),
    "seed_oss": Syntax(("<seed:tool_call>", "\n<function=" + NAME + ">\n"), ("</function>\n", "</seed:tool_call>"),
                       r"<seed:tool_call>", joiner=("\n",), args="xml",
                       params=Params("<parameter=" + NAME + ">", "</parameter>\n")),
    "deepseek_v32": _dsml("function_calls"),
    "deepseek_v4": _dsml("tool_calls"),
    # GigaChat 3.1's spelling (all one token); the parser also reads 3's "function call<|role_sep|>"
    "gigachat3": Syntax(("<|function_call|>", _JSON_CALL), ("}",), r"<\|function_call\|>|function call<\|role_sep\|>",
                        joiner=("\n",)),
    "step3": Syntax(('<｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke name="' + NAME + '">\n',),
                    ("</steptml:invoke><｜tool_call_end｜>",), "<｜tool_calls_begin｜>",
                    section_open=("<｜tool_calls_begin｜>", "\n"), section_close=("\n", "<｜tool_calls_end｜>"), joiner=("\n",),
                    args="xml", params=Params('<steptml:parameter name="' + NAME + '">', "</steptml:parameter>\n")),
    "apertus": Syntax(('{"' + NAME + '": ',), ("}",), r"<\|tools_prefix\|>", section_open=("<|tools_prefix|>", "["),
                      section_close=("]", "<|tools_suffix|>"), joiner=(", ",)),
    "xlam": Syntax((_JSON_CALL,), ("}",), r'\[\s*\{\s*"(name|parameters|arguments)"', section_open=("[",),
                   section_close=("]",), joiner=(", ",)),
    "olmo3": Syntax((NAME + "(",), (")",), r"<function_calls>|\[[A-Za-z_][A-Za-z0-9_.]*\(", section_open=("<function_calls>",),
                    section_close=("</function_calls>",), joiner=("\n",), args="python"),
    "gemma4": Syntax(("<|tool_call>", "call:" + NAME), ("<tool_call|>",), r"<\|tool_call>", args="gemma", quote='<|"|>'),
    "lfm2": Syntax((NAME + "(",), (")",), r"<\|tool_call_start\|>|\[[A-Za-z_][A-Za-z0-9_.]*\(",
                   section_open=("<|tool_call_start|>", "["), section_close=("]", "<|tool_call_end|>"), joiner=(", ",),
                   args="python"),
    "functiongemma": Syntax(("<start_function_call>", "call:" + NAME), ("<end_function_call>",), "<start_function_call>",
                            args="gemma", quote="<escape>"),
    "deepseek_v41": Syntax(('<｜DSML｜ invoke name="' + NAME + '">\n',), ("</｜DSML｜ invoke>\n",), "<｜DSML｜ calls>",
                           section_open=("<｜DSML｜ calls>", "\n"), section_close=("</｜DSML｜ calls>",), args="xml",
                           params=Params('<｜DSML｜ parameter name="' + NAME + '" string="' + STRING_FLAG + '">',
                                         "</｜DSML｜ parameter>\n")),
    "mimo": Syntax(("<tool_call>", "<function=" + NAME + ">"), ("</function>", "</tool_call>"), r"<tool_call>|<function=",
                   args="xml", params=Params("<parameter=" + NAME + ">", "</parameter>")),
    # object and array parameters are written as JSON inside their element (the parser reads nested elements too)
    "minimax_m3": Syntax((_M3 + '<invoke name="' + NAME + '">',), (_M3 + "</invoke>\n",), r"\]<\]minimax\[>\[",
                         section_open=(_M3 + "<tool_call>", "\n"), section_close=(_M3 + "</tool_call>",), args="xml",
                         params=Params(_M3 + "<" + NAME + ">", _M3 + "</" + NAME + ">")),
    "kimi_k3": Syntax(('<|open|>call tool="' + NAME + '" index="',), ("<|close|>call<|sep|>",),
                      r"<\|open\|>tools<\|sep\|>|<\|open\|>call ", section_open=("<|open|>tools<|sep|>",),
                      section_close=("<|close|>tools<|sep|>",), index=True, index_end=('"<|sep|>',), args="xtml",
                      params=Params('<|open|>argument key="' + NAME + '" type="' + XTML_TYPE + '"<|sep|>',
                                    "<|close|>argument<|sep|>"),
                      content_marks=("<|open|>response<|sep|>", "<|close|>response<|sep|>", "<|close|>message<|sep|>")),
})
KIMI_INDEX_OPEN = ("<|tool_call_argument_begin|>",)

# harmony (gpt-oss): messages, not a section; see lark.harmony
HARMONY_CALL = ("<|channel|>", "commentary to=functions." + NAME + " ", "<|constrain|>", "json", "<|message|>")
HARMONY_OPENER_RE = r"<\|channel\|>|<\|start\|>|to=functions\."
FORMATS = tuple(SYNTAX) + ("harmony",)


def call_ends(fmt: str) -> tuple[str, ...]:
    """Text whose arrival may complete a call of ``fmt``: the last piece of its call's close and of its
    section's close (harmony: ``<|call|>``).  The decoder's chunk writer sends a turn's buffered text at
    once when one arrives, so the parser meets a call's end without waiting for the next write round.
    A piece common in arguments (``}``, ``)``) only sends more rounds; mistral's calls end with the turn."""
    if fmt == "harmony":
        return ("<|call|>",)
    syntax = SYNTAX.get(fmt)
    if syntax is None:
        return ()
    return tuple(dict.fromkeys(close[-1] for close in (syntax.call_close, syntax.section_close) if close))



MORE_MARKUP = ("gigachat3", "minimax_m3")  # their parsers drop <|message_sep|> / </mm:think> from content
_REGEX_META = frozenset("\\.^$*+?{}[]()|")


def _literals(pattern: str) -> tuple[str, ...] | None:
    """The strings ``pattern`` matches when it is an alternation of literals, each character of which may
    be optional (``a|b\\|c``, ``calls?``), else None."""
    out: list[str] = []
    cur: list[str] = [""]  # the strings the current alternative matches so far
    last = ""  # the character just added (``?`` makes it optional)
    escaped = False
    for ch in pattern:
        if escaped and ch.isalnum():  # a class (\s, \d) or an anchor, not a character
            return None
        if escaped or (ch not in _REGEX_META and ch != "\\"):
            cur, last, escaped = [c + ch for c in cur], ch, False
        elif ch == "\\":
            escaped = True
        elif ch == "|":
            out += cur
            cur, last = [""], ""
        elif ch == "?" and last:
            cur, last = [*cur, *(c[:-1] for c in cur)], ""
        else:
            return None
    out += cur
    return tuple(dict.fromkeys(out)) if all(out) and not escaped else None


@functools.cache
def call_marks(fmt: str) -> tuple[str, ...]:
    """The markup of ``fmt`` that ends a turn's plain content: the strings that open its calls
    (``opener_re``, when that is a set of literals, an optional character spelled both ways) and the
    last pieces of its closes (a stray close
    is the parser's to read), or () when the format has no such set -- a call of llama3_json or
    pythonic opens with text that prose may hold.  A decoder publishes a turn's text as content
    until one of these arrives (``workers.decode.content_run``); ``kimi_k3``'s content wrappers are
    markup too, ``harmony`` is all channels, and the parsers of ``MORE_MARKUP`` read markup of their own
    (checked against every parser case: ``tests/parser/test_parser_content_run.py``)."""
    syntax = SYNTAX.get(fmt)
    if syntax is None or syntax.content_marks or fmt in MORE_MARKUP:
        return ()
    opens = _literals(syntax.opener_re)
    if opens is None:
        return ()
    return tuple(dict.fromkeys((*opens, *call_ends(fmt))))
