"""Multi-turn tool-use dialogues in the Qwen2.5 chat format, for training and in-distribution evaluation.

An exchange is one user message and what the assistant does about it: no tool (small talk), one
round of one or more calls (single requests, pairs and triples of tools, several values for one
tool), or two rounds where the second call needs the first results (dependent requests).  Every
tool exchange ends with an answer quoting every result's key values.  Values and phrasing
combinations are split by stable hashes; ``DialogueGen("eval", seed)`` draws only held-out ones.

Usage: python -m training.datagen --split train --n 3 --seed 0   (prints rendered dialogues)
"""

from __future__ import annotations

import argparse
import functools
import json
import random
import re
from dataclasses import dataclass, field
from typing import Any

from training import answers, compose
from training import broad as bd
from training import phrasebook as pb
from training import requests as rq
from training import smalltalk
from training.results import Call, make_call
from training.smalltalk import ENDINGS
from training.smalltalk import KINDS as SMALLTALK
from training.template import render
from training.tools_spec import SERVER_TOOLS, TOOLS
from training.values import Values, split_of

FORMS, FORM_WEIGHTS = ("do", "ask", "bare"), (0.45, 0.4, 0.15)
# v2: v1 plus training/broad.py's parts (the second phase); v3: v2 plus names of several words and tails
# without held-out small-talk bodies (the third phase); v4: v3 plus "Cafe X", "Mount X", made-up zones under
# real regions, "a - (b + c)", two-topic queries and more follow-ups (tried as a fourth phase, not shipped:
# see the README); v5: v4 where 40 % of follow-ups come after a terse reply (``TERSE``) that is history only;
# v6: v5 where half of the searches return any pages' titles (``Values.title``), not the demo tool's;
# v7: v6 where a calculation typed without spaces is called as typed ("(706*806)+144", not "(706 * 806) + 144"),
# and half of the searches titled like any page come in a client's shape (``results.older_shape``); v8: v7 where
# half of those titles are any words of the phrasing parts (``Values.free_title``, ``title_words``); v9: v8 where
# 60 % of the titled searches carry common page kinds' titles ("A Short History of X": ``Values.page_title``)
DATA_VERSIONS = ("v1", "v2", "v3", "v4", "v5", "v6", "v7", "v8", "v9")
# Replies a client's history may hold before a follow-up (another model's, or one the client shortened).
# They are shown, never learned (``Exchange.quiet``): this model's own answers still quote every value.
TERSE = ("All set.", "Here you go.", "There you go.", "OK.", "Sure thing.", "Finished.", "Got it.",
         "Here it is.", "See above.", "Okay, all sorted.", "Right, that's it.", "Voilà.")


@dataclass
class Exchange:
    """One user message, the rounds of tool calls it needs (maybe none) and the final answer."""

    user: str
    rounds: list[list[Call]] = field(default_factory=list)
    answer: str = ""
    task: str = "none"
    quiet: bool = False  # the answer is history someone else wrote: shown, no loss (``learned_turns``)

    @property
    def calls(self) -> list[Call]:
        return [c for r in self.rounds for c in r]

    @property
    def keys(self) -> list[str]:
        return [k for r in self.rounds[-1:] for c in r for k in c.keys]

    def messages(self) -> list[dict[str, Any]]:
        msgs: list[dict[str, Any]] = [{"role": "user", "content": self.user}]
        for r in self.rounds:
            msgs.append({"role": "assistant", "content": None,
                         "tool_calls": [{"type": "function", "function": c.as_call()} for c in r]})
            msgs += [{"role": "tool", "content": c.content} for c in r]
        return msgs + [{"role": "assistant", "content": self.answer}]


