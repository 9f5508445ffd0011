"""EVALUATION ONLY: a second template family for the harder evaluation set, written apart from the
training phrasings and never imported by the training data generator (a test checks both that and
that no literal fragment of these templates occurs in generated training messages).

The procedure differs from training's, too: whole-sentence templates written by hand (training
composes verbs x objects x wrappers), their own joins for several requests, and their own noise
(keyboard-neighbour typos, Title Case, missing spaces after commas, chat abbreviations).  Slots
are the training ones, so values (and how they are written: ``7pm``, ``Tokyo``) are shared.
"""

from __future__ import annotations

import random
import re

SINGLE: dict[str, list[str]] = {
    "weather": ["Could you let me know the weather situation in {city}{when}?", "Weather check for {city}{when}, if you would.",
                "I'm curious about the temperature over in {city}{when}.", "Before I head out: forecast in {city}{when}?",
                "How does the weather look for {city}{when}?", "Need the forecast — {city}{when}.",
                "Is {city} going to be rainy or sunny{when}?", "Tell me what the weather is doing over in {city}{when}.",
                "What kind of weather are they having in {city}{when}?", "Mind checking if it's warm in {city}{when}?",
                "Planning a walk in {city}{when}. Will I get wet from the rain?"],
    "booking": ["We'd love a table at {restaurant} — {n}, around {time}.", "Reserve for us at {restaurant}: {n}, {time}, thanks.",
                "Please sort out a reservation for {n} at {restaurant}, {time} works.",
                "Table at {restaurant} for {n} tonight at {time}, please.",
                "Put us down at {restaurant} for {time}, party size {n}.", "{restaurant} at {time} for {n} — can you make that happen?",
                "Hoping to have dinner at {restaurant} at {time}. We're {n}. Can you book it?",
                "Let's eat at {restaurant}! Book {n} seats for {time}."],
    "time": ["Do you happen to know what time it is over in {place}?", "Current hour in {place}, please.",
             "I need to call someone in {place}. What's the time there?", "Clock check: {place}.",
             "Tell me the hour in {place}.", "Got the current time for {place} handy?",
             "Is it already late in {place}? What's the time?", "What does the clock show in {place} right about now?"],
    "calc": ["Help me with some math: {expr}", "Quick sum for you: {expr}", "I need the result of {expr}.",
             "{expr} — what does that give?", "What would {expr} be?", "Do the arithmetic for {expr}, please.",
             "Run the numbers on {expr}.", "Mind computing {expr} for me?"],
    "search": ["I want to read up on {q}. Search the web please.", "Could you search around for {q}?",
               "Web search time: {q}.", "Find me web pages on {q}.", "Look online for {q}, please.",
               "What does the internet say about {q}?", "I'd like some search results about {q}.",
               "Can you google something for me? {q}"],
}
CLAUSES: dict[str, list[str]] = {
    "weather": ["let me know the weather situation in {city}", "see how warm it gets in {city}", "grab the forecast in {city}",
                "check what the weather is doing in {city}"],
    "booking": ["sort out a table at {restaurant} for {n} at {time}", "reserve {n} seats at {restaurant} for {time}",
                "put us down at {restaurant}, {n} people, {time}"],
    "time": ["tell me the hour in {place}", "find the current time over in {place}", "see what the clock shows in {place}"],
    "calc": ["do the arithmetic for {expr}", "run the numbers on {expr}", "work this one out: {expr}"],
    "search": ["search around for {q}", "look online for {q}", "find web pages on {q}"],
}
WORDS: dict[str, list[str]] = {"+": ["What do I get if I add {a} and {b}?", "Sum up {a} and {b} for me."],
                               "-": ["Take {b} from {a} — what's left?"],
                               "*": ["What do I get if I multiply {a} by {b}?", "Multiply {a} by {b} quickly."],
                               "/": ["If I share {a} between {b}, what's each share? Divide it please."]}
JOINS = ["{A}. Oh, and {B}.", "{A} — and while you're at it, {B}.", "Two things: {A}; {B}.",
         "{A}, plus could you {B}?", "{A}. Besides that, {B}.", "Could you {A}? Next, {B}."]
