"""Build a user message from phrasing parts, with the noise real users add (training procedure).

A message is a list of ``Piece``s: frame text (the phrasing) and values (what the tool call copies).
Noise touches only the frame: lower case, dropped apostrophes, letter-level typos (swap, drop,
double, replace), missing final punctuation, doubled spaces.  Values are left exactly as chosen,
so the call the data expects is always the value the user typed.
"""

from __future__ import annotations

import random
import re
import string
from dataclasses import dataclass

from training import broad as broad_mod
from training import phrasebook as pb

_SLOT = re.compile(r"\{(\w+)\}")


@dataclass(frozen=True)
class Piece:
    text: str
    value: bool = False


def fill(template: str, slots: dict[str, str]) -> list[Piece]:
    """``template`` with its ``{slot}``s replaced by value pieces (unknown slots raise KeyError)."""
    out, at = [], 0
    for m in _SLOT.finditer(template):
        if m.start() > at:
            out.append(Piece(template[at:m.start()]))
        out.append(Piece(slots[m.group(1)], value=True))
        at = m.end()
    if at < len(template):
        out.append(Piece(template[at:]))
    return out


def _typo(rng: random.Random, word: str) -> str:
    i = rng.randrange(1, len(word) - 1)
    kind = rng.choice("sdrx")
    if kind == "s":
        return word[:i] + word[i + 1] + word[i] + word[i + 2:]
    if kind == "d":
        return word[:i] + word[i + 1:]
    if kind == "r":
        return word[:i] + word[i] + word[i:]
    return word[:i] + rng.choice(string.ascii_lowercase) + word[i + 1:]


def _typos(rng: random.Random, pieces: list[Piece], n: int) -> list[Piece]:
    words = [(i, m) for i, p in enumerate(pieces) if not p.value for m in re.finditer(r"[A-Za-z]{4,}", p.text)]
    for i, m in sorted(rng.sample(words, min(n, len(words))), key=lambda w: (w[0], w[1].start()), reverse=True):
        p = pieces[i]
        pieces[i] = Piece(p.text[:m.start()] + _typo(rng, m.group()) + p.text[m.end():])
    return pieces


def noisy(rng: random.Random, pieces: list[Piece], broad: bool = False) -> str:
    """The message text: capitalised or not, frame noise applied, values untouched.  ``broad`` (data
    v2) adds Title Case or upper-case frames, chat abbreviations and commas without a space."""
    lower = rng.random() < 0.2
    if rng.random() < 0.25:
        pieces = _typos(rng, list(pieces), rng.choice([1, 1, 2]))
    case = abbrev = tight = None
    if broad:
        case = rng.choices([None, "title", "upper"], [0.86, 0.12, 0.02])[0]
        abbrev, tight = rng.random() < 0.1, rng.random() < 0.07
        lower = lower and case is None
    out = []
    for p in pieces:
        text = p.text
        if not p.value:
            text = text.lower() if lower else text
            text = text.replace("'", "") if rng.random() < 0.08 else text
            text = text.replace(" ", "  ", 1) if rng.random() < 0.02 else text
            text = broad_mod.abbreviate(rng, text) if abbrev else text
            text = text.replace(", ", ",") if tight else text
            text = broad_mod.title_case(text) if case == "title" else text.upper() if case == "upper" else text
        out.append(text)
    text = "".join(out)
    if not lower and not pieces[0].value and rng.random() < 0.85:
        text = text[:1].upper() + text[1:]
    return text


def end_mark(rng: random.Random, form: str) -> str:
    if form == "ask":
        return rng.choice(["?", "?", "?", "??", "", "?!"])
    return rng.choice([".", ".", "", "!", ""]) if form == "do" else rng.choice(["", "", "?", ".", "!"])


def wrap(rng: random.Random, body: str, form: str, broad: bool, tails: list[str]) -> str:
    """A single request ``body`` (a core of ``form``) with greeting, modal, suffix and final mark;
    ``broad`` (data v2, v3) sometimes puts a lead-in sentence first or a closing sentence (one of ``tails``,
    the data version's: no default, so that no caller falls back to another version's) after."""
    modal = rng.choice(pb.MODALS) if form == "do" else ""
    if modal in ("can you ", "could you ", "would you ", "could you please ", "can you please "):
        mark = rng.choice(["?", "?", "", "?!"])
    else:
        mark = end_mark(rng, form)
    text = rng.choice(pb.GREETINGS) + modal + body + rng.choice(pb.SUFFIXES) + mark
    if broad and rng.random() < 0.25:
        text = rng.choice(broad_mod.LEADS) + text
    if broad and rng.random() < 0.15:
        text += rng.choice(tails)
    return text


def join(rng: random.Random, bodies: list[tuple[str, str]], broad: bool, tails: list[str]) -> str:
    """Two or three request bodies ((text, form) each) joined into one message template (``tails`` as in
    ``wrap``)."""
    first_form = bodies[0][1]
    texts = [b + ("?" if f == "ask" and rng.random() < 0.5 else "") for b, f in bodies]
    joins = (broad_mod.JOINS, broad_mod.JOINS3) if broad else (pb.JOINS, pb.JOINS3)
    joiner = rng.choice(joins[0] if len(texts) == 2 else joins[1])
    joined = joiner.format(**dict(zip("ABC", texts))).replace("??", "?")
    return wrap(rng, joined, first_form, broad, tails) if not joined.endswith("?") else rng.choice(pb.GREETINGS) + joined
