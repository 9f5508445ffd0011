"""The JSON-call families, declared on ``jsoncalls.JsonCallsParser`` (markup per class docstring).

Sources (facts read, no code taken): vLLM's tool parsers (``vllm/tool_parsers/<name>_tool_parser.py``:
longcat, ernie45, internlm2, gigachat3, apertus, jamba, hunyuan_a13b, minimax, cohere_command, granite, phi4mini) and
SGLang's function-call detectors, checked against the models' chat templates where published.
"""

from __future__ import annotations

from workers.parser.core import T_CALL
from workers.parser.formats.envelope import NameKeyEnvelope
from workers.parser.formats.hermes import HermesParser
from workers.parser.formats.jsoncalls import LINES, LIST, JsonCallsParser
from workers.parser.formats.llama3 import json_call_start
from workers.parser.scan import MAYBE, NO_MATCH, PATTERN_HOLD_MAX, PatternFn, skip_ws


class LongCatParser(JsonCallsParser):
    """LongCat-Flash: ``<longcat_tool_call>{"name": .., "arguments": {..}}</longcat_tool_call>`` (vLLM longcat)."""

    FORMAT = "longcat"
    OPEN, CLOSE = "<longcat_tool_call>", "</longcat_tool_call>"


class Ernie45Parser(HermesParser):
    """ERNIE 4.5 (thinking): ``<tool_call>{"name": .., "arguments": {..}}</tool_call>`` after
    ``<think>...</think>`` (vLLM ernie45); the markup is hermes', the name is the model's."""

    FORMAT = "ernie45"


class InternLMParser(JsonCallsParser):
    """InternLM 2 / 2.5 / 3: ``<|action_start|><|plugin|>\\n{"name": .., "parameters": {..}}<|action_end|>``
    (vLLM internlm2, InternLM's chat template)."""

    FORMAT = "internlm"
    OPEN, CLOSE = "<|action_start|><|plugin|>", "<|action_end|>"


class JambaParser(JsonCallsParser):
    """AI21 Jamba 1.5+: ``<tool_calls>[{"name": .., "arguments": {..}}, ..]</tool_calls>`` (vLLM jamba)."""

    FORMAT = "jamba"
    OPEN, CLOSE = "<tool_calls>", "</tool_calls>"
    LAYOUT = LIST


class HunyuanA13BParser(JambaParser):
    """Hunyuan-A13B: the same ``<tool_calls>[..]</tool_calls>`` list, after ``<think>`` reasoning
    (vLLM hunyuan_a13b, SGLang's hunyuan detector)."""

    FORMAT = "hunyuan_a13b"


class MiniMaxM1Parser(JsonCallsParser):
    """MiniMax-M1 / Text-01: ``<tool_calls>\\n{"name": .., "arguments": {..}}\\n{..}\\n</tool_calls>``, one
    call object per line (vLLM minimax, MiniMax-M1's chat template)."""

    FORMAT = "minimax_m1"
    OPEN, CLOSE = "<tool_calls>", "</tool_calls>"
    LAYOUT = LINES


class CohereCommandParser(JsonCallsParser):
    """Cohere Command R7B / A: ``<|START_ACTION|>[{"tool_call_id": "0", "tool_name": .., "parameters": {..}}]
    <|END_ACTION|>`` (vLLM cohere_command, Command A's chat template); ``tool_call_id`` is skipped."""

    FORMAT = "cohere_command"
    OPEN, CLOSE = "<|START_ACTION|>", "<|END_ACTION|>"
    LAYOUT = LIST
    NAME_KEYS = frozenset({"tool_name", "name"})


class GraniteParser(JsonCallsParser):
    """IBM Granite 3.0-3.3: ``<|tool_call|>[{"name": .., "arguments": {..}}]``, no close marker (vLLM granite,
    Granite 3.3's template).  Granite 4 writes hermes' ``<tool_call>`` and uses ``hermes``."""

    FORMAT = "granite"
    OPEN = "<|tool_call|>"
    LAYOUT = LIST
    BARE_ALSO = True  # vLLM's Granite 3.0 template writes a past call as ``<|tool_call|> {..}``
    STRAY_ALSO = ("<response>", "</response>")  # Granite 3.3 thinking: ``<think>..</think><response>..</response>``


class Phi4MiniParser(JsonCallsParser):
    """Phi-4-mini-instruct: ``functools[{"name": .., "arguments": {..}}]``, no close marker (vLLM phi4mini)."""

    FORMAT = "phi4_mini_json"
    OPEN = "functools"
    LAYOUT = LIST


class GigaChat3Parser(JsonCallsParser):
    """GigaChat 3: ``function call<|role_sep|>\\n{"name": .., "arguments": {..}}`` (GigaChat3-10B-A1.8B's
    template, vLLM gigachat3), GigaChat 3.1: ``<|function_call|>{..}``; one call, no close marker.  The
    template's ``<|message_sep|>`` before it and a trailing ``</s>`` are dropped from the text."""

    FORMAT = "gigachat3"
    OPEN = "function call<|role_sep|>"
    OPEN_ALSO = ("<|function_call|>",)
    STRAY_ALSO = ("<|message_sep|>", "</s>")


class ApertusParser(JsonCallsParser):
    """Swiss AI Apertus: ``<|tools_prefix|>[{"get_weather": {"city": ..}}, ..]<|tools_suffix|>``, the name as
    the key (vLLM apertus, Apertus-8B-Instruct's template); reasoning in ``<|inner_prefix|>..<|inner_suffix|>``."""

    FORMAT = "apertus"
    OPEN, CLOSE = "<|tools_prefix|>", "<|tools_suffix|>"
    LAYOUT = LIST
    ENVELOPE = NameKeyEnvelope


def json_list_start(buf: str, i: int) -> int:
    """Pattern start: ``[`` + optional whitespace + a JSON call object's start (see ``json_call_start``)."""
    j = skip_ws(buf, i + 1)
    if j >= len(buf):
        return MAYBE if j - i <= PATTERN_HOLD_MAX else NO_MATCH
    return json_call_start(buf, j) if buf[j] == "{" else NO_MATCH


class XLamParser(JsonCallsParser):
    """Salesforce xLAM-2: a bare JSON list ``[{"name": .., "arguments": {..}}, ..]`` (vLLM xlam); a list
    starts at ``[`` + ``{`` + a call key, any other bracket is prose."""

    FORMAT = "xlam"
    LAYOUT = LIST

    def _pattern_starts(self) -> dict[str, tuple[str, PatternFn]]:
        return {"[": (T_CALL, json_list_start)}

    def _on_call_marker(self, tag: str, buf: str, start: int, end: int) -> int:
        self._state = self._list_open
        return start
