"""The second training data version (``--data v2``): more ways to ask, composed from more parts.

Version 1 (``training/phrasebook.py``) trained the first 12,000 steps of the bundled model; version 2
keeps every v1 part and adds, for the fine-tuning phase on top of it:

- more words and sentence shapes per intent (new cores in all three forms);
- two-sentence requests whose first sentence gives the value and whose second asks about "there";
- lead-in sentences with no value ("Heading out soon."), so a capitalised word is not a value;
- several values for one tool composed from any single-value core ("... in {city} and {city2}");
- dependent requests (Fahrenheit, differences) composed from weather cores and comparison parts;
- follow-ups composed from leads, connectors and the new value;
- small talk that names places and restaurants (trips, past meals) and closing remarks, none a request;
- bookings whose time follows "for" while the party is worded elsewhere ("4 seats at X for 16:15");
- frame noise users type: Title Case, chat abbreviations (u, pls, thx), no space after commas.

Written for training, apart from the evaluation-only phrasings (``training/heldout_phrasings.py``),
which nothing here imports; a test checks that none of their fragments occur in training messages.
"""

from __future__ import annotations

import random
import re

from training import phrasebook as pb
from training.phrasebook import _x

# --- more cores per intent ---------------------------------------------------------------------
_W_VERB2 = ["give me a rundown of", "send me", "share", "read me", "let me see", "find", "get an update on",
            "look into", "dig up"]
_W_OBJ2 = ["the weather conditions", "the skies", "the weather outlook", "the temps", "the weather news",
           "the rain forecast", "the degrees", "a weather update", "the local weather", "the weather today"]
_W_ASK2 = ["how hot is {city}{when}", "how warm is {city}{when}", "how cold is {city}{when}", "is {city} warm{when}",
           "is {city} sunny{when}", "will {city} be rainy{when}", "rain or shine in {city}{when}",
           "what are the skies like above {city}{when}", "does {city} have good weather{when}",
           "how's {city} looking weather-wise{when}", "what's {city} like weather-wise{when}",
           "is the sun out in {city}{when}", "any rain expected in {city}{when}", "how many degrees in {city}{when}",
           "is it chilly in {city}{when}", "can I go without a coat in {city}{when}",
           "should I pack shorts for {city}{when}", "how's it looking outside in {city}{when}",
           "what's the weather doing in {city}{when}", "what temperature is it in {city}{when}",
           "is there rain in {city}{when}", "what's the weather gonna be in {city}{when}"]
_W_BARE2 = ["{city} temps{when}", "{city}{when}: forecast", "weather update, {city}{when}", "{city} conditions{when}",
            "forecast {city}{when}", "rain in {city}{when}?", "{city}, weather{when}", "temp in {city}{when}"]

_B_VERB2 = ["save us", "hold", "get", "nab us", "line up", "pencil in"]
_B_DO2 = ["{V} a table for {n} at {restaurant}, {time}", "{V} {n} seats at {restaurant} at {time}",
          "{V} seats for {n} at {restaurant} for {time}", "{V} a reservation for {n} at {restaurant} for {time}"]
_B_MORE = ["we're {n}, book {restaurant} at {time}", "{n} of us at {restaurant} at {time}, book it",
           "dinner reservation: {restaurant}, {time}, {n}", "a party of {n} at {restaurant} for {time}",
           "we want to eat at {restaurant} at {time}, {n} of us", "a table for {n} at {restaurant}, {time}",
           "get a reservation at {restaurant} at {time} for {n}", "reserve for {n} at {restaurant} at {time}",
           "at {time}, a table at {restaurant} for {n}", "{time} at {restaurant}, table for {n}",
           "booking for {n} at {restaurant}, {time}", "can we have {restaurant} at {time} for {n}",
           "is there room at {restaurant} for {n} at {time}", "would {restaurant} take {n} at {time}"]

# the time after "for" and the party worded elsewhere ("book 4 seats at X for 16:15": 16 is no party size)
_B_FOR_TIME = ["{V} {n} seats at {restaurant} for {time}", "{V} {n} places at {restaurant} for {time}",
               "{V} a table of {n} at {restaurant} for {time}", "{V} {restaurant} for {time}, {n} of us",
               "{V} {restaurant} for {time} for {n}", "{V} a table at {restaurant} for {time} for {n}",
               "{V} a table for {time} at {restaurant}, {n}", "{V} {n} spots at {restaurant}, for {time}"]