class DialogueGen:
    """Draws exchanges and dialogues of one split from a seeded RNG.  ``data`` is the version of the
    phrasing parts: ``v1`` (phrasebook only; what the in-distribution evaluation set is drawn from),
    ``v2`` (v1 plus ``training/broad.py``), ``v3`` (v2 plus names of several words, and tails that are
    never a held-out small-talk body), ``v4`` (v3 plus the forms in ``values._WIDE_*`` and more
    follow-ups), ``v5`` (v4 with a quiet terse reply before 40 % of follow-ups), ``v6`` (v5 with any
    pages' titles in half of the search results), ``v7`` (v6 with calculations called as typed and more
    titled searches in a client's shape), ``v8`` (v7 with half of those titles any words) or ``v9`` (v8 with
    common page kinds' titles in 60 % of the titled searches).  Each version's draws are the same as before the next existed."""

    def __init__(self, split: str, seed: int, data: str = "v1") -> None:
        if data not in DATA_VERSIONS:
            raise ValueError(f"unknown data version {data!r}")
        self.split, self.rng = split, random.Random(seed)
        built_on = DATA_VERSIONS[: DATA_VERSIONS.index(data) + 1]  # this version and those it adds to
        self.broad, self.wide, self.terse = "v2" in built_on, "v4" in built_on, "v5" in built_on
        self.titled, self.as_typed, self.free_titles = "v6" in built_on, "v7" in built_on, "v8" in built_on
        self.page_titles = "v9" in built_on
        self.values = Values(split, self.rng, compound="v3" in built_on, wide=self.wide)
        self.tails = bd.TAILS_V3 if "v3" in built_on else bd.TAILS
        self.p_live = 0.85 if split == "train" else 1.0  # held-out results always in the runtime's shape

    # --- pieces -------------------------------------------------------------------------------
    def _held_out(self, *parts: str) -> bool:
        return split_of("|".join(parts)) == "eval"

    def _form(self) -> str:
        return self.rng.choices(FORMS, FORM_WEIGHTS)[0]

    def _template(self, req: rq.Request, form: str, suffix: str = "") -> str:
        """A phrasing whose (form, core) combination belongs to this split."""
        for _ in range(50):
            t = rq.template(self.rng, req, form, suffix, bd.CORES if self.broad else None)
            if self._held_out(t) == (self.split == "eval"):
                return t
        return t

    def _message(self, template: str, slots: dict[str, str]) -> str:
        return compose.noisy(self.rng, compose.fill(template, slots), self.broad)

    def _calls(self, reqs: list[rq.Request], live: bool) -> list[Call]:
        calls = []
        for q in reqs:
            titles = self._titles(q)
            # data v7: a search tool of the user's own returns its own shape as often as the demo tool's
            own_shape = bool(titles) and self.as_typed and live and self.rng.random() < 0.5
            calls.append(make_call(q.tool, q.args, self.rng, live and not own_shape, titles))
        return calls

    def _titles(self, q: rq.Request) -> list[str] | None:
        """Data v6: half of the searches come from a search tool of the user's own, titled like any page."""
        if not self.titled or q.tool != "search" or self.rng.random() >= 0.5:
            return None
        if self.page_titles and self.rng.random() < 0.6:  # data v9
            return [self.values.page_title() for _ in range(3)]
        if self.free_titles and self.rng.random() < 0.5:
            return [self.values.free_title(title_words()) for _ in range(3)]
        return [self.values.title(q.args["query"]) for _ in range(3)]

    def _requests(self, kinds: list[str]) -> list[rq.Request]:
        lower = self.rng.random() < 0.06
        reqs = [rq.draw(k, self.values, lower, self.as_typed) for k in kinds]
        for q in reqs if self.broad else []:
            if q.words and self.rng.random() < 0.4:
                q.words = self.rng.choice(bd.CALC_WORDS[q.args["expression"].split()[1]])
        return reqs

    def _tool_exchange(self, reqs: list[rq.Request], template: str, task: str) -> Exchange:
        slots = {k: v for i, q in enumerate(reqs) for k, v in rq.slots(q, str(i + 1) if i else "").items()}
        calls = self._calls(reqs, live=self.rng.random() < self.p_live)
        return Exchange(self._message(template, slots), [calls], answers.answer(self.rng, calls), task)

    # --- exchanges ----------------------------------------------------------------------------
    def single(self, kind: str | None = None) -> Exchange:
        req = self._requests([kind or self.rng.choice(rq.KINDS)])[0]
        if self.broad and req.kind in bd.THERE and not req.words and self.rng.random() < 0.15:
            return self._tool_exchange([req], self._there(req), req.kind)
        form = self._form()
        text = compose.wrap(self.rng, self._template(req, form), form, self.broad, self.tails)
        return self._tool_exchange([req], text, req.kind)

    def _there(self, req: rq.Request) -> str:
        """Two sentences: the first names the value, the second asks about "there" (data v2)."""
        contexts, questions = bd.THERE[req.kind]
        when = self.rng.choice(pb.WHEN[req.when]) if req.kind == "weather" else ""
        if req.when == "tomorrow" and "tomorrow" not in when:
            when = " tomorrow"
        if req.when == "date" and "{date}" not in when:
            when = " on {date}"
        sep = self.rng.choice([". ", ". ", "; ", ", ", " - ", "! "])
        mark = self.rng.choice(["?", "?", "", "??"])
        return self.rng.choice(contexts) + sep + self.rng.choice(questions).replace("{when}", when) + mark

    def multi(self, n: int = 2) -> Exchange:
        """Two or three requests for different tools in one message, answered in one round."""
        kinds = self.rng.sample(rq.KINDS, n)
        reqs = self._requests(kinds)
        bodies = [(self._template(q, f, str(i + 1) if i else ""), f)
                  for i, q in enumerate(reqs) for f in [self._form()]]
        return self._tool_exchange(reqs, compose.join(self.rng, bodies, self.broad, self.tails), "+".join(sorted(kinds)))

    def multi_value(self) -> Exchange:
        """Several values for one tool: "the weather in Oslo and Rome"."""
        kind = self.rng.choice(list(pb.MULTI_VALUE))
        t = self.rng.choice(pb.MULTI_VALUE[kind])
        form = "ask"
        if self.broad and self.rng.random() < 0.7:
            t, form = bd.multi_value_template(self.rng, kind, self.rng.choice([2, 2, 2, 3]))
        n = 3 if "3}" in t else 2
        reqs = [_plain(q) for q in self._requests([kind] * n)]
        if len({json.dumps(q.args) for q in reqs}) < n:
            return self.multi_value()
        return self._tool_exchange(reqs, compose.wrap(self.rng, t, form, self.broad, self.tails), "+".join([kind] * n))

    def dependent(self) -> Exchange:
        """Weather first, then a calculation on its results (Fahrenheit, difference, average)."""
        kind = self.rng.choices(list(pb.SEQUENTIAL), [0.45, 0.4, 0.15])[0]
        n = {"fahrenheit": 1, "difference": 2, "average": 3}[kind]
        reqs = [_undated(q) for q in self._requests(["weather"] * n)]
        if len({q.args["city"] for q in reqs}) < n:
            return self.dependent()
        slots = {k: v for i, q in enumerate(reqs) for k, v in rq.slots(q, str(i + 1) if i else "").items()}
        t = bd.dependent_template(self.rng, kind) if self.broad else self.rng.choice(pb.SEQUENTIAL[kind])
        user = self._message(compose.wrap(self.rng, t, "ask", self.broad, self.tails), slots)
        weather = self._calls(reqs, live=True)
        expr = answers.dependent_expression(kind, [c.result["temperature"] for c in weather])
        calc = make_call("calculator", {"expression": expr}, self.rng)
        return Exchange(user, [weather, [calc]], answers.dependent(self.rng, kind, weather, calc), f"seq:{kind}")

    def followup(self, previous: Exchange) -> Exchange | None:
        """A short follow-up on the previous exchange ("And in Oslo?"), or None if it had no tool."""
        last = previous.calls[-1] if previous.calls else None
        kind = {"get_weather": "weather", "get_time": "time", "calculator": "calc", "search": "search",
                "book_restaurant": "booking"}.get(last.name) if last else None
        if kind is None or previous.task.startswith("seq"):
            return None
        req, key = _plain(self._requests([kind])[0]), kind
        if kind == "weather":
            if self.rng.random() < 0.25:
                key, req = "weather_tomorrow", rq.Request("weather", {**last.arguments, "date": "tomorrow"}, {})
        elif kind == "booking":
            key = self.rng.choice(["booking_n", "booking_time"])
            changed = "party_size" if key == "booking_n" else "time"
            req = rq.Request("booking", {**last.arguments, changed: req.args[changed]},
                             {k: v for k, v in req.slots.items() if k == ("n" if key == "booking_n" else "time")})
        t = bd.followup_template(self.rng, key) if self.broad else self.rng.choice(pb.FOLLOWUPS[key])
        return self._tool_exchange([req], t, kind)

    def smalltalk(self) -> Exchange:
        kind = self.rng.choice(list(SMALLTALK))
        bodies, replies = SMALLTALK[kind]
        x = self.rng.random() if self.broad else 1.0  # v2: v1's kinds keep their share of all exchanges
        if x < 0.28:  # places and restaurants named in statements, not requests
            kind, bodies, replies = "chat", bd.STATEMENTS, SMALLTALK["chat"][1]
        elif x < 0.3467:  # a past meal at a restaurant, or "that's all for today": nothing to do
            kind, bodies, replies = ("chat", bd.MEALS, SMALLTALK["chat"][1]) if self.rng.random() < 0.5 else \
                ("bye", bd.CLOSINGS, SMALLTALK["bye"][1])
        body = self.rng.choice([b for b in bodies if self._held_out(kind, b) == (self.split == "eval")] or bodies)
        slots = {"city": self.values.city(), "restaurant": self.values.restaurant(), "n": str(self.values.party())}
        template = self.rng.choice(pb.GREETINGS[:6]) + body + self.rng.choice(ENDINGS)
        return Exchange(self._message(template, slots), answer=self.rng.choice(replies))

    def exchange(self, previous: Exchange | None) -> Exchange:
        x = self.rng.random()
        if previous is not None and x < (0.3 if self.wide else 0.18 if self.broad else 0.12):  # v4: more follow-ups
            follow = self.followup(previous)
            if follow is not None:
                if self.terse and self.rng.random() < 0.4:  # v5: after a terse reply the value is the user's
                    previous.answer, previous.quiet = self.rng.choice(TERSE), True
                return follow
        x = self.rng.random()
        weights = (0.27, 0.17, 0.06, 0.095, 0.105) if self.broad else (0.36, 0.2, 0.07, 0.07, 0.06)
        for weight, make in zip(weights, (self.single, lambda: self.multi(2), lambda: self.multi(3),
                                          self.multi_value, self.dependent)):
            if x < weight:
                return make()
            x -= weight
        return self.smalltalk()

    def dialogue(self, max_exchanges: int = 3) -> list[Exchange]:
        n = self.rng.choices([1, 2, 3], [0.5, 0.3, 0.2])[0]
        out: list[Exchange] = []
        for _ in range(min(n, max_exchanges)):
            out.append(self.exchange(out[-1] if out else None))
        return out

    def tools(self, exchanges: list[Exchange]) -> list[dict[str, Any]]:
        """The tool list of a dialogue's system prompt: the live one mostly, sometimes the 5 demo tools
        or a subset of the live list that still holds every tool the dialogue calls."""
        x = self.rng.random()
        if x < 0.7:
            return SERVER_TOOLS
        if x < 0.85:
            return TOOLS
        used = {c.name for e in exchanges for c in e.calls}
        return [t for t in SERVER_TOOLS if t["function"]["name"] in used or self.rng.random() < 0.5]


