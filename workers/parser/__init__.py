"""Streaming tool-call parsing: one incremental parser per turn, events out (no Redis here).

    p = make_parser("hermes", tools=tools, reasoning="think", call_id_prefix="call_ab12_3_")
    events = p.feed(chunk) ...; events += p.finish()
    turn = collect(events)            # .content .reasoning .calls .invalid
    turn = parse_text("hermes", text) # the same, non-streaming

Call ids are ``f"{call_id_prefix}{index}"`` -- a pure function of prefix and index, so a replayed
turn gets the same ids -- except where the format carries native ids (kimi_k2
``functions.NAME:IDX``, mistral ``[CALL_ID]``) or needs another shape (mistral: 9 alphanumerics
hashed from prefix and index).  ``FORMATS`` lists the format names; reasoning is None,
"think" (``<think>...</think>`` spans) or "think_forced" (the output starts inside reasoning).
"""

from __future__ import annotations

from workers.parser.registry import FORMATS, make_parser, parse_text, tools_called
from workers.parser.turn import InvalidCall, ParseContractError, ParsedCall, Turn, collect

__all__ = ["FORMATS", "make_parser", "parse_text", "collect", "Turn", "ParsedCall", "InvalidCall",
           "ParseContractError", "tools_called"]