_B_FOR_TIME_ASK = ["could we get {n} seats at {restaurant} for {time}", "does {restaurant} have {n} places for {time}",
                   "can {n} of us get into {restaurant} for {time}", "we're {n} - is {restaurant} free for {time}",
                   "can you book {restaurant} for {time} for {n}"]
_B_FOR_TIME_BARE = ["{n} seats, {restaurant}, for {time}", "{restaurant} for {time}: {n} seats",
                    "{n} of us, {restaurant}, for {time}", "table of {n}, {restaurant}, for {time}"]

_T_VERB2 = ["what's", "I need", "get me", "check on", "report"]
_T_OBJ2 = ["the local hour", "the clock time", "the time right now", "the present time"]
_T_ASK2 = ["what's the hour in {place}", "what hour do they have in {place}", "is it daytime in {place}",
           "is it late in {place}", "how early is it in {place}", "what time do clocks say in {place}",
           "is it evening in {place} yet", "what time is it for someone in {place}", "what's the time like in {place}",
           "do you have the time for {place}", "what's the local hour in {place}", "is it too late to ring {place}",
           "what time is it at the moment in {place}", "how late is it now in {place}"]
_T_BARE2 = ["{place} clock", "hour in {place}", "{place}: time?", "time check {place}", "{place} local time",
            "what time, {place}"]

_C_DO2 = ["solve this: {expr}", "crunch these numbers: {expr}", "give me the answer to {expr}", "figure {expr} out",
          "do the math on {expr}", "total {expr}", "work {expr} out", "get the result of {expr}",
          "sort out this sum: {expr}", "calculate this for me: {expr}", "count up {expr}"]
_C_ASK2 = ["what's the total of {expr}", "what's the sum {expr}", "math question: what's {expr}",
           "quick math, what's {expr}", "what does {expr} give", "how much do I get from {expr}",
           "what is the value of {expr}", "any idea what {expr} is", "what comes out of {expr}"]
_C_BARE2 = ["math: {expr}", "quick math: {expr}", "sum: {expr}", "result of {expr}?", "{expr} = ??", "{expr}, please"]
_CALC_WORDS2 = {"+": ["the total of {a} and {b}", "{a} added to {b}", "add together {a} and {b}"],
                "-": ["{a} take away {b}", "subtract {b} out of {a}", "what remains when {b} is taken from {a}"],
                "*": ["{a} lots of {b}", "multiply together {a} and {b}", "{a} times {b}"],
                "/": ["{a} shared {b} ways", "{a} divided into {b} parts", "divide {a} among {b}"]}

_S_VERB2 = ["search the net for", "look into", "find articles about", "find some links on", "get me results for",
            "pull up info about", "find stuff on", "hunt down", "find pages about", "run a search on", "web-search",
            "check the web for", "look around online for", "bring me links about"]
_S_ASK2 = ["can you search {q}", "what's online about {q}", "what can the web tell me about {q}",
           "could you find articles on {q}", "what turns up for {q}", "are there any pages about {q}",
           "what do people online say about {q}", "got any links for {q}"]
_S_BARE2 = ["web: {q}", "online search: {q}", "links for {q}", "look up: {q}", "{q} - search it", "google {q}"]

CORES: dict[str, dict[str, list[str]]] = {
    "weather": {"do": pb.CORES["weather"]["do"] + _x(["{V} {O} in {city}{when}", "{V} {O} for {city}{when}"],
                                                   V=pb._W_VERB + _W_VERB2, O=_W_OBJ2)
                + _x(["{V} {O} in {city}{when}"], V=_W_VERB2, O=pb._W_OBJ),
                "ask": pb.CORES["weather"]["ask"] + _W_ASK2, "bare": pb.CORES["weather"]["bare"] + _W_BARE2},
    "booking": {"do": pb.CORES["booking"]["do"] + _x(_B_DO2, V=pb._B_VERB + _B_VERB2) + _x(pb._B_DO, V=_B_VERB2)
                + _x(_B_FOR_TIME, V=pb._B_VERB + _B_VERB2)[::2],
                "ask": pb.CORES["booking"]["ask"] + _B_MORE[10:] + _B_FOR_TIME_ASK,
                "bare": pb.CORES["booking"]["bare"] + _B_MORE[:10] + _B_FOR_TIME_BARE},
    "time": {"do": pb.CORES["time"]["do"] + _x(["{V} {O} in {place}", "{V} {O} for {place}"], V=pb._T_VERB + _T_VERB2,
                                             O=_T_OBJ2),
             "ask": pb.CORES["time"]["ask"] + _T_ASK2, "bare": pb.CORES["time"]["bare"] + _T_BARE2},
    "calc": {"do": pb.CORES["calc"]["do"] + _C_DO2, "ask": pb.CORES["calc"]["ask"] + _C_ASK2,
             "bare": pb.CORES["calc"]["bare"] + _C_BARE2},
    "search": {"do": pb.CORES["search"]["do"] + [v + " {q}" for v in _S_VERB2], "ask": pb.CORES["search"]["ask"] + _S_ASK2,
               "bare": pb.CORES["search"]["bare"] + _S_BARE2},
}
CALC_WORDS = {op: pb.CALC_WORDS[op] + _CALC_WORDS2[op] for op in pb.CALC_WORDS}

