"""Multi-turn tool-use dialogues in the Qwen2.5 chat format, for training and held-out evaluation.

Usage: python -m training.datagen --split train --n 3 --seed 0   (prints rendered dialogues)
"""

from __future__ import annotations

import argparse
import json
import random
from dataclasses import dataclass, field
from typing import Any

from training import phrasings as ph
from training.pools import CONDITIONS, NUMBER_WORDS, Pools
from training.template import render
from training.tools_spec import TOOLS

TASKS = ("weather", "booking", "time", "calc", "search")


@dataclass
class Exchange:
    """One user message and what the assistant does about it."""

    user: str
    calls: list[dict[str, Any]] = field(default_factory=list)  # [{"name": ..., "arguments": {...}}]
    results: list[dict[str, Any]] = field(default_factory=list)
    answer: str = ""
    keys: list[str] = field(default_factory=list)  # values the final answer must carry
    task: str = "none"

    def messages(self) -> list[dict[str, Any]]:
        msgs: list[dict[str, Any]] = [{"role": "user", "content": self.user}]
        if self.calls:
            msgs.append({"role": "assistant", "content": None, "tool_calls": [
                {"type": "function", "function": c} for c in self.calls]})
            msgs += [{"role": "tool", "content": json.dumps(r, ensure_ascii=False)} for r in self.results]
        msgs.append({"role": "assistant", "content": self.answer})
        return msgs


