"""Values, their surface forms and the live tools' result shapes."""

from __future__ import annotations

import random
import re
import zoneinfo

import msgspec
import pytest

from training import surface
from training.results import compact, make_call, older_shape, run, time_result
from training.scoring import same_value
from training.values import MONTHS, NUMBER_WORDS, Values
from training.zones import ZONE_OF_CITY, ZONES
from workers.tools.builtin import get_time


def _read_clock(text: str) -> str:
    """Our own reading of a surface time, to check ``surface.clock`` against."""
    if text == "noon":
        return "12:00"
    m = re.fullmatch(r"(\d{1,2})(?::(\d\d))? ?([ap])?\.?m?\.?", text.lower())
    assert m, text
    h, minute, ampm = int(m.group(1)), m.group(2) or "00", m.group(3)
    if ampm == "p" and h != 12:
        h += 12
    if ampm == "a" and h == 12:
        h = 0
    return f"{h:02d}:{minute}"


def test_surface_forms_mean_their_canonical_value() -> None:
    rng, v = random.Random(3), Values("train", random.Random(4))
    for _ in range(500):
        hhmm, n, iso, _ = v.clock(), v.party(), v.date(), v.expression()  # the draw keeps the sequence
        assert _read_clock(surface.clock(rng, hhmm)) == hhmm
        typed = surface.party(rng, n)
        assert (int(typed) if typed.isdigit() else NUMBER_WORDS.index(typed)) == n
        d = surface.date(rng, iso)
        assert d == iso or str(int(iso[8:])) in d and MONTHS[int(iso[5:7]) - 1] in d and iso[:4] in d
        tz = v.zone()
        assert ZONE_OF_CITY.get(surface.zone(rng, tz), surface.zone(rng, tz) if tz == "UTC" else tz) in (tz, "UTC")


def test_symbolic_surface_expressions_keep_their_value() -> None:
    rng, v = random.Random(5), Values("train", random.Random(6))
    for _ in range(300):
        expr = v.expression()
        typed = surface.expression(rng, expr)
        if not re.search(r"[a-z%×÷]", typed):
            assert same_value("expression", typed, expr), (typed, expr)


def test_zones_are_real_and_named_by_their_city() -> None:
    for zone in ZONES:
        zoneinfo.ZoneInfo(zone)
    assert ZONE_OF_CITY["New York"] == "America/New_York" and ZONE_OF_CITY["Tokyo"] == "Asia/Tokyo"
    assert len(ZONE_OF_CITY) == len(ZONES)


@pytest.mark.parametrize("name,args", [
    ("get_weather", {"city": "Zürich"}), ("get_weather", {"city": "Oslo", "date": "2027-05-01"}),
    ("book_restaurant", {"restaurant": "Chez Nous", "party_size": 2, "time": "19:00"}),
    ("search", {"query": "best pizza in Rome"}), ("calculator", {"expression": "10 / 4"})])
def test_results_are_the_live_tools_rendered_as_the_runtime_does(name: str, args: dict) -> None:
    call = make_call(name, args, random.Random(0))
    result = run(name, args, random.Random(0))
    assert call.content == (result if isinstance(result, str) else msgspec.json.encode(result).decode())


def test_time_results_have_the_live_shape() -> None:
    live = get_time("Asia/Tokyo")
    drawn = time_result(random.Random(1), "Asia/Tokyo")
    assert drawn.keys() == live.keys() and all(type(drawn[k]) is type(live[k]) for k in live)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d", drawn["datetime"])
    assert drawn["utc_offset"] == drawn["datetime"][-6:].replace(":", "")


def test_older_shapes_are_smaller_and_keep_their_key_values() -> None:
    rng = random.Random(2)
    assert older_shape("calculator", "2.5", rng) == {"result": 2.5}
    assert older_shape("get_time", time_result(rng, "UTC"), rng).keys() == {"timezone", "time"}
    old = make_call("search", {"query": "tea"}, rng, live=False)
    assert old.keys == [old.result["results"][0]["title"]] and '": ' in old.content
    assert compact({"a": "é"}) == '{"a":"é"}'
