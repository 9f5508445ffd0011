"""The training data's phrasing parts: per intent, request cores in three forms, and the pieces that
wrap and join them.  ``training/compose.py`` builds sentences from these parts.

Forms of a core: ``do`` (an imperative clause, lower case), ``ask`` (a question without its final
mark), ``bare`` (a telegraphic request).  Cores are themselves products of parts (verbs x objects x
prepositions), so the space of sentences is large.  Slots: ``{city} {when} {restaurant} {n} {time}
{place} {expr} {q} {a} {b}``.  Nothing here is used by the evaluation-only phrasings
(``training/heldout_phrasings.py``), which are written separately.
"""

from __future__ import annotations

from itertools import product


def _x(forms: list[str], **parts: list[str]) -> list[str]:
    """Every filling of ``forms`` with the product of ``parts`` (``{V}``, ``{O}``, ...)."""
    out = []
    for form in forms:
        for combo in product(*parts.values()):
            filled = form
            for key, value in zip(parts, combo):
                filled = filled.replace("{" + key + "}", value)
            out.append(filled)
    return list(dict.fromkeys(out))


_W_VERB = ["check", "get", "tell me", "look up", "give me", "show me", "find out", "pull up", "fetch", "get me", "see",
           "bring up", "report"]
_W_OBJ = ["the weather", "the forecast", "the temperature", "the current weather", "the weather report",
          "the conditions", "the weather forecast", "the outlook", "today's weather", "the current temperature",
          "the temperatures"]
_W_ASK = ["what's the weather like in {city}{when}", "how's the weather in {city}{when}",
          "what's the forecast for {city}{when}", "is it raining in {city}{when}", "is it cold in {city}{when}",
          "is it hot in {city}{when}", "how warm is it in {city}{when}", "how cold is it in {city}{when}",
          "what's the temperature in {city}{when}", "do I need an umbrella in {city}{when}",
          "do I need a jacket in {city}{when}", "will it rain in {city}{when}", "is it sunny in {city}{when}",
          "what are the conditions in {city}{when}", "what's the weather in {city}{when}",
          "what is the weather in {city}{when}", "how is the weather in {city}{when}",
          "will it snow in {city}{when}", "what will the weather be in {city}{when}",
          "{when_lead}what's the weather in {city}", "in {city}, what's the weather{when}",
          "how hot will it be in {city}{when}", "is it warm in {city}{when}", "what's it like outside in {city}{when}",
          "what are the temperatures like in {city}{when}", "should I bring an umbrella to {city}{when}",
          "is it nice out in {city}{when}", "any snow in {city}{when}", "is it windy in {city}{when}",
          "what should I wear in {city}{when}", "how many degrees is it in {city}{when}", "is it freezing in {city}{when}"]
_W_BARE = ["weather in {city}{when}", "{city} weather{when}", "forecast for {city}{when}", "{city} forecast{when}",
           "temperature in {city}{when}", "weather {city}{when}", "{city}: weather{when}", "weather for {city}{when}"]

_B_VERB = ["book", "reserve", "get us", "get me", "grab us", "find us", "book me", "set up", "arrange", "organize",
           "secure", "make"]
_B_DO = ["{V} a table for {n} at {restaurant} at {time}", "{V} a table at {restaurant} for {n} at {time}",
         "{V} a table at {restaurant} at {time} for {n}", "{V} a table at {time} at {restaurant} for {n}",
         "{V} a table for {n} at {time} at {restaurant}", "{V} {restaurant} for {n} at {time}",
         "{V} a reservation at {restaurant} for {n} at {time}", "{V} a spot at {restaurant} for {n} at {time}",
         "{V} a table at {restaurant}, {n}, {time}", "{V} a booking at {restaurant} for {n} at {time}",
         "{V} dinner for {n} at {restaurant} at {time}", "{V} lunch at {restaurant} for {n} at {time}"]
