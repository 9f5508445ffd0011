from __future__ import annotations

import json
import random
from collections import Counter

import pytest

from training import broad as bd
from training.datagen import DATA_VERSIONS, DialogueGen, render_dialogue, to_messages
from training.results import key_values
from training.scripts import SCRIPTS
from training.tools_spec import TOOL_NAMES
from training.values import DEMO_VALUES, REAL_CITIES, Values, split_of


def test_same_seed_same_dialogues() -> None:
    a, b = DialogueGen("train", 3), DialogueGen("train", 3)
    assert [render_dialogue(a.dialogue()) for _ in range(20)] == [render_dialogue(b.dialogue()) for _ in range(20)]
    assert render_dialogue(DialogueGen("train", 4).dialogue()) != render_dialogue(DialogueGen("train", 3).dialogue())


def test_value_pools_are_disjoint() -> None:
    draws = {}
    for split in ("train", "eval"):
        v = Values(split, random.Random(0))
        draws[split] = {f: {str(getattr(v, f)()) for _ in range(300)}
                        for f in ("city", "restaurant", "query", "date", "clock", "expression")}
    for field, eval_values in draws["eval"].items():
        assert not eval_values & draws["train"][field], field
        assert all(split_of(v) == "eval" for v in eval_values if v not in DEMO_VALUES)
    assert {c for c in REAL_CITIES if split_of(c) == "eval" and c not in DEMO_VALUES} & draws["eval"]["city"]


def test_names_come_in_many_scripts() -> None:
    v = Values("train", random.Random(5))
    cities = [v.city() for _ in range(3000)]
    non_ascii = [c for c in cities if not c.isascii()]
    assert 0.2 < len(non_ascii) / len(cities) < 0.6
    blocks = Counter(ord(ch) >> 8 for c in non_ascii for ch in c if ch.isalpha())  # Unicode blocks of 256
    assert len(blocks) >= len(SCRIPTS) - 2  # Latin Extended, Cyrillic, Greek, CJK, Hangul, Arabic, ...


@pytest.mark.parametrize("data", DATA_VERSIONS)
def test_dialogues_call_known_tools_and_answers_quote_every_key_value(data: str) -> None:
    gen = DialogueGen("train", 11, data)
    for _ in range(300):
        for x in gen.dialogue():
            for call in x.calls:
                assert call.name in TOOL_NAMES
                assert call.keys and all(k in call.content for k in call.keys)
            assert x.quiet or all(k in x.answer for k in x.keys), (x.answer, x.keys)  # quiet: never learned


def test_every_kind_of_exchange_is_drawn() -> None:
    gen = DialogueGen("train", 2)
    tasks = Counter(x.task.split(":")[0] if ":" in x.task else len(x.calls) for _ in range(600) for x in gen.dialogue())
    assert {0, 1, 2, 3, "seq"} <= set(tasks), tasks
    pairs = {x.task for _ in range(3000) for x in [gen.multi(2)]}
    assert len(pairs) == 10  # every pair of the five tools


@pytest.mark.parametrize("data", DATA_VERSIONS)
def test_dependent_requests_compute_on_the_first_results(data: str) -> None:
    gen = DialogueGen("train", 8, data)
    for _ in range(30):
        x = gen.dependent()
        weather, (calc,) = x.rounds
        temps = [str(c.result["temperature"]) for c in weather]
        assert calc.name == "calculator" and all(t in calc.arguments["expression"] for t in temps)
        assert calc.keys[0] in x.answer


def test_the_live_tool_list_dominates_and_subsets_keep_the_called_tools() -> None:
    gen = DialogueGen("train", 4)
    for _ in range(200):
        d = gen.dialogue()
        names = {t["function"]["name"] for t in gen.tools(d)}
        assert {c.name for x in d for c in x.calls} <= names


def test_messages_follow_openai_shape() -> None:
    msgs = to_messages(DialogueGen("train", 2).dialogue())
    assert msgs[0]["role"] == "user"
    assert {m["role"] for m in msgs} <= {"user", "assistant", "tool"}
    for m in msgs:
        if m["role"] == "tool" and m["content"][:1] == "{":
            json.loads(m["content"])


