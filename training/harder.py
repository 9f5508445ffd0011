"""The harder evaluation set: requests phrased by the evaluation-only template family
(``training/heldout_phrasings.py``), with held-out values, answered by the real tools.

Values come from the eval split of the value pools (cities, restaurants, queries, expressions,
times and dates no training dialogue contains; time zones are the known ones, named by city or by
IANA name).  Every category of the in-distribution set has its counterpart here.
"""

from __future__ import annotations

import random
from typing import Any

from training import heldout_phrasings as hp
from training import requests as rq
from training.answers import dependent_expression
from training.evalsets import COUNTS, Item, task_of
from training.results import Call, make_call
from training.values import Values

_KINDS = ("weather", "booking", "time", "calc", "search")


class HarderGen:
    """Draws harder-set prompts from one seeded RNG."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed ^ 0x5EED)
        self.values = Values("eval", self.rng)

    def _req(self, kind: str, words_ok: bool = True) -> rq.Request:
        req = rq.draw(kind, self.values, lower_values=self.rng.random() < 0.05)
        if kind == "weather" and req.when == "date" and "date" not in req.slots:
            req.slots["date"] = req.args["date"]
        if req.words and not words_ok:
            req = rq.Request("calc", req.args, {"expr": req.args["expression"]})
        return req

    def _fill(self, template: str, reqs: list[rq.Request]) -> str:
        """``template`` with the requests' slots (the n-th request's slots end in n, from 2), noised."""
        slots: dict[str, str] = {}
        for i, q in enumerate(reqs):
            suffix = str(i + 1) if i else ""
            if "{when}" in template and q.kind == "weather":
                template = template.replace("{when}", self.rng.choice(hp.WHEN[q.when]), 1)
            slots.update({k + suffix: v for k, v in q.slots.items()})
        text = template.format(**slots)
        return hp.noise(self.rng, text, list(slots.values()))

    def _single_template(self, req: rq.Request) -> str:
        if req.words:
            op = req.args["expression"].split()[1]
            return self.rng.choice(hp.WORDS[op])
        return self.rng.choice(hp.SINGLE[req.kind])

    def _calls(self, reqs: list[rq.Request]) -> list[Call]:
        return [make_call(q.tool, q.args, self.rng) for q in reqs]

    def single(self, kind: str) -> tuple[str, list[Call]]:
        req = self._req(kind)
        return self._fill(self._single_template(req), [req]), self._calls([req])

    def multi(self, n: int) -> tuple[str, list[Call]]:
        reqs = [self._plain(self._req(k, words_ok=False)) for k in self.rng.sample(_KINDS, n)]
        clauses = [self.rng.choice(hp.CLAUSES[q.kind]).replace("}", (str(i + 1) if i else "") + "}")
                   for i, q in enumerate(reqs)]
        join = self.rng.choice(hp.JOINS if n == 2 else hp.JOINS3)
        template = join.format(**dict(zip("ABC", clauses)))
        return self._fill(template[:1].upper() + template[1:], reqs), self._calls(reqs)

    def multi_value(self) -> tuple[str, list[Call]]:
        kind = self.rng.choice(list(hp.MULTI_VALUE))
        reqs = [self._plain(self._req(kind, words_ok=False)) for _ in range(2)]
        if reqs[0].args == reqs[1].args:
            return self.multi_value()
        return self._fill(self.rng.choice(hp.MULTI_VALUE[kind]), reqs), self._calls(reqs)

    @staticmethod
    def _plain(req: rq.Request) -> rq.Request:
        if req.kind == "weather":
            return rq.Request("weather", {"city": req.args["city"]}, {"city": req.slots["city"]})
        return req

    def dependent(self) -> tuple[str, list[Call], Call]:
        kind = self.rng.choice(list(hp.DEPENDENT))
        reqs = [self._plain(self._req("weather")) for _ in range(1 if kind == "fahrenheit" else 2)]
        if len({q.args["city"] for q in reqs}) < len(reqs):
            return self.dependent()
        first = self._calls(reqs)
        expr = dependent_expression(kind, [c.result["temperature"] for c in first])
        return self._fill(self.rng.choice(hp.DEPENDENT[kind]), reqs), first, make_call("calculator", {"expression": expr}, self.rng)

    def followup(self) -> tuple[list[dict[str, Any]], str, list[Call]]:
        kind = self.rng.choice(list(hp.FOLLOWUPS))
        user, calls = self.single(kind)
        history = _round_trip(user, calls, "Done.")
        req = self._plain(self._req(kind, words_ok=False))
        return history, self._fill(self.rng.choice(hp.FOLLOWUPS[kind]), [req]), self._calls([req])

    def smalltalk(self) -> str:
        slots = {"city": self.values.city(), "restaurant": self.values.restaurant()}
        return hp.noise(self.rng, self.rng.choice(hp.SMALLTALK).format(**slots), list(slots.values()))


def _round_trip(user: str, calls: list[Call], answer: str | None = None) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "user", "content": user}, {"role": "assistant", "content": None,
                                  "tool_calls": [{"type": "function", "function": c.as_call()} for c in calls]}]
    msgs += [{"role": "tool", "content": c.content} for c in calls]
    return msgs + ([{"role": "assistant", "content": answer}] if answer else [])


def _call_item(category: str, messages: list[dict[str, Any]], calls: list[Call]) -> Item:
    expected = [c.as_call() for c in calls]
    return Item("call", category, task_of(expected), messages, expected)


def harder(seed: int = 0, scale: float = 1.0) -> list[Item]:
    """The harder set: every category of ``COUNTS``, eval-only phrasings, held-out values, real tools."""
    g, n = HarderGen(seed), {k: max(1, int(v * scale)) for k, v in COUNTS.items()}
    items = [_call_item("single", [{"role": "user", "content": u}], c)
             for u, c in (g.single(_KINDS[i % 5]) for i in range(n["single"]))]
    for cat, make in (("pair", lambda: g.multi(2)), ("triple", lambda: g.multi(3)), ("multi_value", g.multi_value)):
        items += [_call_item(cat, [{"role": "user", "content": u}], c) for u, c in (make() for _ in range(n[cat]))]
    for i in range(n["dependent"]):
        user, first, calc = g.dependent()
        items.append(_call_item("dependent", _round_trip(user, first), [calc]) if i % 2 == 0
                     else _call_item("dependent", [{"role": "user", "content": user}], first))
    for _ in range(n["followup"]):
        history, user, calls = g.followup()
        items.append(_call_item("followup", history + [{"role": "user", "content": user}], calls))
    items += [Item("none", "smalltalk", "none", [{"role": "user", "content": g.smalltalk()}]) for _ in range(n["smalltalk"])]
    for i in range(n["answer"]):
        user, calls = g.multi(2) if i % 4 == 3 else g.single(_KINDS[i % 5])
        items.append(Item("answer", "answer", task_of([c.as_call() for c in calls]), _round_trip(user, calls),
                          keys=[k for c in calls for k in c.keys]))
    return items