def _undated(q: rq.Request) -> rq.Request:
    return rq.Request("weather", {"city": q.args["city"]}, {"city": q.slots["city"]})


def _plain(q: rq.Request) -> rq.Request:
    """``q`` as a short slot filler: weather without a date, a calculation as its expression."""
    if q.kind == "weather":
        return _undated(q)
    if q.words:
        return rq.Request("calc", q.args, {"expr": q.args["expression"]})
    return q


@functools.cache
def title_words() -> tuple[str, ...]:
    """Every word of two letters or more in the phrasing parts (``phrasebook``, ``broad``, small talk),
    lower case: what data v8's titles are made of."""
    words: set[str] = set()

    def walk(o: Any) -> None:
        if isinstance(o, str):
            words.update(w.lower() for w in re.findall(r"[A-Za-z]{2,}", o))
        elif isinstance(o, dict):
            for k, v in o.items():
                walk(k)
                walk(v)
        elif isinstance(o, (list, tuple, set, frozenset)):
            for x in o:
                walk(x)
    for module in (pb, bd, smalltalk):
        for key, value in vars(module).items():
            if key.isupper():
                walk(value)
    return tuple(sorted(words))


def to_messages(exchanges: list[Exchange]) -> list[dict[str, Any]]:
    return [m for x in exchanges for m in x.messages()]


def render_dialogue(exchanges: list[Exchange], tools: list[dict[str, Any]] | None = None) -> str:
    """The training text of a dialogue: the whole conversation through the chat template."""
    return render(to_messages(exchanges), SERVER_TOOLS if tools is None else tools)


def learned_turns(exchanges: list[Exchange]) -> list[bool]:
    """One flag per assistant message of ``to_messages(exchanges)``, first first: whether the model learns
    it.  Every round of calls is learned; a quiet answer is history someone else wrote: shown, not learned."""
    return [flag for x in exchanges for flag in [True] * len(x.rounds) + [not x.quiet]]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--split", default="train", choices=["train", "eval"])
    ap.add_argument("--n", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    gen = DialogueGen(args.split, args.seed)
    for _ in range(args.n):
        d = gen.dialogue()
        print(render_dialogue(d, gen.tools(d)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
