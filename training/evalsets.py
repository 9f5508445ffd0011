"""The evaluation sets: in-distribution (the training generator's held-out values and phrasing
combinations), harder (a separate, evaluation-only template family: ``training/harder.py``), the
hand-written probe (``training/probes.py``), the legacy set (the first model's 330 prompts, frozen) and
``titles``, a check that a search title is copied whatever rare token pairs it holds.

An ``Item`` is one prompt and what the next assistant turn should be:
  call    ``calls`` (in any order), right values
  none    no call (small talk)
  answer  the final answer, quoting every value in ``keys``
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from training.datagen import DialogueGen, Exchange, to_messages

LEGACY_FILE = Path(__file__).resolve().parent / "data" / "legacy_eval.jsonl"
COUNTS = {"single": 100, "pair": 50, "triple": 20, "multi_value": 20, "dependent": 20, "followup": 20,
          "smalltalk": 40, "answer": 80}


@dataclass
class Item:
    kind: str  # call | none | answer
    category: str  # single | pair | triple | multi_value | dependent | followup | smalltalk | answer | legacy kinds
    task: str  # the tools involved, e.g. "get_time+get_weather"; "none" for small talk
    messages: list[dict[str, Any]]
    calls: list[dict[str, Any]] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)
    tools: str = "server"  # the system prompt's tool list: server (the runtime's) | demo5 (training/tools_spec.TOOLS)


def task_of(calls: list[dict[str, Any]]) -> str:
    return "+".join(sorted(c["name"] for c in calls)) or "none"


def call_item(category: str, history: list[dict[str, Any]], x: Exchange) -> Item:
    """The first round of ``x`` after ``history``: the calls it should make."""
    calls = [c.as_call() for c in x.rounds[0]]
    return Item("call", category, task_of(calls), history + x.messages()[:1], calls)


def second_round_item(x: Exchange) -> Item:
    """A dependent request after its first round: the call that uses the first results."""
    upto = 2 + len(x.rounds[0])  # user, assistant calls, one tool message per call
    calls = [c.as_call() for c in x.rounds[1]]
    return Item("call", "dependent", task_of(calls), x.messages()[:upto], calls)


def answer_item(x: Exchange, category: str = "answer") -> Item:
    return Item("answer", category, task_of([c.as_call() for c in x.calls]), x.messages()[:-1], [], x.keys)


def _scaled(scale: float) -> dict[str, int]:
    return {k: max(1, int(v * scale)) for k, v in COUNTS.items()}


def indist(seed: int = 0, scale: float = 1.0) -> list[Item]:
    """Held-out values and phrasing combinations of the training generator; 30 % carry history."""
    gen, n = DialogueGen("eval", seed), _scaled(scale)

    def history() -> list[dict[str, Any]]:
        return to_messages([gen.exchange(None)]) if gen.rng.random() < 0.3 else []

    kinds = ("weather", "booking", "time", "calc", "search")
    items = [call_item("single", history(), gen.single(kinds[i % 5])) for i in range(n["single"])]
    items += [call_item("pair", history(), gen.multi(2)) for _ in range(n["pair"])]
    items += [call_item("triple", history(), gen.multi(3)) for _ in range(n["triple"])]
    items += [call_item("multi_value", history(), gen.multi_value()) for _ in range(n["multi_value"])]
    for i in range(n["dependent"]):
        x = gen.dependent()
        items.append(call_item("dependent", [], x) if i % 2 else second_round_item(x))
    items += _followups(gen, n["followup"])
    items += [Item("none", "smalltalk", "none", history() + gen.smalltalk().messages()[:1])
              for _ in range(n["smalltalk"])]
    items += [answer_item(gen.multi(2) if i % 4 == 3 else gen.single()) for i in range(n["answer"])]
    return items


def _followups(gen: DialogueGen, n: int) -> list[Item]:
    items: list[Item] = []
    while len(items) < n:
        first = gen.single()
        follow = gen.followup(first)
        if follow is not None:
            items.append(call_item("followup", to_messages([first]), follow))
    return items


def legacy() -> list[Item]:
    """The first model's evaluation set (330 prompts, its own phrasings and result shapes), frozen."""
    kinds = {"single": "call", "parallel": "call", "none": "none", "answer": "answer"}
    items = []
    for line in LEGACY_FILE.read_text().splitlines():
        d = json.loads(line)
        items.append(Item(kinds[d["kind"]], d["kind"], d["task"], d["messages"], d["calls"] if d["kind"] != "answer"
                          else [], d["keys"], tools="demo5"))
    return items


# Titles for ``titles``: words the tokenizer splits into pairs the small-talk data ties to greetings ("History"
# is ``Hi`` + ``story``, "News" ``N`` + ``ews``, "Hello"), in forms data v9 never draws but the first; the last
# holds no such pair
TITLE_SWAPS = ("A Short History of {x}", "{x}: A History", "Notes on the History of {x}", "History and Legends of {x}",
               "{x} Newsletter", "Hello from {x}", "The Untold Story of {x}")
_SWAPPED = "A Short History of "


def titles() -> list[Item]:
    """The legacy answer prompts whose search result is titled "A Short History of X", with only that title
    swapped for each of ``TITLE_SWAPS`` (an item's category is its form): is a title copied, not rebuilt?"""
    items = []
    for it in legacy():
        old = next((k for k in it.keys if k.startswith(_SWAPPED)), None)
        if it.kind != "answer" or old is None:
            continue
        for form in TITLE_SWAPS:
            new = form.format(x=old.removeprefix(_SWAPPED))
            messages = [m | {"content": m["content"].replace(old, new)} if m["role"] == "tool" else m
                        for m in it.messages]
            items.append(Item("answer", form.format(x="X"), it.task, messages, [],
                              [new if k == old else k for k in it.keys], tools=it.tools))
    return items


def selection(scale: float = 1.0) -> list[Item]:
    """The set the final checkpoint is picked on: in-distribution, another seed; never an eval set."""
    return indist(seed=1, scale=scale)


def shuffled(items: list[Item], seed: int = 0) -> list[Item]:
    out = list(items)
    random.Random(seed).shuffle(out)
    return out

