from __future__ import annotations

import json
import random

from training import phrasings as ph
from training.datagen import DialogueGen, render_dialogue, to_messages
from training.pools import REAL_CITIES, Pools, split_of
from training.tools_spec import TOOL_NAMES


def test_same_seed_same_dialogues() -> None:
    a, b = DialogueGen("train", 3), DialogueGen("train", 3)
    assert [render_dialogue(a.dialogue()) for _ in range(20)] == [render_dialogue(b.dialogue()) for _ in range(20)]
    assert render_dialogue(DialogueGen("train", 4).dialogue()) != render_dialogue(DialogueGen("train", 3).dialogue())


def test_value_pools_are_disjoint() -> None:
    draws = {}
    for split in ("train", "eval"):
        p = Pools(split, random.Random(0))
        draws[split] = {f: {str(getattr(p, f)()) for _ in range(300)}
                        for f in ("city", "restaurant", "timezone", "query", "date", "clock", "booking_id")}
    for field, eval_values in draws["eval"].items():
        assert not eval_values & draws["train"][field], field
        assert all(split_of(v) == "eval" for v in eval_values)
    assert not set(REAL_CITIES) & draws["eval"]["city"]


def test_eval_phrasings_never_appear_in_training() -> None:
    for kind in ph.CLAUSES:
        train, held_out = set(ph._singles(kind, "train")), set(ph._singles(kind, "eval"))
        assert train and held_out and not train & held_out
        for kind2 in ph.CLAUSES:
            assert not set(ph._pairs(kind, kind2, "train")) & set(ph._pairs(kind, kind2, "eval"))


def test_dialogues_call_known_tools_and_answers_carry_results() -> None:
    gen = DialogueGen("train", 11)
    for _ in range(200):
        for x in gen.dialogue():
            assert len(x.calls) == len(x.results)
            assert all(c["name"] in TOOL_NAMES for c in x.calls)
            assert all(k in x.answer for k in x.keys)
            if x.calls:
                assert x.keys and all(k in json.dumps(x.results, ensure_ascii=False) for k in x.keys)


def test_messages_follow_openai_shape() -> None:
    msgs = to_messages(DialogueGen("train", 2).dialogue())
    assert msgs[0]["role"] == "user"
    assert {m["role"] for m in msgs} <= {"user", "assistant", "tool"}
