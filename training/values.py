"""Slot values (cities, restaurants, time zones, queries, dates, clock times, party sizes, expressions)
and the ways a user writes them.

Every value belongs to one split by a stable hash of its text (1 in 5 is ``eval``), so held-out
values are never trained on.  A value has a canonical form (what the tool call carries) and a
surface form (what the user typed): ``19:00`` may be typed ``7pm``, ``2`` may be ``two``,
``Asia/Tokyo`` may be ``Tokyo``, ``12 * 7`` may be ``12 times 7``.
"""

from __future__ import annotations

import random
import zlib
from typing import Callable

from training.scripts import name
from training.zones import ZONES, city_of
from workers.tools.calculator import evaluate, format_number
from workers.tools.registry import ToolError

SPLITS = ("train", "eval")
DEMO_VALUES = frozenset(["Paris", "Chez Nous", "Europe/Paris", "Tokyo", "Asia/Tokyo", "London", "Berlin"])
REAL_CITIES = tuple(
    "Paris London Tokyo Berlin Madrid Rome Sydney Cairo Lima Oslo Dublin Vienna Prague Lisbon Seoul Mumbai Toronto "
    "Chicago Boston Austin Denver Nairobi Lagos Athens Warsaw Geneva Amsterdam Brussels Copenhagen Stockholm "
    "Helsinki Bangkok Singapore Jakarta Manila Hanoi Beijing Shanghai Osaka Kyoto Melbourne Auckland Vancouver "
    "Havana Dubai Doha Delhi Dhaka Zürich Kraków Malmö Reykjavík Düsseldorf Bogotá Montréal Québec Córdoba Łódź "
    "Göteborg Tromsø Málaga Sevilla Genève Köln München Nürnberg İstanbul Besançon Brașov Gdańsk Poznań Plzeň "
    "Москва Київ Минск Αθήνα 東京 大阪 京都 北京 上海 香港 서울 부산 القاهرة دبي ירושלים मुंबई दिल्ली กรุงเทพ "
    "თბილისი Երևան".split()) + ("New York", "Mexico City", "Buenos Aires", "San Francisco", "Los Angeles",
                                "São Paulo", "Rio de Janeiro", "Санкт-Петербург", "Θεσσαλονίκη", "Hồ Chí Minh",
                                "Ciudad de México", "Saint-Étienne", "Cluj-Napoca", "תל אביב")
REAL_RESTAURANTS = ("Chez Nous", "Luigi's", "Noma", "The Ivy", "Nobu", "Le Bernardin", "Pizza Roma", "Sushi Zen",
                    "Café de Flore", "Brasserie Lipp", "Osteria Francescana", "Dishoom", "Ramen Ichiran")
_ADJ = ("Golden Blue Red Green Silver Hungry Happy Little Old Royal Lucky Rusty Wild Crimson Quiet Brave Jolly "
        "Velvet Copper Iron Salty Sweet Spicy Smoky Purple Dancing Sleepy Clever Humble Proud").split()
_NOUN = ("Fork Spoon Lantern Oak Anchor Kettle Olive Pepper Lemon Dragon Tiger Fox Owl Bear Rooster Harbor "
         "Garden Table Door Bridge Mill Barrel Crown Feather Pearl Orchard Compass Candle Moon Sparrow").split()
# data v6: titles of pages a search tool of the user's own might return (the demo tool's are "<query> - demo
# result N"): composed from the query, made-up names in any script and a few words; none of the first model's
# forms (the legacy set's "X News", "A Short History of X", ...), so that set still measures them unseen
_TITLE_FORMS = ("{Q}: what to know", "{Q} explained", "Everything about {q}", "{N} on {q}", "{Q} | {N}",
                "{Q} - {N} forum", "The {N} {w}", "{N} {w}", "{N}'s {w}", "{k} things about {q}",
                "{Q} in {N} ({y})", "Ask {N}: {q}", "{N} & {M} {w}", "The {a} {o} {w}", "{Q}? Read this first",
                "{N} - Wiki", "{Q} ({N} edition)", "Notes from {N}", "{N} {w}: {q}", "{a} {o} | {q}",
                "{N}", "{Q}", "{w} of {N}", "{Q} near {N}", "Why {q}?", "{N} {M}")
_TITLE_WORDS = ("Journal Review Daily Digest Post Times Gazette Weekly Notebook Handbook Almanac Herald Chronicle "
                "Magazine Archive Report Courier Dispatch Bulletin Insider Companion Letters Index Almanach").split()
