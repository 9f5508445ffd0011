"""Value pools: cities, restaurants, timezones, queries, dates, times and numbers.

Every value belongs to exactly one split, decided by a stable hash of its text (1 in 5 goes
to ``eval``), so the held-out pool is disjoint from the training pool by construction.
A few real names (Paris, Chez Nous, Europe/Paris, ...) are always ``train``, for the demo.
"""

from __future__ import annotations

import random
import zlib
from typing import Callable

SPLITS = ("train", "eval")

_ONSETS = "b c d f g h j k l m n p r s t v w z br ch dr gr kr pl sh st th tr".split()
_VOWELS = "a e i o u ai ea ou".split()
_CODAS = ["", "", "n", "r", "l", "s", "m", "k"]
_CITY_PREFIX = ["San", "Port", "New", "Lake", "Mount", "Saint"]
_CITY_SUFFIX = ["Falls", "Bay", "City", "Springs", "Heights"]
REAL_CITIES = ("Paris London Tokyo Berlin Madrid Rome Sydney Cairo Lima Oslo Dublin Vienna Prague Lisbon Seoul "
               "Mumbai Toronto Chicago Boston Austin Denver Nairobi Lagos Istanbul Athens Warsaw Zurich Geneva "
               "Munich Amsterdam Brussels Copenhagen Stockholm Helsinki Bangkok Singapore Jakarta Manila Hanoi "
               "Beijing Shanghai Osaka Kyoto Melbourne Auckland Vancouver Montreal Bogota Santiago Havana Dubai "
               "Doha Delhi Dhaka").split() + ["New York", "Mexico City", "Buenos Aires", "San Francisco", "Los Angeles"]
REAL_RESTAURANTS = ["Chez Nous", "Luigi's", "Noma", "The Ivy", "Nobu", "Le Bernardin", "Pizza Roma", "Sushi Zen"]
REAL_TIMEZONES = ["Europe/Paris", "Europe/London", "Europe/Berlin", "Asia/Tokyo", "America/New_York",
                  "America/Chicago", "America/Los_Angeles", "Australia/Sydney", "Asia/Kolkata", "Africa/Cairo", "UTC"]
_REGIONS = "Europe Asia America Africa Australia Pacific Atlantic Indian".split()
_ADJ = ("Golden Blue Red Green Silver Hungry Happy Little Old Royal Lucky Rusty Wild Crimson Quiet Brave Jolly "
        "Velvet Copper Iron Salty Sweet Spicy Smoky Purple Dancing Sleepy Clever Humble Proud").split()
_NOUN = ("Fork Spoon Lantern Oak Anchor Kettle Olive Pepper Lemon Dragon Tiger Fox Owl Bear Rooster Harbor "
         "Garden Table Door Bridge Mill Barrel Crown Feather Pearl Orchard Compass Candle Moon Sparrow").split()
_RESTAURANT_FORMS = ["Chez {n}", "{n}'s Kitchen", "{n} Bistro", "Trattoria {n}", "The {a} {o}", "{n} Sushi Bar",
                     "Cafe {n}", "La {n}", "{n} Grill", "The {n} House", "{a} {o} Diner", "Le Petit {n}"]
_TOPICS = ("pizza bread coffee tea bicycle garden piano guitar camera laptop sourdough pasta soup salad tomato "
           "chess yoga running hiking sailing painting pottery knitting football tennis cheese chocolate honey "
           "rice noodles wine beer jazz opera castle museum beach mountain river forest volcano robot rocket").split()
_VERBS = "fix clean paint build repair cook grow tune choose store bake brew".split()
_EVENTS = "festival marathon museum airport zoo concert market hotels restaurants parks".split()
_QUERY_FORMS = ["best {t} in {c}", "history of {c}", "how to {v} a {t}", "{c} {e}", "{t} {t2} prices",
                "cheap flights to {c}", "{r} opening hours", "news about {t}", "{t} recipes", "{t} and {t2} ideas"]
_TITLE_FORMS = ["{C} Travel Guide", "Top 10 {T} Spots in {c}", "The {a} {o} Blog", "{T} Today", "{c} News",
                "A Short History of {c}", "{a} {T} Review", "Learn {T} with {n}"]
CONDITIONS = ["sunny", "cloudy", "rainy", "windy", "foggy", "snowy", "stormy", "clear", "partly cloudy", "drizzle"]
NUMBER_WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve"]


