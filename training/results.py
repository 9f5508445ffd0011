"""Tool results in the shapes the live tools return, rendered as the runtime renders them, and the
values an answer must quote.

``get_weather``, ``book_restaurant``, ``search`` and ``calculator`` are the real built-in tools
(``workers/tools/builtin.py``; deterministic demo data).  ``get_time`` reads the clock, so its
result is drawn here in the same shape.  The runtime sends a result to the model as
``msgspec.json.encode(result)`` (compact, UTF-8) or the bare string a tool returned; a client in
client-tools mode may send other shapes, so a minority of results use older shapes or spaced JSON.

Key values (``key_values``), the facts an answer must carry:
  get_weather      temperature, condition
  book_restaurant  booking_id, restaurant, party_size, time
  get_time         HH:MM of the local time, weekday (older shape: time)
  calculator       the result
  search           the top result's title and url (older shape: title)
"""

from __future__ import annotations

import datetime as dt
import json
import random
from dataclasses import dataclass, field
from typing import Any

from training.values import WEEKDAYS, calc
from workers.tools.builtin import book_restaurant, get_weather, search


@dataclass
class Call:
    """One tool call of a dialogue: the call, the result's text as the model reads it, key values."""

    name: str
    arguments: dict[str, Any]
    content: str = ""
    keys: list[str] = field(default_factory=list)
    result: Any = None

    def as_call(self) -> dict[str, Any]:
        return {"name": self.name, "arguments": self.arguments}


def compact(result: Any) -> str:
    """What the runtime puts in the tool message (``msgspec.json.encode``; strings as they are)."""
    return result if isinstance(result, str) else json.dumps(result, ensure_ascii=False, separators=(",", ":"))


def time_result(rng: random.Random, tz: str) -> dict[str, str]:
    """A ``get_time`` result for a random instant, in the live tool's shape."""
    day = dt.date(2026, 1, 1) + dt.timedelta(days=rng.randrange(3 * 365))
    h, m, s = rng.randrange(24), rng.randrange(60), rng.randrange(60)
    off = 0 if tz == "UTC" else rng.choice([-8, -7, -6, -5, -4, -3, 0, 1, 2, 3, 4, 5, 8, 9, 10, 12]) * 60 + rng.choice(
        [0, 0, 0, 30])
    sign = "+" if off >= 0 else "-"
    hh, mm = divmod(abs(off), 60)
    iso = f"{day.isoformat()}T{h:02d}:{m:02d}:{s:02d}{sign}{hh:02d}:{mm:02d}"
    return {"timezone": tz, "datetime": iso, "weekday": WEEKDAYS[day.weekday()], "utc_offset": f"{sign}{hh:02d}{mm:02d}"}


def run(name: str, args: dict[str, Any], rng: random.Random) -> Any:
    """The tool's result for ``args`` in the live shape (``get_time`` drawn from ``rng``)."""
    if name == "get_weather":
        return get_weather(**args)
    if name == "book_restaurant":
        return book_restaurant(**args)
    if name == "search":
        return search(**args)
    if name == "calculator":
        return calc(args["expression"])
    if name == "get_time":
        return time_result(rng, args["timezone"])
    raise ValueError(f"unknown tool {name!r}")


def key_values(name: str, result: Any) -> list[str]:
    """The values an answer to this result must quote (see the module docstring)."""
    if name == "get_weather":
        return [str(result["temperature"]), result["condition"]]
    if name == "book_restaurant":
        return [result["booking_id"], result["restaurant"], str(result["party_size"]), result["time"]]
    if name == "get_time":
        return [result["time"]] if "time" in result else [result["datetime"][11:16], result["weekday"]]
    if name == "calculator":
        return [str(result["result"]) if isinstance(result, dict) else result]
    if name == "search":
        top = result["results"][0]
        return [top["title"], top["url"]] if "url" in top else [top["title"]]
    raise ValueError(f"unknown tool {name!r}")


def older_shape(name: str, result: Any, rng: random.Random) -> Any:
    """The shapes the previous demo tools returned (and a client might send): smaller, other keys."""
    if name == "get_time":
        return {"timezone": result["timezone"], "time": result["datetime"][11:16]}
    if name == "calculator":
        value = float(result) if "." in result or "e" in result else int(result)
        return {"result": value}
    if name == "search":
        return {"results": [{"title": r["title"]} for r in result["results"][:rng.choice([1, 2])]]}
    return result


def make_call(name: str, args: dict[str, Any], rng: random.Random, live: bool = True,
              titles: list[str] | None = None) -> Call:
    """A call with its result: the live shape and rendering, or (``live=False``) a client's variant;
    ``titles`` replace a search's result titles (a search tool of the user's own, same shape)."""
    result = run(name, args, rng)
    if titles and name == "search":
        result = result | {"results": [r | {"title": t} for r, t in zip(result["results"], titles)]}
    text = compact(result)
    if not live:
        result = older_shape(name, result, rng)
        text = result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)
    return Call(name, args, text, key_values(name, result), result)