_B_ASK = ["can we get a table for {n} at {restaurant} at {time}", "can I book {restaurant} for {n} at {time}",
          "is there a table at {restaurant} for {n} at {time}", "could we eat at {restaurant} at {time}, {n}",
          "can you get us into {restaurant} at {time} for {n}", "any chance of a table at {restaurant} for {n} at {time}",
          "can I reserve a table for {n} at {restaurant} at {time}",
          "do they have a table at {restaurant} for {n} at {time}", "can you reserve {restaurant} at {time} for {n}",
          "could you get {n} a table at {restaurant} at {time}", "is {restaurant} free at {time} for {n}"]
_B_BARE = ["table for {n} at {restaurant} at {time}", "{restaurant}, {n}, {time}", "reservation at {restaurant}: {n}, {time}",
           "{restaurant} at {time} for {n}", "dinner at {restaurant}, {time}, {n}"]
PARTY_NOUNS = ["{n}", "{n}", "{n} people", "{n} guests", "{n} persons", "a party of {n}", "{n} of us"]

_T_VERB = ["check", "get", "tell me", "look up", "give me", "show me", "find out"]
_T_OBJ = ["the time", "the local time", "the current time", "what time it is", "the clock", "the time of day"]
_T_ASK = ["what time is it in {place}", "what's the time in {place}", "what's the local time in {place}",
          "what is the current time in {place}", "do you know the time in {place}", "how late is it in {place}",
          "what time is it now in {place}", "what's the clock saying in {place}", "what hour is it in {place}",
          "in {place}, what time is it", "is it morning in {place}", "is it night in {place}",
          "what time do they have in {place}", "what's the clock in {place}", "what time is it there in {place}"]
_T_BARE = ["time in {place}", "{place} time", "current time {place}", "local time in {place}", "time {place}",
           "clock for {place}"]

_C_VERB = ["calculate", "compute", "work out", "evaluate", "solve", "figure out", "do", "add up", "total up", "tally",
           "find the value of", "give me the result of", "help me calculate", "do the math for", "check my math:",
           "do some arithmetic:", "crunch"]
_C_ASK = ["what's {expr}", "what is {expr}", "how much is {expr}", "what does {expr} come to",
          "what do you get for {expr}", "{expr} equals what", "what's the answer to {expr}", "whats {expr}",
          "how much does {expr} make", "can you do {expr}", "what's the result of {expr}", "what does {expr} equal",
          "do you know what {expr} is", "is {expr} a big number"]
_C_BARE = ["{expr}", "{expr} = ?", "{expr}=?", "{expr} =", "calc {expr}", "math: {expr}"]
CALC_WORDS = {"+": ["add {a} and {b}", "add {a} to {b}", "the sum of {a} and {b}", "sum {a} and {b}"],
              "-": ["subtract {b} from {a}", "take {b} away from {a}", "the difference between {a} and {b}"],
              "*": ["multiply {a} by {b}", "multiply {a} and {b}", "the product of {a} and {b}"],
              "/": ["divide {a} by {b}", "{a} split {b} ways", "the quotient of {a} and {b}"]}

_S_VERB = ["search for", "search the web for", "look up", "google", "find", "find info on", "find me",
           "search online for", "do a search for", "look for", "search", "browse for", "research", "check online for",
           "search the internet for", "google up", "dig into"]
_S_ASK = ["what can you find about {q}", "can you find anything on {q}", "what does the web say about {q}",
          "any results for {q}", "what's out there on {q}", "can you look up {q}", "is there anything online about {q}",
          "what do you find about {q}", "what does google say about {q}"]
_S_BARE = ["search: {q}", "search {q}", "web search {q}", "{q} (search)", "info on {q}"]

CORES: dict[str, dict[str, list[str]]] = {
    "weather": {"do": _x(["{V} {O} in {city}{when}", "{V} {O} for {city}{when}", "{V} {O} at {city}{when}"],
                         V=_W_VERB, O=_W_OBJ),
                "ask": _W_ASK, "bare": _W_BARE},
    "booking": {"do": _x(_B_DO, V=_B_VERB), "ask": _B_ASK, "bare": _B_BARE},
    "time": {"do": _x(["{V} {O} in {place}", "{V} {O} for {place}"], V=_T_VERB, O=_T_OBJ),
             "ask": _T_ASK, "bare": _T_BARE},
    "calc": {"do": [v + " {expr}" for v in _C_VERB], "ask": _C_ASK, "bare": _C_BARE},
    "search": {"do": [v + " {q}" for v in _S_VERB], "ask": _S_ASK, "bare": _S_BARE},
}
WHEN = {"none": ["", "", "", " today", " right now", " now", " at the moment", " currently"],
        "date": [" on {date}", " for {date}", " on {date}", " for the {date}"],
        "tomorrow": [" tomorrow", " for tomorrow", " tomorrow"]}
