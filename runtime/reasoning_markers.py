"""The reasoning span's markers, one owner for the parser, the decoder's grammars and format inference.

Most formats this runtime parses mark reasoning as ``<think>...</think>``; a few families write their
own span (``FAMILY_THINK``), and harmony has none (its ``analysis`` channel carries reasoning).
``reasoning="think"`` means the model opens the span itself; ``"think_forced"`` means the prompt
opened it, so the turn starts inside it.  The parser (``workers.parser``), the grammar table
(``workers.decode.constraints``) and ``runtime.model_info`` all read ``think_markers`` so that the
span a checkpoint writes, the span the parser reads and the span a grammar allows are one fact.
"""

from __future__ import annotations

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
THINK = (THINK_OPEN, THINK_CLOSE)

# format name -> (open, close) where the family does not write <think>
FAMILY_THINK: dict[str, tuple[str, str]] = {
    "seed_oss": ("<seed:think>", "</seed:think>"),            # ByteDance Seed-OSS's template
    "apertus": ("<|inner_prefix|>", "<|inner_suffix|>"),      # Swiss AI Apertus's template
    "longcat": ("<longcat_think>", "</longcat_think>"),       # Meituan LongCat-Flash's template
    "minimax_m3": ("<mm:think>", "</mm:think>"),              # MiniMax-M3's template (vLLM minimax_m3 reasoning)
    "kimi_k3": ("<|open|>think<|sep|>", "<|close|>think<|sep|>"),  # Kimi K3's XTML think channel
    # Google Gemma 4's thought channel: its template writes "<|channel>thought\n...<channel|>"; the span
    # opens at the channel's name, as llama.cpp reads it, so the label's newline begins the reasoning
    "gemma4": ("<|channel>thought", "<channel|>"),
}


def think_markers(fmt: str) -> tuple[str, str]:
    """The (open, close) markers of the reasoning span that format ``fmt`` writes."""
    return FAMILY_THINK.get(fmt, THINK)
