"""Format names -> parser classes, and the two entry points built on them."""

from __future__ import annotations

import importlib
from typing import Any

from workers.parser.core import StreamParser
from workers.parser.turn import Turn, collect

# name -> "module:Class" (imported on first use)
_PARSERS: dict[str, str] = {
    "hermes": "workers.parser.formats.hermes:HermesParser",
    "deepseek_v3": "workers.parser.formats.deepseek:DeepSeekV3Parser",
    "deepseek_v31": "workers.parser.formats.deepseek:DeepSeekV31Parser",
    "kimi_k2": "workers.parser.formats.kimi:KimiK2Parser",
    "qwen3_coder": "workers.parser.formats.xmlcalls:Qwen3CoderParser",
    "minimax_m2": "workers.parser.formats.xmlcalls:MiniMaxM2Parser",
    "glm45": "workers.parser.formats.glm:Glm45Parser",
    "llama3_json": "workers.parser.formats.llama3:Llama3JsonParser",
    "mistral": "workers.parser.formats.mistral:MistralParser",
    "pythonic": "workers.parser.formats.pythonic:PythonicParser",
    "harmony": "workers.parser.formats.harmony:HarmonyParser",
    "longcat": "workers.parser.formats.jsonfamilies:LongCatParser",
    "ernie45": "workers.parser.formats.jsonfamilies:Ernie45Parser",
    "internlm": "workers.parser.formats.jsonfamilies:InternLMParser",
    "jamba": "workers.parser.formats.jsonfamilies:JambaParser",
    "hunyuan_a13b": "workers.parser.formats.jsonfamilies:HunyuanA13BParser",
    "minimax_m1": "workers.parser.formats.jsonfamilies:MiniMaxM1Parser",
    "cohere_command": "workers.parser.formats.jsonfamilies:CohereCommandParser",
    "granite": "workers.parser.formats.jsonfamilies:GraniteParser",
    "phi4_mini_json": "workers.parser.formats.jsonfamilies:Phi4MiniParser",
    "seed_oss": "workers.parser.formats.xmlfamilies:SeedOssParser",
    "deepseek_v32": "workers.parser.formats.xmlfamilies:DeepSeekV32Parser",
    "deepseek_v4": "workers.parser.formats.xmlfamilies:DeepSeekV4Parser",
    "lfm2": "workers.parser.formats.xmlfamilies:Lfm2Parser",
    "gigachat3": "workers.parser.formats.jsonfamilies:GigaChat3Parser",
    "step3": "workers.parser.formats.xmlfamilies:Step3Parser",
    "apertus": "workers.parser.formats.jsonfamilies:ApertusParser",
    "olmo3": "workers.parser.formats.xmlfamilies:Olmo3Parser",
    "xlam": "workers.parser.formats.jsonfamilies:XLamParser",
    "functiongemma": "workers.parser.formats.functiongemma:FunctionGemmaParser",
    "deepseek_v41": "workers.parser.formats.xmlfamilies:DeepSeekV41Parser",
    "mimo": "workers.parser.formats.xmlfamilies:MiMoParser",
    "minimax_m3": "workers.parser.formats.minimax_m3:MiniMaxM3Parser",
    "kimi_k3": "workers.parser.formats.kimi:KimiK3Parser",
    "gemma4": "workers.parser.formats.gemma4:Gemma4Parser",
}
FORMATS: tuple[str, ...] = tuple(_PARSERS)


class UnknownFormat(ValueError):
    """No parser has this name."""


def parser_class(name: str) -> type[StreamParser]:
    """The parser class registered as ``name``."""
    try:
        target = _PARSERS[name]
    except KeyError:
        raise UnknownFormat(f"unknown tool-call format {name!r}; known: {', '.join(FORMATS)}") from None
    module, cls = target.split(":")
    return getattr(importlib.import_module(module), cls)


class PlainParser(StreamParser):
    """Text and reasoning only: a turn that may call no tool (its call markup is content)."""

    FORMAT = "plain"


def make_parser(name: str, tools: list[dict[str, Any]] | None = None, reasoning: str | None = None,
                call_id_prefix: str = "call_", calls: bool = True) -> StreamParser:
    """A fresh parser for one turn of format ``name`` (reasoning: None, "think", "think_forced").

    ``calls=False``: a turn offered no tools, whose text is all content (``PlainParser``) --
    except harmony, whose messages need its own parser to separate channels at all.
    """
    cls = parser_class(name)
    if not calls and name != "harmony":
        cls = PlainParser
    return cls(tools=tools, reasoning=reasoning, call_id_prefix=call_id_prefix)


def parse_text(name: str, text: str, tools: list[dict[str, Any]] | None = None, reasoning: str | None = None,
               call_id_prefix: str = "call_") -> Turn:
    """Parse a whole completion at once; equal to any streamed parse of the same text."""
    p = make_parser(name, tools=tools, reasoning=reasoning, call_id_prefix=call_id_prefix)
    return collect(p.feed(text) + p.finish())


def tools_called(texts: list[str], fmt: str = "hermes") -> list[dict[str, Any]]:
    """The tools some completions call, as OpenAI tool dicts taking any arguments: what a session
    built around a replay script must offer (a request's grammar admits calls of offered tools only)."""
    names = dict.fromkeys(c.name for text in texts for c in parse_text(fmt, text).calls)
    return [{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}} for n in names]
