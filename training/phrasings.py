"""User phrasings, built as wrapper x template so that whole sentences can be held out.

A phrasing is a (wrapper, template) pair; pairs whose hash falls in the eval split are
only used for evaluation, so every eval sentence is a combination never seen in training,
made of pieces (wrappers, templates) that were.
"""

from __future__ import annotations

import functools
import random
import zlib

# Clauses: imperative, lower case, no final punctuation.  Questions: no final "?".
CLAUSES: dict[str, list[str]] = {
    "weather": ["check the weather in {city}", "get the weather for {city}", "tell me the weather in {city}",
                "look up the forecast for {city}", "find out how warm it is in {city}"],
    "weather_date": ["check the weather in {city} on {date}", "get the forecast for {city} for {date}",
                     "tell me the weather in {city} on {date}", "look up the {date} forecast for {city}"],
    "booking": ["book a table for {n} at {restaurant} at {time}", "reserve a table at {restaurant} for {n} at {time}",
                "get us a table for {n} at {restaurant} at {time}",
                "make a reservation at {restaurant} for {n} people at {time}", "book {restaurant} for {n} at {time}"],
    "time": ["tell me the time in {tz}", "check the current time in {tz}", "get the local time for {tz}",
             "look up the time in {tz}"],
    "calc": ["calculate {expr}", "compute {expr}", "work out {expr}", "evaluate {expr}"],
    "search": ["search for {q}", "look up {q}", "search the web for {q}", "find information about {q}",
               "do a search on {q}"],
}
QUESTIONS: dict[str, list[str]] = {
    "weather": ["What's the weather in {city}", "How is the weather in {city} today", "Is it cold in {city}",
                "What's the weather like in {city}"],
    "weather_date": ["What will the weather be in {city} on {date}", "Will it rain in {city} on {date}",
                     "What's the forecast for {city} on {date}"],
    "booking": ["Can I get a table at {restaurant} for {n} at {time}",
                "Could you book {restaurant} for {n} people at {time}"],
    "time": ["What time is it in {tz}", "What's the local time in {tz}", "What is the current time in {tz}"],
    "calc": ["What is {expr}", "How much is {expr}", "What's {expr}"],
    "search": ["What can you find about {q}", "Can you search for {q}"],
}
FOLLOWUPS: dict[str, list[str]] = {
    "weather": ["And in {city}?", "What about {city}?", "How about {city}?"],
    "time": ["And in {tz}?", "What about {tz}?"],
    "calc": ["And {expr}?", "What about {expr}?"],
}
CLAUSE_WRAPPERS = ["Please {c}.", "Can you {c}?", "Could you {c}, please?", "{C}.", "I need you to {c}.",
                   "Hey, {c}!", "Would you {c}?", "Hi! Please {c}."]
QUESTION_WRAPPERS = ["{q}?", "Hi! {q}?", "Quick question: {q}?", "{q}? Thanks!", "Hello. {q}?"]
PAIR_WRAPPERS = ["{C1} and {c2}.", "Please {c1} and {c2}.", "Can you {c1} and also {c2}?", "{C1}, then {c2}.",
                 "I need two things: {c1}, and {c2}.", "{Q1} and {c2}?", "{Q1}? Also, {c2}.", "Hi! {C1} and {c2}."]
SMALLTALK: dict[str, tuple[list[str], list[str]]] = {
    "greet": (["Hello", "Hi there", "Good morning", "Hey", "Good evening"],
              ["Hello! How can I help you today?", "Hi! What can I do for you?"]),
    "thanks": (["Thanks", "Thank you so much", "Great, thanks", "Perfect, thank you", "Cheers"],
               ["You're welcome!", "Happy to help!"]),
    "who": (["Who are you", "What can you do", "What are you able to help with", "What tools do you have"],
            ["I'm a small assistant. I can check the weather, book restaurants, tell the time, calculate and "
             "search the web."]),
    "bye": (["Goodbye", "That's all for now", "Bye", "See you later"], ["Goodbye! Have a nice day."]),
    "visit": (["I visited {city} last year", "My sister lives in {city}", "I love the food at {restaurant}"],
              ["That sounds lovely! Is there anything I can help you with?"]),
}
SMALLTALK_WRAPPERS = ["{b}.", "{b}!", "Ok. {b}.", "Well, {b}.", "{b} :)"]


def is_eval(*parts: str) -> bool:
    """Whether this combination of phrasing pieces is held out for evaluation."""
    return zlib.crc32("|".join(parts).encode()) % 4 == 0


def _cap(s: str) -> str:
    return s[:1].upper() + s[1:]


@functools.cache
def _singles(kind: str, split: str) -> tuple[str, ...]:
    """Every single-request template of ``kind`` in ``split`` (clauses wrapped, questions wrapped)."""
    out = [w.format(c=t, C=_cap(t)) for w in CLAUSE_WRAPPERS for t in CLAUSES[kind] if is_eval(w, t) == (split == "eval")]
    out += [w.format(q=t) for w in QUESTION_WRAPPERS for t in QUESTIONS[kind] if is_eval(w, t) == (split == "eval")]
    return tuple(out)


@functools.cache
def _pairs(kind1: str, kind2: str, split: str) -> tuple[str, ...]:
    out = []
    for w in PAIR_WRAPPERS:
        for first in QUESTIONS[kind1] if "{Q1}" in w else CLAUSES[kind1]:
            for second in CLAUSES[kind2]:
                if is_eval(w, first, second) == (split == "eval"):
                    out.append(w.format(c1=first, C1=_cap(first), Q1=first, c2=second.replace("}", "2}")))
    return tuple(out)


def single(rng: random.Random, split: str, kind: str) -> str:
    """A template for one request of ``kind`` (slots still unfilled)."""
    return rng.choice(_singles(kind, split))


def pair(rng: random.Random, split: str, kind1: str, kind2: str) -> str:
    """A template asking for two requests in one message; slots of the second end in ``2``."""
    return rng.choice(_pairs(kind1, kind2, split))


def followup(rng: random.Random, kind: str) -> str:
    return rng.choice(FOLLOWUPS[kind])


def smalltalk(rng: random.Random, split: str, kind: str) -> tuple[str, str]:
    """A (user template, reply) pair for a turn that needs no tool."""
    bodies, replies = SMALLTALK[kind]
    combos = [w.format(b=b) for w in SMALLTALK_WRAPPERS for b in bodies if is_eval(w, b) == (split == "eval")]
    return rng.choice(combos), rng.choice(replies)