def test_key_values_of_the_live_shapes() -> None:
    assert key_values("get_weather", {"city": "Oslo", "date": "today", "temperature": -3, "condition": "snowy"}) == ["-3", "snowy"]
    assert key_values("calculator", "5555") == ["5555"]
    assert key_values("get_time", {"timezone": "UTC", "datetime": "2026-12-01T10:57:32+00:00", "weekday": "Tuesday",
                                   "utc_offset": "+0000"}) == ["10:57", "Tuesday"]


def test_data_v2_composes_what_v1_has_only_as_fixed_phrasings() -> None:
    """v2 adds shapes v1 never draws: two-sentence "there" requests, lead-ins, three values composed
    from any core, Title Case and chat abbreviations on the frame; values stay exactly as typed."""
    v1, v2 = DialogueGen("train", 21), DialogueGen("train", 21, "v2")
    users = {d: [x for _ in range(1500) for x in g.dialogue()] for d, g in (("v1", v1), ("v2", v2))}
    texts = {d: [x.user for x in xs] for d, xs in users.items()}
    contexts = [c.split("{")[0].lower() for k in bd.THERE for c in bd.THERE[k][0]]
    there = {d: sum(any(c in t.lower() for c in contexts) for t in ts) for d, ts in texts.items()}
    assert there["v2"] > 20 and there["v2"] > 5 * there["v1"], there
    assert sum(t.startswith(tuple(lead.strip() for lead in bd.LEADS)) for t in texts["v2"]) > 10
    titled = [t for t in texts["v2"] if len(t.split()) > 4 and all(w[:1].isupper() for w in t.split() if w[:1].isalpha()
                                                                    and w.isascii())]
    assert len(titled) > 30
    assert any(" u " in f" {t} " or " pls " in f" {t} " for t in texts["v2"])
    for x in users["v2"]:  # noise never touches a value: searches and several-value requests copy them verbatim
        if x.task == "search" or x.task in ("weather+weather", "weather+weather+weather"):
            assert all(str(v) in x.user for c in x.calls for v in c.arguments.values() if v != "tomorrow"), x.user
    counts = Counter(x.task for x in users["v2"])
    v1_counts = Counter(x.task for x in users["v1"])

    def seq(c: Counter) -> int:
        return sum(n for t, n in c.items() if t.startswith("seq"))

    assert seq(counts) > 1.4 * seq(v1_counts)
    assert counts["weather+weather+weather"] + counts["time+time+time"] + counts["calc+calc+calc"] > 0


def test_data_v2_names_places_in_small_talk_and_never_follows_up_with_a_bare_name() -> None:
    """A place in a statement is chat (no call); a follow-up always says what it asks for."""
    gen = DialogueGen("train", 30, "v2")
    xs = [x for _ in range(1500) for x in gen.dialogue()]
    statements = [x for x in xs if not x.calls and any(
        s.split("{")[0].lower() in x.user.lower() for s in bd.STATEMENTS if not s.startswith("{"))]
    assert len(statements) > 10 and all(not x.rounds for x in statements)
    for slot in ("city", "place"):
        assert all(t.replace("{v}", "").strip(" ?,.") for t in bd._F_VALUE[slot]), slot


def test_data_v2_books_with_the_time_after_for_and_keeps_worded_parties_bare() -> None:
    """Bookings whose time follows "for" while the party is worded elsewhere ("4 seats at X for 16:15")
    are a good share of v2's, a core that words the party keeps a bare number ("a party of 4 seats"
    never), and past meals and closing remarks are small talk."""
    gen = DialogueGen("train", 40, "v2")
    xs = [x for _ in range(3000) for x in gen.dialogue()]
    bookings = [x for x in xs if x.task == "booking"]
    time_after_for = [x for x in bookings if any(f"for {c.arguments['time']}" in x.user.replace("  ", " ")
                                                 for c in x.calls)]
    assert len(time_after_for) > 0.08 * len(bookings), (len(time_after_for), len(bookings))
    for x in bookings:
        assert all(c.arguments["party_size"] > 0 for c in x.calls)
        for noun in ("seats", "places", "spots"):
            assert not any(f"{w} {noun}" in x.user.lower() for w in ("people", "guests", "persons", "of us")), x.user
    talk = [x.user.lower() for x in xs if not x.calls]
    meals = sum(any(m.split("{")[0].lower() in t for m in bd.MEALS if not m.startswith("{")) for t in talk)
    closings = sum(t.rstrip(" .!?").endswith(("we're done for today", "that wraps it up", "that covers it"))
                   for t in talk)
    assert meals > 5 and closings > 0, (meals, closings)


