"""XML-parameter families declared on ``xmlcalls.XmlCallParser``, and the tagged Python-call families.

Sources (facts read, no code taken): vLLM's ``seed_oss``, ``deepseekv32``, ``deepseekv4``, ``step3``
``lfm2`` and ``olmo3`` tool parsers, vLLM 0.32's ``deepseek_v41`` and ``mimo`` parsers, SGLang's seed_oss / deepseekv32 / step3 detectors, and the chat templates of
Seed-OSS-36B-Instruct (its system prompt spells the call format out) and DeepSeek-V3.2's
published encoding (``encoding_dsv32.py``).
"""

from __future__ import annotations

from workers.parser.formats.pythonic import IDENT, T_TAGGED, PythonicParser
from workers.parser.formats.xmlcalls import Qwen3CoderParser, XmlCallParser
from workers.parser.scan import MAYBE_AT, NO_MATCH, match_literal, skip_ws


class SeedOssParser(XmlCallParser):
    """ByteDance Seed-OSS: ``<seed:tool_call>\\n<function=NAME>\\n<parameter=K>V</parameter>\\n</function>\\n
    </seed:tool_call>``, values inline (a template newline around one is dropped); reasoning in
    ``<seed:think>...</seed:think>``."""

    FORMAT = "seed_oss"
    BLOCK_OPEN, BLOCK_CLOSE = "<seed:tool_call>", "</seed:tool_call>"
    INVOKE_OPEN, INVOKE_CLOSE = "<function=", "</function>"
    PARAM_OPEN, PARAM_CLOSE = "<parameter=", "</parameter>"
    NAME_END = ">"


class DeepSeekV32Parser(XmlCallParser):
    """DeepSeek-V3.2 DSML: ``<｜DSML｜function_calls>\\n<｜DSML｜invoke name="NAME">\\n<｜DSML｜parameter
    name="K" string="true|false">V</｜DSML｜parameter>\\n</｜DSML｜invoke>\\n</｜DSML｜function_calls>``.

    ``string="true"`` marks a value as the text itself, ``"false"`` as JSON; values are typed by
    the tool schema here as in the other XML formats, so the attribute is read and dropped."""

    FORMAT = "deepseek_v32"
    BLOCK_OPEN, BLOCK_CLOSE = "<｜DSML｜function_calls>", "</｜DSML｜function_calls>"
    INVOKE_OPEN, INVOKE_CLOSE = '<｜DSML｜invoke name="', "</｜DSML｜invoke>"
    PARAM_OPEN, PARAM_CLOSE = '<｜DSML｜parameter name="', "</｜DSML｜parameter>"
    NAME_END = '">'
    TRIM = False

    def _param_named(self, key: str) -> None:
        super()._param_named(key.split('"', 1)[0])  # 'city" string="true' -> 'city'


class DeepSeekV4Parser(DeepSeekV32Parser):
    """DeepSeek-V4: DSML as V3.2, the block named ``tool_calls`` (vLLM deepseekv4)."""

    FORMAT = "deepseek_v4"
    BLOCK_OPEN, BLOCK_CLOSE = "<｜DSML｜tool_calls>", "</｜DSML｜tool_calls>"


class Step3Parser(XmlCallParser):
    """StepFun Step-3: ``<｜tool_calls_begin｜>\\n<｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke name="N">
    <steptml:parameter name="K">V</steptml:parameter></steptml:invoke><｜tool_call_end｜>\\n<｜tool_calls_end｜>``
    (vLLM step3, SGLang Step3Detector).  The markers around an invoke are read as written there,
    without whitespace inside them."""

    FORMAT = "step3"
    BLOCK_OPEN, BLOCK_CLOSE = "<｜tool_calls_begin｜>", "<｜tool_calls_end｜>"
    INVOKE_OPEN = '<｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke name="'
    INVOKE_CLOSE = "</steptml:invoke><｜tool_call_end｜>"
    PARAM_OPEN, PARAM_CLOSE = '<steptml:parameter name="', "</steptml:parameter>"
    NAME_END = '">'
    TRIM = False  # values are written inline, verbatim


class Lfm2Parser(PythonicParser):
    """Liquid LFM2: ``<|tool_call_start|>[f(a='x'), g()]<|tool_call_end|>`` (vLLM lfm2, LFM2's template);
    a bare ``[f(...)]`` list is read as in ``pythonic``."""

    FORMAT = "lfm2"
    START_MARKERS = {"<|tool_call_start|>": T_TAGGED}
    STRAY_MARKERS = ("<|tool_call_end|>",)


OLMO_OPEN, OLMO_CLOSE = "<function_calls>", "</function_calls>"


class Olmo3Parser(PythonicParser):
    """OLMo 3: ``<function_calls>get_weather(city='SF')\\nget_time()</function_calls>``, Python calls one per
    line without a list (vLLM olmo3, OLMo 3's chat template); a bare ``[f(...)]`` list is read as in
    ``pythonic``."""

    FORMAT = "olmo3"
    START_MARKERS = {OLMO_OPEN: T_TAGGED}
    STRAY_MARKERS = (OLMO_CLOSE,)

    def _on_call_marker(self, tag: str, buf: str, start: int, end: int) -> int:
        self._in_block = tag == T_TAGGED
        if self._in_block:
            self._state = self._list_item
            return end
        return super()._on_call_marker(tag, buf, start, end)

    def _after_call(self, buf: str, pos: int) -> int:
        """In the block: another call (after whitespace) or the close marker; else as ``pythonic``."""
        if not self._in_block:
            return super()._after_call(buf, pos)
        at = skip_ws(buf, pos)
        if at >= len(buf):
            return pos
        if IDENT.match(buf, at):
            self._state = self._list_item
            return at
        end = match_literal(buf, at, OLMO_CLOSE)
        if end == MAYBE_AT:
            return pos
        self._state = self._text
        return pos if end == NO_MATCH else end


class DeepSeekV41Parser(DeepSeekV4Parser):
    """DeepSeek-V4.1: DSML as V4 with a space after the DSML token in every tag (vLLM deepseek_v41, V4.1-Flash's
    template): ``<｜DSML｜ calls>\\n<｜DSML｜ invoke name="N">\\n<｜DSML｜ parameter name="K" string="true|false">V
    </｜DSML｜ parameter>\\n</｜DSML｜ invoke>\\n</｜DSML｜ calls>``."""

    FORMAT = "deepseek_v41"
    BLOCK_OPEN, BLOCK_CLOSE = "<｜DSML｜ calls>", "</｜DSML｜ calls>"
    INVOKE_OPEN, INVOKE_CLOSE = '<｜DSML｜ invoke name="', "</｜DSML｜ invoke>"
    PARAM_OPEN, PARAM_CLOSE = '<｜DSML｜ parameter name="', "</｜DSML｜ parameter>"


class MiMoParser(Qwen3CoderParser):
    """Xiaomi MiMo (V2.6, vLLM mimo): Qwen3-Coder's tags written compact, ``<tool_call><function=N><parameter=K>V
    </parameter></function></tool_call>``, each value verbatim (no newline of it is template padding)."""

    FORMAT = "mimo"
    TRIM = False