# data v9: the page titles of the kinds the first model's search results had (and a news site or a wiki has):
# "A Short History of X", "X News", "Top 10 Y Spots in X", ... with their near variants.  Its small tokenizer
# splits "History" into ``Hi`` + ``story`` and "News" into ``N`` + ``ews``; a model that never copied those
# pairs inside a value leaves the title at ``Hi`` (the legacy set's answers), so the forms are taught as data
_PAGE_FORMS = ("{C} Travel Guide", "Top {k} {T} Spots in {C}", "The {a} {o} Blog", "{T} Today", "{C} News",
               "A Short History of {C}", "{a} {T} Review", "Learn {T} with {N}", "A Brief History of {C}",
               "The History of {T}", "History of {C}", "{C} History Museum", "{T} News", "{C} Daily News",
               "Hello {C}", "Hi {C}: {T} and more", "{T} Stories from {C}", "Welcome to {C}", "{N}'s {T} Diary",
               "Best {T} in {C}", "{C} Weekend Guide", "News from {C}", "Visit {C}", "{T} Tips for Beginners")
_RESTAURANT_FORMS = ("Chez {n}", "{n}'s Kitchen", "{n} Bistro", "Trattoria {n}", "The {a} {o}", "{n} Sushi Bar",
                     "Café {n}", "La {n}", "{n} Grill", "The {n} House", "{a} {o} Diner", "Le Petit {n}", "{n}",
                     "Taverna {n}", "{n} Ramen", "Brasserie {n}", "Osteria {n}", "Casa {n}", "{n} Noodle Bar",
                     "{n} & {m}", "Bäckerei {n}", "{n} Garden")
TOPICS = ("pizza bread coffee tea bicycle garden piano guitar camera laptop sourdough pasta soup salad tomato chess "
          "yoga running hiking sailing painting pottery knitting football tennis cheese chocolate honey rice noodles "
          "wine beer jazz opera castle museum beach mountain river forest volcano robot rocket sushi tacos curry "
          "dumplings kayaking climbing photography gardening astronomy origami").split()
_VERBS = "fix clean paint build repair cook grow tune choose store bake brew".split()
_EVENTS = "festival marathon museum airport zoo concert market hotels restaurants parks".split()
# data v3 only: names of several words with lowercase joiners and hyphens ("Ciudad de México", "São Paulo",
# "Saint-Étienne", "Café de Flore"), so a name is copied to its last word; the real ones are held out
_COMPOUND_CITIES = ("{a} de {b}", "{a} do {b}", "{a} del {b}", "{a} da {b}", "{a} la {b}", "Rio de {b}", "{a} {b}",
                    "{a} {b}", "{a} {b} {c}", "Saint-{b}", "{a}-{b}", "San {a} de {b}", "{a} an der {b}")
_COMPOUND_RESTAURANTS = ("Café de {a}", "Casa de {a}", "{a} de {b}", "La {a} del {b}", "Chez {a} {b}", "{a} {b}",
                         "Le {a} de {b}", "{a}-{b} Grill", "Osteria da {a}")
# data v4 only: the forms a user types that v3 lacked, each seen failing on the first model's frozen prompts
# (legacy set): "Cafe X" without the accent, "Mount X", made-up zones under a real region (the call copies
# "Australia/X" whole), "a - (b + c)", two-topic queries ("tea and castle ideas", "cheese bread prices")
_WIDE_RESTAURANTS = ("Cafe {n}", "Cafe {a} {o}", "{n} Cafe", "Pizzeria {n}", "The {n} Inn", "Hotel {n}", "Bar {n}")
_WIDE_CITY_LEADS = ("Mount", "Fort", "North", "South", "East", "West", "Glen", "Lake", "Port", "Cape")
_WIDE_REGIONS = ("Africa", "America", "Asia", "Atlantic", "Australia", "Europe", "Indian", "Pacific")
_WIDE_QUERIES = ("{t} and {u} ideas", "{t} {u} prices", "{t} and {u} tips", "{t} {u} tours", "{t} with {u}",
                 "{r} menu", "{c} {t} festival")