def test_data_v3_names_of_several_words_with_joiners_and_hyphens_are_copied_whole() -> None:
    """v3 draws cities and restaurants like "X de Y", "X Y Z" and "Saint-X" (held-out real ones are
    "Ciudad de México", "Hồ Chí Minh", "Saint-Étienne"); the call carries the whole name. v1 and v2 keep
    their draws, so the in-distribution set and the first two phases' data are unchanged."""
    gen = DialogueGen("train", 50, "v3")
    xs = [x for _ in range(2000) for x in gen.dialogue()]
    names = [v for x in xs for c in x.calls for k, v in c.arguments.items() if k in ("city", "restaurant")]
    joined = [v for v in names if any(f" {j} " in v for j in ("de", "do", "del", "da", "la"))]
    hyphened = [v for v in names if "-" in v]
    assert len(joined) > 0.02 * len(names) and len(hyphened) > 0.01 * len(names), (len(joined), len(names))
    several = Values("eval", random.Random(5), compound=True)
    assert all(split_of(v) == "eval" for _ in range(500) for v in (several.city(), several.restaurant()))
    v1 = Values("train", random.Random(5))
    assert not any(" de " in v1.city() or " de " in v1.restaurant() for _ in range(3000))


def test_data_v3_tails_and_leads_never_repeat_a_held_out_small_talk_body() -> None:
    """A v2 request ending "... Much appreciated." taught the model that "much appreciated", a small-talk
    body held out for evaluation, asks for a tool; no v3 lead or tail may be a held-out body, and v3's
    requests use v3's tails."""
    from training.smalltalk import KINDS as SMALLTALK
    held_out = {b.lower() for kind, (bodies, _) in SMALLTALK.items() for b in bodies
                if split_of(f"{kind}|{b}") == "eval"}
    assert "much appreciated" in held_out
    assert "much appreciated" in {t.strip(" .").lower() for t in bd.TAILS}  # v2, kept for its draws
    for part in bd.TAILS_V3 + bd.LEADS:
        assert part.strip(" .!?,:").lower() not in held_out, part
    gen = DialogueGen("train", 60, "v3")
    users = [x.user for _ in range(3000) for x in gen.dialogue() if x.calls]
    assert any(u.endswith(" Appreciate it.") for u in users) and not any("Much appreciated" in u for u in users)


def test_data_v4_cafes_made_up_zones_second_groups_and_two_topic_queries_are_copied_whole() -> None:
    """v4 adds forms the first model's prompts use and v3 never drew: "Cafe X" (no accent), "Mount X",
    a made-up place under a real region ("Australia/Koham", typed whole, never lower-cased), "a - (b + c)"
    and two-topic queries (and follow-ups in 30 % of later exchanges, not 18 %). v3's draws never take them,
    so the first three phases' data are unchanged."""
    from training.zones import ZONES, is_made_up
    assert is_made_up("Australia/Koham") and not is_made_up("Australia/Perth") and not is_made_up("UTC")
    gen = DialogueGen("train", 70, "v4")
    xs = [x for _ in range(1500) for x in gen.dialogue() if x.calls]
    args = [(x.user, c.name, c.arguments) for x in xs for c in x.calls]
    cafes = [a["restaurant"] for _, n, a in args if n == "book_restaurant" and a["restaurant"].startswith("Cafe ")]
    made_up = [(u, a["timezone"]) for u, n, a in args if n == "get_time" and a["timezone"] not in ZONES + ("UTC",)]
    grouped = [a["expression"] for _, n, a in args if n == "calculator" and " (" in a["expression"]]
    two = [a["query"] for _, n, a in args if n == "search" and (" and " in a["query"] or " with " in a["query"])]
    mounts = [a["city"] for _, n, a in args if n == "get_weather" and a["city"].split()[0] in ("Mount", "Fort")]
    assert cafes and grouped and two and mounts and len(made_up) > 10, (len(cafes), len(made_up), len(grouped))
    assert all(tz in u for u, tz in made_up), [m for m in made_up if m[1] not in m[0]][:3]
    assert all(tz.split("/")[0] in {z.split("/")[0] for z in ZONES} for _, tz in made_up)
    wide = Values("eval", random.Random(9), compound=True, wide=True)
    assert all(split_of(v) == "eval" for _ in range(500) for v in (wide.city(), wide.restaurant(), wide.query()))
    v3 = Values("train", random.Random(9), compound=True)
    assert not any(v3.restaurant().startswith("Cafe ") or v3.zone() not in ZONES + ("UTC",) for _ in range(3000))


