"""The reasoning span's markers, one owner for the parser, the decoder's grammars and format inference.

Every format this runtime parses marks reasoning as ``<think>...</think>`` (harmony excepted: its
``analysis`` channel carries reasoning, no marker does).  ``reasoning="think"`` means the model opens
the span itself; ``"think_forced"`` means the prompt opened it, so the turn starts inside it.
"""

from __future__ import annotations

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
THINK = (THINK_OPEN, THINK_CLOSE)