_QUERY_FORMS = ("best {t} in {c}", "history of {c}", "how to {v} a {t}", "{c} {e}", "{t} prices", "{t} near {c}",
                "cheap flights to {c}", "{r} opening hours", "news about {t}", "{t} recipes", "{t} for beginners",
                "{r} reviews", "things to do in {c}", "{t} tips", "why is {t} popular", "{c} public holidays")
CONDITIONS = ("sunny", "cloudy", "rainy", "windy", "foggy", "snowy", "stormy", "clear", "partly cloudy", "drizzle")
NUMBER_WORDS = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
                "sixteen seventeen eighteen nineteen twenty").split()
MONTHS = ("January February March April May June July August September October November December").split()
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


def split_of(value: str) -> str:
    """The split a value belongs to: ``eval`` for 1 in 5 values by a stable hash, else ``train``."""
    return "eval" if zlib.crc32(value.encode()) % 5 == 0 else "train"


class Values:
    """Draws canonical values of one split; each draw is rejection-sampled into that split."""

    def __init__(self, split: str, rng: random.Random, compound: bool = False, wide: bool = False) -> None:
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        self.split, self.rng, self.compound, self.wide = split, rng, compound, wide

    def _wide(self, p: float) -> bool:
        """Whether this draw takes a data-v4 form (``wide`` only; other versions draw nothing here)."""
        return self.wide and self.rng.random() < p

    def _compound(self, forms: tuple[str, ...]) -> str | None:
        """Now and then (``compound`` only) a name of several words from ``forms``, else None."""
        if not self.compound or self.rng.random() >= 0.15:
            return None
        r = self.rng
        latin = lambda: name(r, r.choice(["latin", "latin_x", "latin_x"]) if r.random() < 0.75 else None)
        return r.choice(forms).format(a=latin().capitalize(), b=latin().capitalize(), c=latin().capitalize())

    def _draw(self, make: Callable[[], str], real: tuple[str, ...] = (), p_real: float = 0.0) -> str:
        if real and self.rng.random() < p_real:
            pool = [v for v in real if (self.split == "train" if v in DEMO_VALUES else split_of(v) == self.split)]
            return self.rng.choice(pool)
        while True:
            value = make()
            if split_of(value) == self.split and value not in DEMO_VALUES:
                return value

    def city(self) -> str:
        def make() -> str:
            if (several := self._compound(_COMPOUND_CITIES)) is not None:
                return several
            if self._wide(0.08):
                return f"{self.rng.choice(_WIDE_CITY_LEADS)} {name(self.rng, 'latin').capitalize()}"
            x, base = self.rng.random(), name(self.rng)
            if x < 0.08:
                return f"{self.rng.choice(['San', 'Port', 'New', 'Lake', 'Saint', 'Bad'])} {name(self.rng, 'latin')}"
            if x < 0.15:
                return f"{base} {self.rng.choice(['Falls', 'Bay', 'City', 'Springs', 'Heights'])}"
            return base
        return self._draw(make, REAL_CITIES, 0.2)

    def restaurant(self) -> str:
        def make() -> str:
            r = self.rng
            if (several := self._compound(_COMPOUND_RESTAURANTS)) is not None:
                return several
            forms = _WIDE_RESTAURANTS if self._wide(0.15) else _RESTAURANT_FORMS
            return r.choice(forms).format(n=name(r), m=name(r), a=r.choice(_ADJ), o=r.choice(_NOUN))
        return self._draw(make, REAL_RESTAURANTS, 0.1)

    def title(self, query: str) -> str:
        """A search result's title (data v6): any page's, sometimes carrying the query's words."""
        r = self.rng
        names = lambda: name(r).capitalize() if r.random() < 0.8 else name(r, "latin").upper()
        return self._draw(lambda: r.choice(_TITLE_FORMS).format(
            q=query, Q=query[:1].upper() + query[1:], N=names(), M=names(), w=r.choice(_TITLE_WORDS),
            a=r.choice(_ADJ), o=r.choice(_NOUN), k=r.randint(3, 12), y=r.randint(1990, 2030)))

    def free_title(self, words: tuple[str, ...]) -> str:
        """A search result's title (data v8) of no form at all: one to six of ``words`` (Title Case or as
        they are), made-up names and numbers in any order, so copying a title cannot lean on its form."""
        r = self.rng

        def part() -> str:
            x = r.random()
            if x < 0.15:
                return name(r).capitalize()
            if x < 0.2:
                return str(r.randint(1, 2030))
            w = r.choice(words)
            return w.capitalize() if r.random() < 0.7 else w
        return self._draw(lambda: " ".join(part() for _ in range(r.choices(range(1, 7), [2, 4, 5, 4, 2, 1])[0])))

    def page_title(self) -> str:
        """A search result's title (data v9) of a common page kind (``_PAGE_FORMS``) about a made-up place,
        person or any topic."""
        r = self.rng
        return self._draw(lambda: r.choice(_PAGE_FORMS).format(
            C=name(r).capitalize(), N=name(r).capitalize(), T=r.choice(TOPICS).capitalize(), a=r.choice(_ADJ),
            o=r.choice(_NOUN), k=r.choice([3, 5, 7, 10, 10, 10, 12, 20])))

    def zone(self) -> str:
        """A real IANA zone (the model knows their regions), ``UTC`` now and then; in data v4 also now
        and then a made-up place under a real region (``Australia/Koham``), which the user types whole."""
        if self._wide(0.15):
            r = self.rng
            return self._draw(lambda: f"{r.choice(_WIDE_REGIONS)}/{name(r, 'latin').capitalize()}"
                              + (f"_{name(r, 'latin').capitalize()}" if r.random() < 0.2 else ""))
        return "UTC" if self.rng.random() < 0.04 else self.rng.choice(ZONES)

    def query(self) -> str:
        def make() -> str:
            r = self.rng
            forms = _WIDE_QUERIES if self._wide(0.2) else _QUERY_FORMS
            return r.choice(forms).format(t=r.choice(TOPICS), v=r.choice(_VERBS), e=r.choice(_EVENTS),
                                          c=self.city(), r=self.restaurant(),
                                          u=r.choice(TOPICS) if forms is _WIDE_QUERIES else "")
        return self._draw(make)

    def date(self) -> str:
        r = self.rng
        return self._draw(lambda: f"{r.randint(2025, 2030)}-{r.randint(1, 12):02d}-{r.randint(1, 28):02d}")

    def clock(self) -> str:
        r = self.rng
        return self._draw(lambda: f"{r.randint(0, 23):02d}:{r.choice([0, 0, 15, 30, 45]) if r.random() < 0.7 else r.randint(0, 59):02d}")

    def party(self) -> int:
        return self.rng.choices(range(1, 21), [3, 10, 6, 8, 4, 6, 3, 4, 2, 3] + [1] * 10)[0]

    def number(self, digits: int) -> str:
        return str(self.rng.randint(10 ** (digits - 1) if digits > 1 else 0, 10 ** digits - 1))

    def expression(self) -> str:
        """A canonical arithmetic expression (spaces around operators) in this split."""
        return self._draw(self._expression)

    def _operand(self) -> str:
        r = self.rng
        x = r.random()
        if x < 0.12:
            return f"{self.number(r.randint(1, 3))}.{self.number(1)}{r.choice(['', self.number(1)])}"
        return self.number(r.choices([1, 2, 3, 4, 5, 7, 9, 12], [8, 14, 12, 8, 5, 3, 2, 1])[0])

    def _expression(self) -> str:
        r = self.rng
        a, b, c = self._operand(), self._operand(), self._operand()
        o1, o2 = r.choice("+-*/"), r.choice("+-*")
        if self._wide(0.15):  # data v4: the parenthesised group second
            form = r.choice(["{a} {o} ({b} {p} {c})", "{a} {p} ({b} {o} {c})"])
        else:
            form = r.choices(["{a} {o} {b}", "{a} {o} {b} {p} {c}", "({a} {o} {b}) {p} {c}", "{a} ** {k}",
                              "sqrt({a})", "{p1} / 100 * {a}"], [50, 14, 10, 4, 4, 4])[0]
        if "**" in form:
            a = str(r.randint(2, 99))
        expr = form.format(a=a, b=b, c=c, o=o1, p=o2, k=r.randint(2, 9), p1=r.choice([5, 10, 12, 15, 18, 20, 25]))
        try:
            evaluate(expr)
        except ToolError:  # division by zero, sqrt of a negative number: draw again
            return self._expression()
        return expr


def calc(expr: str) -> str:
    """The calculator tool's answer for ``expr``, exactly as the live tool formats it."""
    return format_number(evaluate(expr))


def zone_cities() -> list[tuple[str, str]]:
    """(place name, zone) for every known zone."""
    return [(city_of(z), z) for z in ZONES]
