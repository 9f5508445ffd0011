"""hermes: Hermes 2/3, Qwen2.5, QwQ, Qwen3 (non-coder), Granite 3.1+/4.

    narration<tool_call>\\n{"name": "f", "arguments": {...}}\\n</tool_call>\\n<tool_call>...

Each call is one JSON object between ``<tool_call>`` and ``</tool_call>``; the name is sent as
soon as its string closes, the arguments stream as the model writes them, and the call is
ready the moment ``</tool_call>`` arrives.  Markers inside JSON strings are argument text.
One of the JSON-call families (``jsoncalls``).
"""

from __future__ import annotations

from workers.parser.formats.jsoncalls import JsonCallsParser


class HermesParser(JsonCallsParser):
    """``<tool_call>{json}</tool_call>`` calls."""

    FORMAT = "hermes"
    OPEN, CLOSE = "<tool_call>", "</tool_call>"
