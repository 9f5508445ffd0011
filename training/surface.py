"""How a user writes a canonical value: ``19:00`` as ``7pm``, ``2`` as ``two``, ``Asia/Tokyo`` as ``Tokyo``,
``2027-05-01`` as ``May 1, 2027``, ``12 * 7`` as ``12 times 7``.

Each function takes the canonical value and returns one surface form; the tool call always carries
the canonical value, so the model learns the conversion.  Shared by the training data and the
evaluation sets: these are value formats, not phrasings.
"""

from __future__ import annotations

import random
import re

from training.values import MONTHS, NUMBER_WORDS
from training.zones import city_of

_WORD_OPS = {"+": ["plus", "+"], "-": ["minus", "take away"], "*": ["times", "multiplied by", "x", "×"],
             "/": ["divided by", "over", "÷"]}
_SIMPLE = re.compile(r"^(-?[\d.]+) ([-+*/]) ([\d.]+)$")
_PERCENT = re.compile(r"^(\d+) / 100 \* ([\d.]+)$")


def clock(rng: random.Random, hhmm: str) -> str:
    """``19:00`` -> ``19:00`` | ``7pm`` | ``7 pm`` | ``7:00 PM`` | ``7 p.m.``; ``07:30`` -> ``7:30`` | ``7:30am``."""
    h, m = int(hhmm[:2]), hhmm[3:]
    x = rng.random()
    if x < 0.5:
        return hhmm
    if hhmm == "12:00" and x < 0.6:
        return "noon"
    if h < 10 and x < 0.6:
        return f"{h}:{m}"  # an unpadded morning time, as typed
    suffix = rng.choice(["am", "AM", "a.m."] if h < 12 else ["pm", "PM", "p.m."])
    space, h12 = rng.choice(["", " "]), h % 12 or 12
    return f"{h12}{space}{suffix}" if m == "00" and rng.random() < 0.7 else f"{h12}:{m}{space}{suffix}"


def party(rng: random.Random, n: int) -> str:
    """``4`` -> ``4`` | ``four``."""
    return NUMBER_WORDS[n] if n < len(NUMBER_WORDS) and rng.random() < 0.3 else str(n)


def date(rng: random.Random, iso: str) -> str:
    """``2027-05-01`` -> ``2027-05-01`` | ``May 1, 2027`` | ``1 May 2027``."""
    x = rng.random()
    if x < 0.7:
        return iso
    y, m, d = int(iso[:4]), MONTHS[int(iso[5:7]) - 1], int(iso[8:])
    return f"{m} {d}, {y}" if x < 0.85 else f"{d} {m} {y}"


def zone(rng: random.Random, tz: str) -> str:
    """``Asia/Tokyo`` -> ``Asia/Tokyo`` | ``Tokyo``; ``UTC`` stays."""
    return tz if tz == "UTC" or rng.random() < 0.35 else city_of(tz)


def expression(rng: random.Random, expr: str) -> str:
    """``12 * 7`` -> ``12 * 7`` | ``12*7`` | ``12 times 7``; ``sqrt(2)`` -> ``the square root of 2``; ..."""
    x = rng.random()
    simple = _SIMPLE.match(expr)
    if simple and x < 0.35:
        a, op, b = simple.groups()
        return f"{a} {rng.choice(_WORD_OPS[op])} {b}"
    if expr.startswith("sqrt(") and x < 0.6:
        return f"the square root of {expr[5:-1]}"
    if " ** " in expr and x < 0.6:
        a, k = expr.split(" ** ")
        return f"{a} squared" if k == "2" else f"{a} to the power of {k}"
    percent = _PERCENT.match(expr)
    if percent and x < 0.7:
        return f"{percent.group(1)}% of {percent.group(2)}"
    return expr.replace(" ", "") if x < 0.75 else expr