# --- lead-ins, two-sentence requests, joins ----------------------------------------------------
LEADS = ["Heading out soon. ", "Planning my day. ", "Quick favour. ", "Random question. ", "Need this for work. ",
         "Not urgent, but ", "Sorry to bother you. ", "Before my meeting: ", "OK so ", "Right. ", "Hmm. ",
         "My boss asked. ", "Question for you: ", "Help! ", "Another one: ", "I was wondering. ", "Hey Assistant, ",
         "Good evening. ", "Morning. ", "Yo, ", "Hi again. ", "Thanks in advance. ", "For my notes: ",
         "I'm on my phone, ", "Need a hand. ", "Small request: ", "Just curious. "]
TAILS = ["", "", "", " Thanks!", " Thank you.", " Cheers.", " Much appreciated.", " No rush.", " ty", " Danke.",
         " Thanks in advance!", " That's all."]
# data v3: v2's tails without "Much appreciated." and "ty", small-talk bodies held out for evaluation (a request
# ending in one taught the model that the body alone asks for a tool); v2 keeps its draws
TAILS_V3 = ["", "", "", " Thanks!", " Thank you.", " Cheers.", " Appreciate it.", " No rush.", " thx", " Danke.",
            " Thanks in advance!", " That's all."]
THERE: dict[str, tuple[list[str], list[str]]] = {
    "weather": (["I'm flying to {city}", "my parents live in {city}", "we're spending the weekend in {city}",
                 "I'll be in {city}", "my team is based in {city}", "off to {city} soon", "I'm visiting {city}",
                 "going hiking near {city}", "my friend just moved to {city}"],
                ["what's the weather there{when}", "will it rain there{when}", "how warm is it there{when}",
                 "what should I pack for the weather there{when}", "any chance of rain there{when}",
                 "is it cold there{when}", "how's the weather over there{when}", "what's the forecast there{when}",
                 "what temperature is it there{when}", "do I need an umbrella there{when}"]),
    "time": (["I have a call with a client in {place}", "my brother moved to {place}", "our office is in {place}",
              "my sister is travelling in {place}", "I'm messaging a friend in {place}", "there's a meeting with {place}",
              "my manager works from {place}"],
             ["what time is it there", "is it late there now", "is it too early to ring them",
              "what's the local time for them", "what hour is it there", "is it night there",
              "what time do they have now", "is it a good time to call"]),
}
JOINS = pb.JOINS + ["{A}. Also, {B}", "{A} - also {B}", "{A}. Then {B}", "{A}; and {B}", "{A}. And {B}",
                    "{A}. Secondly, {B}", "first, {A}; second, {B}", "{A}. One more: {B}", "{A}. Additionally, {B}",
                    "{A}, also can you {B}", "{A} and could you {B}", "{A}. Can you also {B}",
                    "a couple of requests: {A}, and {B}", "{A} + {B}", "{A}. {B} too", "{A}\n\n{B}",
                    "{A}, and another thing: {B}", "{A}. After that {B}", "1) {A} 2) {B}", "- {A}\n- {B}"]
JOINS3 = pb.JOINS3 + ["{A}. {B}. Finally, {C}", "{A}, {B}, and last {C}", "first {A}; next {B}; then {C}",
                      "three requests: {A}, {B}, {C}", "{A}. Also {B}, and {C}", "1) {A} 2) {B} 3) {C}",
                      "- {A}\n- {B}\n- {C}", "{A}. Next {B}. After that {C}"]

# --- several values for one tool, composed from single-value cores ------------------------------
LISTS2 = ["{x} and {x2}", "{x} and {x2}", "both {x} and {x2}", "{x} as well as {x2}", "{x}, and also {x2}",
          "{x} plus {x2}", "{x} & {x2}", "{x}, {x2}", "{x} and then {x2}", "{x} and also {x2}"]