class DialogueGen:
    """Draws exchanges and dialogues of one split from a seeded RNG."""

    def __init__(self, split: str, seed: int) -> None:
        self.split, self.rng = split, random.Random(seed)
        self.pools = Pools(split, self.rng)

    # --- one request: (slot values, call, tool result, answer, answer keys) -------------------
    def request(self, task: str, with_date: bool | None = None) -> tuple[dict[str, str], dict, dict, str, list[str]]:
        return getattr(self, "_" + task)(with_date) if task == "weather" else getattr(self, "_" + task)()

    def _weather(self, with_date: bool | None) -> tuple:
        r, p = self.rng, self.pools
        city = p.city()
        with_date = r.random() < 0.35 if with_date is None else with_date
        date = p.date()
        args = {"city": city, "date": date} if with_date else {"city": city}
        temp, cond = p.number(-15, 40), r.choice(CONDITIONS)
        result = {"city": city, "date": date, "temperature": temp, "condition": cond}
        answer = r.choice(["It's {t}°C and {k} in {c}.", "{c}: {k}, {t}°C.", "In {c} it is {k} with {t}°C.",
                           "The forecast for {c} on {d} is {k} with {t}°C."])
        return ({"city": city, "date": date}, {"name": "get_weather", "arguments": args}, result,
                answer.format(t=temp, k=cond, c=city, d=date), [str(temp), cond])

    def _booking(self) -> tuple:
        r, p = self.rng, self.pools
        rest, n, time, bid = p.restaurant(), r.randint(1, 12), p.clock(), p.booking_id()
        n_text = NUMBER_WORDS[n] if r.random() < 0.15 else str(n)
        result = {"status": "confirmed", "booking_id": bid, "restaurant": rest, "party_size": n, "time": time}
        answer = r.choice(["Your table for {n} at {r} is booked for {t}. Booking ID: {b}.",
                           "Booked! {r} at {t} for {n} (confirmation {b}).",
                           "Done: {r}, {t}, party of {n}. Your booking ID is {b}."])
        return ({"restaurant": rest, "n": n_text, "time": time},
                {"name": "book_restaurant", "arguments": {"restaurant": rest, "party_size": n, "time": time}},
                result, answer.format(n=n, r=rest, t=time, b=bid), [bid, time])

    def _time(self) -> tuple:
        r, p = self.rng, self.pools
        tz, now = p.timezone(), p.clock()
        answer = r.choice(["It's {t} in {z}.", "The local time in {z} is {t}.", "In {z} it is now {t}."])
        return ({"tz": tz}, {"name": "get_time", "arguments": {"timezone": tz}}, {"timezone": tz, "time": now},
                answer.format(t=now, z=tz), [now])

    def _calc(self) -> tuple:
        r = self.rng
        expr, value = self.pools.expression()
        answer = r.choice(["{e} = {v}.", "The result is {v}.", "That comes to {v}."])
        return ({"expr": expr}, {"name": "calculator", "arguments": {"expression": expr}}, {"result": value},
                answer.format(e=expr, v=value), [str(value)])

    def _search(self) -> tuple:
        r, p = self.rng, self.pools
        q = p.query()
        titles = [p.title() for _ in range(r.choice([1, 2]))]
        answer = r.choice(['The top result is "{t}".', 'I found "{t}".', 'Here is what I found: "{t}".'])
        return ({"q": q}, {"name": "search", "arguments": {"query": q}},
                {"results": [{"title": t} for t in titles]}, answer.format(t=titles[0]), [titles[0]])

    # --- exchanges ----------------------------------------------------------------------------
    def single(self, task: str | None = None) -> Exchange:
        task = task or self.rng.choice(TASKS)
        slots, call, result, answer, keys = self.request(task)
        kind = "weather_date" if task == "weather" and "date" in call["arguments"] else task
        user = ph.single(self.rng, self.split, kind).format(**slots)
        return Exchange(user, [call], [result], answer, keys, task)

    def parallel(self) -> Exchange:
        r = self.rng
        t1, t2 = ("weather", "booking") if r.random() < 0.4 else (r.choice(TASKS), r.choice(TASKS))
        s1, c1, res1, a1, k1 = self.request(t1)
        s2, c2, res2, a2, k2 = self.request(t2)
        if c1 == c2:
            return self.parallel()
        kinds = ["weather_date" if t == "weather" and "date" in c["arguments"] else t for t, c in ((t1, c1), (t2, c2))]
        template = ph.pair(r, self.split, kinds[0], kinds[1])
        user = template.format(**s1, **{k + "2": v for k, v in s2.items()})
        return Exchange(user, [c1, c2], [res1, res2], f"{a1} {a2}", k1 + k2, f"{t1}+{t2}")

    def followup(self, task: str) -> Exchange:
        slots, call, result, answer, keys = self.request(task, with_date=False)
        return Exchange(ph.followup(self.rng, task).format(**slots), [call], [result], answer, keys, task)

    def smalltalk(self) -> Exchange:
        kind = self.rng.choice(list(ph.SMALLTALK))
        user, reply = ph.smalltalk(self.rng, self.split, kind)
        user = user.format(city=self.pools.city(), restaurant=self.pools.restaurant())
        return Exchange(user, answer=reply)

    def exchange(self, previous: Exchange | None) -> Exchange:
        x = self.rng.random()
        if previous is not None and previous.task in ph.FOLLOWUPS and x < 0.15:
            return self.followup(previous.task)
        if x < 0.55:
            return self.single()
        if x < 0.85:
            return self.parallel()
        return self.smalltalk()

    def dialogue(self, max_exchanges: int = 3) -> list[Exchange]:
        n = self.rng.choices([1, 2, 3], [0.5, 0.3, 0.2])[0]
        out: list[Exchange] = []
        for _ in range(min(n, max_exchanges)):
            out.append(self.exchange(out[-1] if out else None))
        return out


def to_messages(exchanges: list[Exchange]) -> list[dict[str, Any]]:
    return [m for x in exchanges for m in x.messages()]


def render_dialogue(exchanges: list[Exchange]) -> str:
    """The training text of a dialogue: the whole conversation through the chat template."""
    return render(to_messages(exchanges), TOOLS)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--split", default="train", choices=["train", "eval"])
    ap.add_argument("--n", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    gen = DialogueGen(args.split, args.seed)
    for _ in range(args.n):
        print(render_dialogue(gen.dialogue()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