WHEN_LEAD = {"none": ["", "today, ", "right now, "], "date": ["on {date}, ", "for {date}, "],
             "tomorrow": ["tomorrow, "]}

# Two or more values for one tool in one request: "the weather in Oslo and Rome".
MULTI_VALUE = {"weather": ["what's the weather in {city} and {city2}", "weather in {city} and {city2}",
                           "check the weather in {city}, {city2} and {city3}", "compare the weather in {city} and {city2}",
                           "how's the weather in {city} and in {city2}"],
               "time": ["what time is it in {place} and {place2}", "time in {place} and {place2}",
                        "tell me the time in {place}, {place2} and {place3}"],
               "calc": ["calculate {expr} and {expr2}", "what's {expr} and {expr2}", "{expr} and {expr2}"]}

# Requests whose second call needs the first result.
SEQUENTIAL = {"fahrenheit": ["what's the temperature in {city} in Fahrenheit", "how warm is {city} in Fahrenheit",
                             "convert the temperature in {city} to Fahrenheit", "{city} temperature in °F",
                             "check the weather in {city} and convert it to Fahrenheit"],
              "difference": ["how much warmer is {city} than {city2}", "what's the temperature difference between "
                             "{city} and {city2}", "compare the temperatures in {city} and {city2}",
                             "how many degrees warmer is it in {city} than in {city2}"],
              "average": ["what's the average temperature of {city}, {city2} and {city3}",
                          "average the temperatures in {city}, {city2} and {city3}"]}

FOLLOWUPS = {"weather": ["and in {city}?", "what about {city}?", "how about {city}?", "same for {city}", "and {city}?",
                         "now {city}", "and for {city}, please"],
             "weather_tomorrow": ["and tomorrow?", "what about tomorrow?", "how about tomorrow there?"],
             "time": ["and in {place}?", "what about {place}?", "and {place}?", "now {place}"],
             "calc": ["and {expr}?", "what about {expr}?", "now {expr}", "and {expr}"],
             "search": ["now search for {q}", "and {q}?", "search for {q} too", "also look up {q}"],
             "booking_n": ["actually, make it {n}", "change it to {n} people", "make that {n}, please"],
             "booking_time": ["actually, make it {time}", "can you move it to {time}?", "change the time to {time}"]}

MODALS = ["", "", "", "please ", "can you ", "could you ", "would you ", "could you please ", "can you please ",
          "I need you to ", "I'd like you to ", "I want you to ", "go ahead and ", "help me ", "kindly ", "pls "]
GREETINGS = ["", "", "", "", "hi! ", "hello, ", "hey ", "good morning! ", "hi there, ", "ok, ", "so, ", "alright, ",
             "hey there! ", "quick question: ", "one more thing: ", "also, "]
SUFFIXES = ["", "", "", "", " please", " pls", ", please", " for me", " thanks", ", thank you", " thx",
            " if you can", " when you get a chance", " asap", " :)", " real quick"]
JOINS = ["{A} and {B}", "{A}, and {B}", "{A}. {B}", "{A}, then {B}", "{A} and also {B}", "{A}; {B}", "{A}? also {B}",
         "{A}. also {B}", "{A} plus {B}", "{A}, {B}", "first {A}, then {B}", "{A}\n{B}", "{A} & {B}",
         "{A}, and then {B}", "{A}. after that, {B}", "{A} as well as {B}"]
JOINS3 = ["{A}, {B} and {C}", "{A}. {B}. {C}", "{A}, {B}, and also {C}", "{A}; {B}; {C}", "{A}, then {B}, then {C}",
          "{A}\n{B}\n{C}", "first {A}, then {B} and finally {C}", "{A} and {B} and {C}"]
