"""One request for one tool: its values (canonical for the call, surface for the user) and its phrasing.

``draw(kind)`` picks values from a split's pools; ``template(request, form)`` picks a training
phrasing of that form with the request's slots, renamed by ``suffix`` when several requests share
one message (``{city}`` -> ``{city2}``).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Any

from training import phrasebook as pb
from training import surface
from training.values import Values
from training.zones import is_made_up

KINDS = ("weather", "booking", "time", "calc", "search")
TOOL_OF = {"weather": "get_weather", "booking": "book_restaurant", "time": "get_time", "calc": "calculator",
           "search": "search"}
_SLOT = re.compile(r"\{(\w+)\}")


@dataclass
class Request:
    kind: str
    args: dict[str, Any]
    slots: dict[str, str] = field(default_factory=dict)  # slot -> what the user types
    when: str = "none"  # weather only: none | date | tomorrow
    words: str = ""  # calc only: a word phrasing ("multiply {a} by {b}") instead of an expression

    @property
    def tool(self) -> str:
        return TOOL_OF[self.kind]


def draw(kind: str, v: Values, lower_values: bool = False, as_typed: bool = False) -> Request:
    """A request of ``kind``; with ``lower_values`` the copied names are typed in lower case; with
    ``as_typed`` (data v7) a calculation typed without spaces is called as typed, not re-spaced."""
    r = v.rng
    low = (lambda s: s.lower()) if lower_values else (lambda s: s)
    if kind == "weather":
        city, when = low(v.city()), r.choices(["none", "date", "tomorrow"], [0.6, 0.28, 0.12])[0]
        args: dict[str, Any] = {"city": city}
        slots = {"city": city}
        if when == "date":
            args["date"] = v.date()
            slots["date"] = surface.date(r, args["date"])
        elif when == "tomorrow":
            args["date"] = "tomorrow"
        return Request(kind, args, slots, when)
    if kind == "booking":
        rest, n, t = low(v.restaurant()), v.party(), v.clock()
        return Request(kind, {"restaurant": rest, "party_size": n, "time": t},
                       {"restaurant": rest, "n": surface.party(r, n), "time": surface.clock(r, t)})
    if kind == "time":
        tz = v.zone()
        made_up = is_made_up(tz)  # data v4: a made-up place is typed whole, region and case as called
        place = tz if made_up else surface.zone(r, tz)
        low_place = lower_values and not made_up and r.random() < 0.5
        return Request(kind, {"timezone": tz}, {"place": place.lower() if low_place else place})
    if kind == "calc":
        return _calc(v, as_typed)
    if kind == "search":
        q = low(v.query())
        return Request(kind, {"query": q}, {"q": q})
    raise ValueError(f"unknown request kind {kind!r}")


def _calc(v: Values, as_typed: bool = False) -> Request:
    r = v.rng
    if r.random() < 0.15:
        op = r.choice("+-*/")
        a, b = v.number(r.randint(1, 4)), v.number(r.randint(1, 3))
        if op == "/" and int(b) == 0:
            b = "7"
        return Request("calc", {"expression": f"{a} {op} {b}"}, {"a": a, "b": b}, words=r.choice(pb.CALC_WORDS[op]))
    expr = v.expression()
    typed = surface.expression(r, expr)
    return Request("calc", {"expression": typed if as_typed and typed == expr.replace(" ", "") else expr}, {"expr": typed})


def _party_phrase(rng: random.Random, n_text: str) -> str:
    if n_text in ("1", "one"):
        return rng.choice(["{n}", "{n} person", "just {n}" if n_text == "one" else "{n}"])
    return rng.choice(pb.PARTY_NOUNS)


# a core that already words the party ("{n} seats", "we're {n}"): its {n} stays a number (data v2)
_WORDED_PARTY = re.compile(r"(party of|we're|table of) \{n\}|\{n\} (seats|places|spots|of us|covers)")


def template(rng: random.Random, req: Request, form: str, suffix: str = "",
             cores: dict[str, dict[str, list[str]]] | None = None) -> str:
    """A phrasing of ``req`` in ``form`` (do | ask | bare), slots renamed with ``suffix``; ``cores``:
    the phrasing parts to draw from (``phrasebook.CORES`` unless given; given, a core that words
    the party itself keeps a bare number: no "a party of 4 seats")."""
    if req.words:
        np = req.words.startswith("the ")
        core = (rng.choice(["what's ", "what is ", "tell me ", "give me "]) + req.words) if np else req.words
    else:
        core = rng.choice((cores or pb.CORES)[req.kind][form])
    if req.kind == "weather":
        lead = "{when_lead}" in core
        core = core.replace("{when_lead}", rng.choice(pb.WHEN_LEAD[req.when])).replace(
            "{when}", "" if lead else rng.choice(pb.WHEN[req.when]))
        if req.when != "none" and req.when not in ("date",) and "tomorrow" not in core:
            core += " tomorrow"
        if req.when == "date" and "{date}" not in core:
            core += " on {date}"
    if "{n}" in core and not (cores is not None and _WORDED_PARTY.search(core)):
        core = core.replace("{n}", _party_phrase(rng, req.slots.get("n", "")), 1)
    return _SLOT.sub(lambda m: "{" + m.group(1) + suffix + "}", core)


def slots(req: Request, suffix: str = "") -> dict[str, str]:
    return {k + suffix: v for k, v in req.slots.items()}