def test_data_v5_puts_a_quiet_terse_reply_before_some_follow_ups_and_leaves_v4_alone() -> None:
    """v5: before 40 % of follow-ups the previous answer is a terse reply (``TERSE``), marked quiet: the
    assistant messages ``learned_turns`` leaves out of the rendered text are exactly those replies, so the
    trainer shows them and learns nothing from them. v4's draws are unchanged (the same seed renders the
    same dialogues)."""
    from training.datagen import TERSE, learned_turns
    from training.train import _ASSISTANT
    gen = DialogueGen("train", 71, "v5")
    dialogues = [gen.dialogue() for _ in range(1500)]
    quiet = [(d, i) for d in dialogues for i, x in enumerate(d) if x.quiet]
    follow_ups = sum(1 for d in dialogues for i in range(1, len(d)) if d[i].task == d[i - 1].task or d[i - 1].quiet)
    assert len(quiet) > 50 and follow_ups > len(quiet), (len(quiet), follow_ups)
    for d, i in quiet[:200]:
        assert d[i].answer in TERSE and i + 1 < len(d) and d[i + 1].calls
        text = render_dialogue(d)
        turns = [m.group(1) for m in _ASSISTANT.finditer(text)]
        assert len(turns) == len(learned_turns(d))
        assert [t for t, keep in zip(turns, learned_turns(d)) if not keep] == [x.answer + "<|im_end|>" for x in d if x.quiet]
    assert not any(x.quiet for _ in range(500) for x in DialogueGen("train", 5, "v4").dialogue())
    a, b = DialogueGen("train", 72, "v4"), DialogueGen("train", 72, "v4")
    assert [render_dialogue(a.dialogue()) for _ in range(50)] == [render_dialogue(b.dialogue()) for _ in range(50)]
    assert all(x.answer not in TERSE for d in dialogues for x in d if not x.quiet)


def test_data_v6_titles_half_of_the_searches_like_any_page_and_answers_quote_them() -> None:
    """v6: half of the searches return pages titled like any page (a search tool of the user's own), not
    the demo tool's "<query> - demo result N", so the model learns to quote the title it read, not to
    rebuild one from the query. Titles are split values (held-out titles never train) and answers quote them."""
    from training.values import split_of
    for split in ("train", "eval"):
        gen = DialogueGen(split, 73, "v6")
        calls = [(x, c) for _ in range(1500) for x in gen.dialogue() for c in x.calls if c.name == "search"]
        other = [(x, c) for x, c in calls if not c.keys[0].endswith(" - demo result 1")]
        assert 0.35 < len(other) / len(calls) < 0.65, (len(other), len(calls))
        assert len({c.keys[0] for _, c in other}) > 0.9 * len(other)
        for x, c in other:
            assert split_of(c.keys[0]) == split and c.keys[0] in c.content
            if c in x.rounds[-1] and not x.quiet:
                assert c.keys[0] in x.answer, (c.keys, x.answer)
    assert not any(c.name == "search" and not c.keys[0].endswith(" - demo result 1")
                   for _ in range(500) for x in DialogueGen("train", 5, "v5").dialogue() for c in x.calls)


def test_data_v7_calls_a_calculation_as_typed_and_shows_titled_searches_in_a_client_shape() -> None:
    """v7: a calculation the user typed without spaces is called exactly as typed (the tool gets the user's
    value, the first model's rule); one typed with spaces or in words keeps the canonical form. Half of the
    searches titled like any page come in a client's shape (title only), so quoting a title read from that
    shape is learned too. v6 still re-spaces every typed calculation."""
    gen = DialogueGen("train", 74, "v7")
    exchanges = [x for _ in range(1500) for x in gen.dialogue()]
    calcs = [(x, c.arguments["expression"]) for x in exchanges for r in x.rounds[:1] for c in r if c.name == "calculator"]
    typed = [(x, e) for x, e in calcs if " " not in e and not e.startswith("sqrt(")]
    assert 0.2 < len(typed) / len(calcs) < 0.5, (len(typed), len(calcs))
    assert all(e in x.user for x, e in typed), [(x.user, e) for x, e in typed if e not in x.user][:3]
    assert any(" " in e and e.replace(" ", "") not in x.user for x, e in calcs)
    searches = [c for x in exchanges for c in x.calls if c.name == "search"]
    titled = [c for c in searches if not c.keys[0].endswith(" - demo result 1")]
    client = [c for c in titled if '"url"' not in c.content]
    assert 0.35 < len(client) / len(titled) < 0.7, (len(client), len(titled))
    assert all(len(c.keys) == 1 and c.keys[0] in c.content for c in client)
    v6 = DialogueGen("train", 74, "v6")
    assert not [c.arguments["expression"] for _ in range(500) for x in v6.dialogue() for c in x.calls
                if c.name == "calculator" and " " not in c.arguments["expression"] and not c.arguments["expression"].startswith("sqrt(")]