def split_of(value: str) -> str:
    """The split a value belongs to: ``eval`` for 1 in 5 values by a stable hash, else ``train``."""
    return "eval" if zlib.crc32(value.encode()) % 5 == 0 else "train"


class Pools:
    """Draws values of one split; every draw is rejection-sampled into that split."""

    def __init__(self, split: str, rng: random.Random) -> None:
        assert split in SPLITS
        self.split, self.rng = split, rng

    def _draw(self, make: Callable[[], str], real: list[str] | None = None, p_real: float = 0.0) -> str:
        if real and self.split == "train" and self.rng.random() < p_real:
            return self.rng.choice(real)
        while True:
            value = make()
            if split_of(value) == self.split and not (real and value in real):
                return value

    def name(self) -> str:
        """A pronounceable made-up proper name of 1 to 3 syllables."""
        r = self.rng
        n = r.choices([1, 2, 3], [0.2, 0.65, 0.15])[0]
        word = "".join(r.choice(_ONSETS) + r.choice(_VOWELS) + r.choice(_CODAS) for _ in range(n))
        return word.capitalize()

    def city(self) -> str:
        def make() -> str:
            r, base = self.rng.random(), self.name()
            if r < 0.1:
                return f"{self.rng.choice(_CITY_PREFIX)} {base}"
            if r < 0.2:
                return f"{base} {self.rng.choice(_CITY_SUFFIX)}"
            return base
        return self._draw(make, REAL_CITIES, 0.15)

    def restaurant(self) -> str:
        def make() -> str:
            form = self.rng.choice(_RESTAURANT_FORMS)
            return form.format(n=self.name(), a=self.rng.choice(_ADJ), o=self.rng.choice(_NOUN))
        return self._draw(make, REAL_RESTAURANTS, 0.1)

    def timezone(self) -> str:
        def make() -> str:
            return f"{self.rng.choice(_REGIONS)}/{self.city().replace(' ', '_')}"
        return self._draw(make, REAL_TIMEZONES, 0.15)

    def query(self) -> str:
        def make() -> str:
            r = self.rng
            return r.choice(_QUERY_FORMS).format(t=r.choice(_TOPICS), t2=r.choice(_TOPICS), v=r.choice(_VERBS),
                                                 e=r.choice(_EVENTS), c=self.city(), r=self.restaurant())
        return self._draw(make)

    def title(self) -> str:
        r = self.rng
        c = self.city()
        t = r.choice(_TOPICS)
        return r.choice(_TITLE_FORMS).format(C=c, c=c, T=t.capitalize(), a=r.choice(_ADJ), o=r.choice(_NOUN),
                                             n=self.name())

    def date(self) -> str:
        def make() -> str:
            return f"{self.rng.randint(2025, 2030)}-{self.rng.randint(1, 12):02d}-{self.rng.randint(1, 28):02d}"
        return self._draw(make)

    def clock(self) -> str:
        def make() -> str:
            minute = self.rng.choice([0, 15, 30, 45]) if self.rng.random() < 0.6 else self.rng.randint(0, 59)
            return f"{self.rng.randint(0, 23):02d}:{minute:02d}"
        return self._draw(make)

    def number(self, lo: int, hi: int) -> int:
        return int(self._draw(lambda: str(self.rng.randint(lo, hi))))

    def booking_id(self) -> str:
        return self._draw(lambda: f"R{self.rng.randint(10000, 99999)}")

    def expression(self) -> tuple[str, int]:
        """An arithmetic expression as a user would type it, and its integer value."""
        while True:
            a, b, c = (self.number(1, 999) for _ in range(3))
            ops = [self.rng.choice("+-*") for _ in range(2)]
            form = self.rng.choice(["{a} {o} {b}", "{a} {o} {b} {p} {c}", "({a} {o} {b}) {p} {c}",
                                    "{a} {o} ({b} {p} {c})"])
            expr = form.format(a=a, b=b, c=c, o=ops[0], p=ops[1])
            if self.rng.random() < 0.2:
                expr = expr.replace(" ", "")
            if self.rng.random() < 0.15 and "(" not in expr and a % b == 0 and form == "{a} {o} {b}":
                expr = f"{a} / {b}"
            value = eval(expr)  # noqa: S307 - our own digits and operators only
            if value == int(value) and split_of(expr) == self.split:
                return expr, int(value)