LISTS3 = ["{x}, {x2} and {x3}", "{x}, {x2}, and {x3}", "{x}, {x2}, {x3}", "{x} and {x2} and {x3}"]
MULTI_SLOT = {"weather": "city", "time": "place", "calc": "expr"}


def multi_value_template(rng: random.Random, kind: str, n: int) -> tuple[str, str]:
    """A several-values request for ``kind`` and its form: a single-value core whose slot became a list."""
    slot = MULTI_SLOT[kind]
    form = rng.choices(("do", "ask", "bare"), (0.45, 0.4, 0.15))[0]
    for _ in range(20):
        core = rng.choice(CORES[kind][form])
        if core.count("{" + slot + "}") == 1 and "{when_lead}" not in core:
            break
    core = core.replace("{when}", "")
    pattern = rng.choice(LISTS2 if n == 2 else LISTS3)
    if kind == "weather" and " in {city}" in core and rng.random() < 0.3:
        pattern = rng.choice(["{x} and in {x2}", "{x}, and in {x2}"] if n == 2 else ["{x}, in {x2} and in {x3}"])
    listed = pattern.replace("{x}", "{" + slot + "}").replace("{x2}", "{" + slot + "2}").replace("{x3}", "{" + slot + "3}")
    core = core.replace("{" + slot + "}", listed)
    if kind == "time" and core.endswith(listed) and rng.random() < 0.3:  # a word after the last value is not part of it
        core += rng.choice([" now", " right now", " at the moment", " currently", " these days", " today", " then"])
    return core, form


# --- dependent requests -------------------------------------------------------------------------
_F_TAILS = [" in Fahrenheit", " in °F", " in degrees Fahrenheit", ", but in Fahrenheit", " - give it in Fahrenheit",
            " and convert it to Fahrenheit", " (in F please)", ", converted to °F", " in fahrenheit", " in F"]
_F_LEADS = ["I use Fahrenheit. ", "In Fahrenheit please: ", "I'm American, so Fahrenheit please. ", "Fahrenheit only: ",
            "Give me Fahrenheit. ", "Celsius means nothing to me. ", "°F please: "]
_DIFF = _x(["how much {A} is {city} than {city2}", "is {city} {A} than {city2}, and by how much",
            "which is {A}, {city} or {city2}, and how many degrees", "how many degrees {A} is {city} compared to {city2}",
            "by how much is {city} {A} than {city2}", "{city} vs {city2}: how much {A}"],
           A=["warmer", "colder", "hotter", "cooler"])
_DIFF_DO = _x(["{V} the temperature difference between {city} and {city2}",
               "{V} the difference in temperature of {city} and {city2}", "{V} how many degrees apart {city} and {city2} are",
               "compare {city} and {city2} and {V} the difference in degrees"],
              V=["tell me", "work out", "calculate", "figure out", "give me", "find"])
_DIFF_MORE = ["how many degrees apart are {city} and {city2}", "how far apart are the temperatures in {city} and {city2}",
              "what's the temperature gap from {city} to {city2}", "{city} minus {city2} in degrees",
              "temperature difference {city} - {city2}", "difference in degrees, {city} vs {city2}"]
_AVG = ["what's the mean temperature across {city}, {city2} and {city3}", "average temp of {city}, {city2} and {city3}",
        "work out the average of the temperatures in {city}, {city2} and {city3}",
        "give me the average temperature for {city}, {city2}, {city3}"]


def dependent_template(rng: random.Random, kind: str) -> str:
    """A request whose calculation needs the weather first: v1's phrasings or a composed one."""
    if rng.random() < 0.3:
        return rng.choice(pb.SEQUENTIAL[kind])
    if kind == "fahrenheit":
        core = rng.choice([c for c in CORES["weather"][rng.choice(["do", "ask", "bare"])]
                           if "{when_lead}" not in c]).replace("{when}", "")
        return rng.choice(_F_LEADS) + core if rng.random() < 0.3 else core + rng.choice(_F_TAILS)
    if kind == "difference":
        return rng.choice(_DIFF + _DIFF_DO + _DIFF_MORE)
    return rng.choice(_AVG + pb.SEQUENTIAL["average"])