JOINS3 = ["Three things: {A}; {B}; {C}.", "{A}. Oh, and {B}. Lastly, {C}.", "Could you {A}, {B}, and finally {C}?"]
MULTI_VALUE = {"weather": ["Compare the forecasts for {city} and {city2}, please.",
                           "Weather check for both {city} and {city2}?"],
               "time": ["Clock check for {place} and for {place2}.", "What are the hours in {place} and {place2} now?"],
               "calc": ["Two sums for you: {expr} and {expr2}."]}
DEPENDENT = {"fahrenheit": ["Tell me how hot {city} is, in Fahrenheit please.", "I only understand °F. How warm is {city}?"],
             "difference": ["By how many degrees does {city} beat {city2} right now?",
                            "Work out the gap in temperature between {city} and {city2}."]}
FOLLOWUPS = {"weather": ["Same question for {city}.", "How about over in {city}?", "Now do {city}."],
             "time": ["Same for {place}?", "And over in {place}?"],
             "calc": ["Now try {expr}.", "Same again with {expr}?"]}
WHEN = {"none": ["", " today", " right about now"], "date": [" on {date}", " for {date}"], "tomorrow": [" tomorrow"]}
SMALLTALK = ["Morning! How's your day going?", "You've been super helpful, cheers!", "I think that's everything for today.",
             "Who made you?", "Nice work on that.", "Can you write me a haiku?", "My flight to {city} got delayed again.",
             "Dinner at {restaurant} was fantastic last night.", "It's been raining nonstop here.", "lol ok",
             "Appreciate it!", "Catch you later!", "What sort of things can you do for me?", "Sing me a song about {city}.",
             "Thanks a bunch, that's perfect.", "Yo! What's new?", "I'm so tired today.", "Good night, assistant!",
             "Are you a real person?", "That booking at {restaurant} worked out great, thank you!"]

_NEIGHBOURS = dict(zip("qwertyuiopasdfghjklzxcvbnm", ["wa", "qes", "wrd", "etf", "ryg", "tuh", "yij", "uok", "ipl", "ol",
                                                      "qsz", "awdx", "sefc", "drgv", "fthb", "gyjn", "hukm", "jilm",
                                                      "kop", "asx", "zsdc", "xdfv", "cfgb", "vghn", "bhjm", "njk"]))
_ABBREV = {"you": "u", "please": "plz", "are": "r", "thanks": "thnx", "because": "cuz"}
_SLOT = re.compile(r"\{\w+\}")


def noise(rng: random.Random, text: str, values: list[str]) -> str:
    """Eval-only noise outside ``values``: neighbour-key typos, Title Case, no space after commas, u/plz."""
    protected = [(m.start(), m.end()) for v in values if v for m in re.finditer(re.escape(v), text)]

    def free(i: int, j: int) -> bool:
        return all(j <= a or i >= b for a, b in protected)

    out, x = [], rng.random()
    for m in re.finditer(r"\S+|\s+", text):
        word, i, j = m.group(), m.start(), m.end()
        if free(i, j) and not word.isspace():
            bare = word.lower().strip(".,?!")
            if x < 0.15 and bare in _ABBREV:
                word = word.lower().replace(bare, _ABBREV[bare])
            elif x < 0.45 and len(word) >= 5 and word.isalpha() and rng.random() < 0.15:
                k = rng.randrange(1, len(word) - 1)
                word = word[:k] + rng.choice(_NEIGHBOURS.get(word[k].lower(), word[k])) + word[k + 1:]
            elif 0.45 <= x < 0.55 and word.islower():
                word = word.capitalize()
        out.append(word)
    text = "".join(out)
    return text.replace(", ", ",") if rng.random() < 0.1 else text


def fragments(template: str) -> list[str]:
    """The literal pieces of a template between its slots (what must never occur in training data)."""
    return [p.strip() for p in _SLOT.split(template) if p.strip()]


def all_templates() -> list[str]:
    """Every eval-only template, for the no-overlap test."""
    groups = [*SINGLE.values(), *CLAUSES.values(), *WORDS.values(), JOINS, JOINS3, *MULTI_VALUE.values(),
              *DEPENDENT.values(), *FOLLOWUPS.values(), SMALLTALK]
    return [t for g in groups for t in g]
