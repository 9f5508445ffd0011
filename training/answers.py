"""The assistant's final answers (training data): one sentence per tool result, quoting every key value
(``training.results.key_values``), joined in call order; and the answers to dependent requests.
"""

from __future__ import annotations

import random
from typing import Any

from training.results import Call

_WEATHER = ["It's {t}°C and {k} in {c}{on}.", "{c}{on}: {k}, {t}°C.", "In {c}{on} it's {t}°C, {k}.",
            "The weather in {c}{on}: {k} and {t}°C.", "Expect {k} and {t}°C in {c}{on}."]
_BOOKING = ["Your table for {n} at {r} is booked for {t}. Booking ID: {b}.",
            "Booked! {r} at {t} for {n} (confirmation {b}).", "Done: {r}, {t}, party of {n}. Your booking ID is {b}.",
            "I reserved a table for {n} at {r} at {t}; the booking ID is {b}."]
_TIME = ["It's {hm} on {wd} in {z}.", "The local time in {z} is {hm} ({wd}).", "In {z} it is now {hm}, {wd}.",
         "It's {wd}, {hm} in {z}."]
_TIME_OLD = ["It's {hm} in {z}.", "The local time in {z} is {hm}.", "In {z} it is now {hm}."]
_CALC = ["{e} = {v}.", "{e} is {v}.", "The result is {v}.", "That comes to {v}.", "{e} equals {v}."]
_SEARCH = ['The top result is "{title}" ({url}).', 'I found "{title}": {url}', 'Here is what I found: "{title}" at {url}.',
           'Top hit: "{title}" — {url}']
_SEARCH_OLD = ['The top result is "{title}".', 'I found "{title}".', 'Here is what I found: "{title}".']


def sentence(rng: random.Random, call: Call) -> str:
    """One sentence reporting ``call``'s result, quoting all its key values."""
    res, a = call.result, call.arguments
    if call.name == "get_weather":
        date = res.get("date", "today")
        on = "" if date == "today" else (" tomorrow" if date == "tomorrow" else f" on {date}")
        return rng.choice(_WEATHER).format(t=res["temperature"], k=res["condition"], c=res["city"], on=on)
    if call.name == "book_restaurant":
        return rng.choice(_BOOKING).format(n=res["party_size"], r=res["restaurant"], t=res["time"], b=res["booking_id"])
    if call.name == "get_time":
        if "time" in res:
            return rng.choice(_TIME_OLD).format(hm=res["time"], z=res["timezone"])
        return rng.choice(_TIME).format(hm=res["datetime"][11:16], wd=res["weekday"], z=res["timezone"])
    if call.name == "calculator":
        return rng.choice(_CALC).format(e=a["expression"], v=call.keys[0])
    if call.name == "search":
        top = res["results"][0]
        if "url" not in top:
            return rng.choice(_SEARCH_OLD).format(title=top["title"])
        return rng.choice(_SEARCH).format(title=top["title"], url=top["url"])
    raise ValueError(f"unknown tool {call.name!r}")


def answer(rng: random.Random, calls: list[Call]) -> str:
    """The final answer to a turn whose tool calls were ``calls``."""
    return " ".join(sentence(rng, c) for c in calls)


def dependent(rng: random.Random, kind: str, weather: list[Call], calc: Call) -> str:
    """The answer to a request whose calculator call used the weather results."""
    t = [c.result["temperature"] for c in weather]
    cities = [c.result["city"] for c in weather]
    v = calc.keys[0]
    if kind == "fahrenheit":
        return rng.choice(["It's {t}°C in {c}, which is {v}°F.", "{c}: {t}°C, or {v}°F.",
                           "In {c} it's {v}°F ({t}°C)."]).format(t=t[0], c=cities[0], v=v)
    if kind == "difference":
        return rng.choice(["{c1} is {t1}°C and {c2} is {t2}°C: a difference of {v}°C.",
                           "It's {t1}°C in {c1} and {t2}°C in {c2}, so the difference is {v}°C."]).format(
            c1=cities[0], c2=cities[1], t1=t[0], t2=t[1], v=v)
    parts = ", ".join(f"{c} {x}°C" for c, x in zip(cities, t))
    return rng.choice(["{p}: the average is {v}°C.", "The average of {p} is {v}°C."]).format(p=parts, v=v)


def dependent_expression(kind: str, temps: list[Any]) -> str:
    """The calculator expression a dependent request needs, from the weather results."""
    if kind == "fahrenheit":
        return f"{temps[0]} * 9 / 5 + 32"
    if kind == "difference":
        return f"{temps[0]} - {temps[1]}"
    return f"({' + '.join(str(t) for t in temps)}) / {len(temps)}"