# --- follow-ups ---------------------------------------------------------------------------------
_F_LEAD = ["", "", "", "ok, ", "great, ", "thanks. ", "cool, ", "hmm, ", "nice. ", "perfect. ", "alright, ", "and "]
# A place name alone ("Oslo?", "then Oslo") is no follow-up here: small talk names places too.
_F_VALUE = {"city": ["and in {v}?", "what about {v}", "how about in {v}", "and {v} too?", "same thing for {v}",
                     "now check {v}", "do {v} as well", "repeat for {v}", "now for {v}", "what's it like in {v}",
                     "how about {v} then", "and the weather in {v}?", "and {v}, please", "and for {v}?",
                     "same for {v} please", "check {v} too", "and what about {v}?"],
            "place": ["and in {v}?", "what about {v}", "how about {v}", "and the time in {v}?", "same thing for {v}",
                      "and {v} too?", "what time is it in {v} then", "check {v} too", "repeat for {v}",
                      "and for {v}", "and the clock in {v}?"],
            "expr": ["and {v}?", "now {v}", "also {v}", "next one: {v}", "and what's {v}", "then {v}",
                     "do {v} too", "same with {v}", "how about {v}", "what about {v}?", "one more: {v}",
                     "{v} next", "and {v} please", "then calculate {v}"],
            "q": ["now search for {v}", "and {v}?", "search for {v} too", "also look up {v}", "next search: {v}",
                  "what about {v}", "now find {v}", "and look up {v} as well"]}
_F_SLOT = {"weather": "city", "time": "place", "calc": "expr", "search": "q"}


def followup_template(rng: random.Random, key: str) -> str:
    """A follow-up for ``key`` (as in ``phrasebook.FOLLOWUPS``): v1's or a composed one."""
    slot = _F_SLOT.get(key)
    if slot is None or rng.random() < 0.3:
        return rng.choice(pb.FOLLOWUPS[key])
    return rng.choice(_F_LEAD) + rng.choice(_F_VALUE[slot]).replace("{v}", "{" + slot + "}")


# --- small talk that names places and restaurants (no tool: nothing is asked) ---------------------
STATEMENTS = [c + end for c in THERE["weather"][0] for end in ("!", ".", " next week", " - can't wait", " soon")] + [
    "{city} was lovely last summer", "my meeting in {city} went well", "we loved {restaurant}",
    "{restaurant} has the best desserts", "my flight from {city} was late", "{city} is on my bucket list",
    "I grew up near {city}", "the view in {city} was stunning", "{restaurant} is my favourite place",
    "I'm reading a book about {city}", "my boss is from {city}", "thanks, {restaurant} was great",
    "that's all I needed about {city}", "I've never been to {city}", "lunch at {restaurant} was fine"]

# past meals at named restaurants: a restaurant and a time of day, and nothing to book
MEALS = _x(["{M} at {restaurant} was {A} {P}", "{P2}, {m} at {restaurant} was {A}", "we had {m} at {restaurant} {P}, it was {A}"],
           M=["Breakfast", "Lunch", "Dinner", "Brunch", "Our date night", "The party", "Supper", "The meal"],
           m=["breakfast", "lunch", "dinner", "brunch", "a meal", "drinks"],
           A=["great", "lovely", "superb", "delicious", "so good", "a bit noisy", "perfect", "amazing", "disappointing",
              "wonderful"],
           P=["yesterday", "last night", "on Friday", "last week", "this evening", "earlier today", "on my birthday"],
           P2=["Yesterday", "Last night", "On Saturday", "Last week", "Earlier"])

# closing remarks: the user is done, nothing is asked
CLOSINGS = _x(["{I}{D}{T}"], I=["", "I think ", "I guess ", "OK, ", "Alright, ", "Right, ", "Well, ", "Great, "],
              D=["that's all", "we're done", "that's it", "I'm all set", "that covers it", "that should be all",
                 "that's all I needed", "nothing more", "we're all set", "I'm done", "that wraps it up"],
              T=["", " for today", " for now", " for the day", " from me", " here", " for this morning"])


# --- frame noise ----------------------------------------------------------------------------------
ABBREV = {"you": ["u"], "your": ["ur"], "please": ["pls", "plz"], "thanks": ["thx", "thnx"], "are": ["r"],
          "tomorrow": ["tmrw", "tmr"], "people": ["ppl"], "because": ["bc", "cuz"]}
_WORD = re.compile(r"[A-Za-z']+")


def abbreviate(rng: random.Random, text: str) -> str:
    return _WORD.sub(lambda m: rng.choice(ABBREV[m.group().lower()]) if m.group().lower() in ABBREV and
                     rng.random() < 0.7 else m.group(), text)


def title_case(text: str) -> str:
    """Every word of ``text`` starting in upper case (``what's`` -> ``What's``)."""
    return re.sub(r"(^|[\s(\-/])([a-z])", lambda m: m.group(1) + m.group(2).upper(), text)