def test_data_v8_titles_half_of_the_titled_searches_with_any_words_in_no_form() -> None:
    """v8: half of v7's titled searches carry a title of one to six words of the phrasing parts, names and
    numbers in no order (``Values.free_title``): a model that copies titles only of forms it knows fails on
    them, which is what the legacy set's own title forms showed. Titles are split values; v7 is unchanged."""
    from training.datagen import title_words
    from training.values import split_of
    words = set(title_words())
    assert len(words) > 400 and {"the", "weather", "table"} <= words
    gen = DialogueGen("train", 75, "v8")
    searches = [(x, c) for _ in range(1500) for x in gen.dialogue() for c in x.calls if c.name == "search"]
    titled = [(x, c) for x, c in searches if not c.keys[0].endswith(" - demo result 1")]
    free = [(x, c) for x, c in titled if all(w.lower() in words or not w.isascii() or w.isdigit() or w[1:].islower()
                                              for w in c.keys[0].split())
            and c.arguments["query"].split()[0].lower() not in c.keys[0].lower()]
    assert 0.3 < len(free) / len(titled) < 0.7, (len(free), len(titled))
    assert all(split_of(c.keys[0]) == "train" and c.keys[0] in c.content for _, c in free)
    assert all(c.keys[0] in x.answer for x, c in free if c in x.rounds[-1] and not x.quiet)
    assert len({c.keys[0] for _, c in free}) > 0.95 * len(free)
    v7 = DialogueGen("train", 75, "v7")
    before = [c.keys[0] for _ in range(300) for x in v7.dialogue() for c in x.calls if c.name == "search"]
    assert not [t for t in before if not t.endswith(" - demo result 1") and " " in t
                and all(w.lower() in words for w in t.split()) and len(t.split()) > 3]


def test_data_v9_titles_searches_with_common_page_kinds_that_split_into_rare_token_pairs() -> None:
    """v9: 60 % of v8's titled searches carry titles of common page kinds ("A Short History of X", "X News",
    ...: ``Values.page_title``), whose words the tokenizer splits into pairs ("Hi" + "story") a model must have
    copied inside a value; the answers quote them whole. Titles are split values; v8 is unchanged."""
    from training.values import _PAGE_FORMS, split_of
    gen = DialogueGen("train", 76, "v9")
    searches = [(x, c) for _ in range(1500) for x in gen.dialogue() for c in x.calls if c.name == "search"]
    titled = [(x, c) for x, c in searches if not c.keys[0].endswith(" - demo result 1")]
    heads = {f.split("{")[0] for f in _PAGE_FORMS if not f.startswith("{")} - {""}
    tails = {f.split("}")[-1] for f in _PAGE_FORMS if not f.endswith("}")} - {""}
    page = [(x, c) for x, c in titled if any(c.keys[0].startswith(h) for h in heads)
            or any(c.keys[0].endswith(t) for t in tails)]
    assert 0.45 < len(page) / len(titled) < 0.75, (len(page), len(titled))
    history = [(x, c) for x, c in page if "History" in c.keys[0]]
    assert len(history) > 0.1 * len(page)
    assert all(split_of(c.keys[0]) == "train" and c.keys[0] in c.content for _, c in page)
    assert all(c.keys[0] in x.answer for x, c in page if c in x.rounds[-1] and not x.quiet)
    v8 = DialogueGen("train", 76, "v8")
    before = [c.keys[0] for _ in range(300) for x in v8.dialogue() for c in x.calls if c.name == "search"]
    assert not [t for t in before if "History" in t or t.endswith(" News")]
