"""Held-out evaluation of the tiny tool-calling model (``turnstream eval tiny``).

Prompts use the eval value pools and eval-only phrasing combinations, so no value and no
whole sentence was seen in training.  Greedy decoding; the backend is pluggable.

Metrics (each over the prompts it applies to):
  well_formed    every <tool_call> block parses as {"name": str, "arguments": object}, at least one
                 block, nothing else in the turn (prompts that need tools)
  right_tool     the set of called tools is the expected one, or no call where none is needed
  exact_args     the single call equals the expected call exactly (single-call prompts)
  parallel_both  both calls of a two-call prompt are exactly right, in any order
  answer_values  given the right calls and their results, the final answer contains every key value
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from training.backends import BACKENDS, Backend, make_backend
from training.datagen import DialogueGen, Exchange, to_messages

DEFAULT_MODEL = Path(__file__).resolve().parent.parent / "models" / "tiny-agent"
_CALL = re.compile(r"<tool_call>\n(.*?)\n</tool_call>", re.S)
MAX_NEW_TOKENS = 200
METRICS = ("well_formed", "right_tool", "exact_args", "parallel_both", "answer_values")
TARGETS = {"well_formed": 0.98, "right_tool": 0.95, "exact_args": 0.90, "parallel_both": 0.80, "answer_values": 0.80}


@dataclass
class Item:
    kind: str  # single | parallel | none | answer
    task: str
    messages: list[dict[str, Any]]
    calls: list[dict[str, Any]] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)


def _history(gen: DialogueGen) -> list[Exchange]:
    return [gen.exchange(None)] if gen.rng.random() < 0.3 else []


def build_items(seed: int = 0, n_single: int = 150, n_parallel: int = 60, n_none: int = 40,
                n_answer: int = 80) -> list[Item]:
    """The held-out prompts; 30 % carry one earlier exchange as history."""
    gen = DialogueGen("eval", seed)
    items: list[Item] = []
    for i in range(n_single):
        hist, x = _history(gen), gen.single(("weather", "booking", "time", "calc", "search")[i % 5])
        items.append(Item("single", x.task, to_messages(hist) + x.messages()[:1], x.calls))
    for _ in range(n_parallel):
        hist, x = _history(gen), gen.parallel()
        items.append(Item("parallel", x.task, to_messages(hist) + x.messages()[:1], x.calls))
    for _ in range(n_none):
        hist, x = _history(gen), gen.smalltalk()
        items.append(Item("none", "none", to_messages(hist) + x.messages()[:1]))
    for i in range(n_answer):
        x = gen.parallel() if i % 4 == 3 else gen.single()
        items.append(Item("answer", x.task, x.messages()[:-1], x.calls, x.keys))
    return items


def parse_calls(text: str) -> tuple[list[dict[str, Any]], bool]:
    """The tool calls in an assistant turn, and whether the turn is well formed."""
    calls, ok = [], True
    for block in _CALL.findall(text):
        try:
            call = json.loads(block)
        except json.JSONDecodeError:
            ok = False
            continue
        if not (isinstance(call, dict) and isinstance(call.get("name"), str) and isinstance(call.get("arguments"), dict)):
            ok = False
            continue
        calls.append({"name": call["name"], "arguments": call["arguments"]})
    rest = _CALL.sub("", text).replace("<|im_end|>", "").strip()
    return calls, ok and bool(calls) and not rest and text.endswith("<|im_end|>")


def _sorted_calls(calls: list[dict[str, Any]]) -> list[str]:
    return sorted(json.dumps(c, sort_keys=True) for c in calls)


def score(item: Item, text: str) -> dict[str, bool]:
    """The metrics this item counts towards, each True or False."""
    calls, well_formed = parse_calls(text)
    names = sorted(c["name"] for c in calls)
    if item.kind == "none":
        return {"right_tool": not calls and "<tool_call>" not in text}
    if item.kind == "answer":
        return {"answer_values": "<tool_call>" not in text and all(k in text for k in item.keys)}
    out = {"well_formed": well_formed, "right_tool": names == sorted(c["name"] for c in item.calls)}
    if item.kind == "single":
        out["exact_args"] = _sorted_calls(calls) == _sorted_calls(item.calls)
    else:
        out["parallel_both"] = _sorted_calls(calls) == _sorted_calls(item.calls)
    return out


def evaluate(backend: Backend, items: list[Item], progress: bool = True,
             failures: list | None = None) -> dict[str, float]:
    """Run every item greedily and return the rate of each metric (plus per-task exact_args)."""
    hits: dict[str, list[bool]] = defaultdict(list)
    start = time.time()
    for i, item in enumerate(items, 1):
        text = backend.complete(item.messages, MAX_NEW_TOKENS)
        for metric, ok in score(item, text).items():
            hits[metric].append(ok)
            if metric in ("exact_args", "parallel_both", "answer_values", "right_tool"):
                hits[f"{metric}/{item.task}"].append(ok)
            if not ok and failures is not None:
                failures.append((metric, item.messages[-1]["content"], item.calls, text))
        if progress and (i % 20 == 0 or i == len(items)):
            print(f"\r  {i}/{len(items)} prompts, {time.time() - start:.0f}s", end="", file=sys.stderr, flush=True)
    if progress:
        print(file=sys.stderr)
    return {k: sum(v) / len(v) for k, v in sorted(hits.items())} | {"n": len(items)}


def report(rates: dict[str, float]) -> str:
    lines = []
    for m in METRICS:
        if m in rates:
            mark = "ok" if rates[m] >= TARGETS[m] else "below"
            lines.append(f"{m:15s} {rates[m] * 100:6.1f} %   target {TARGETS[m] * 100:.0f} %  {mark}")
    detail = {k: v for k, v in rates.items() if "/" in k and "+" not in k and not k.startswith("right_tool")}
    if detail:
        lines.append("by task: " + ", ".join(f"{k} {v * 100:.0f}%" for k, v in detail.items()))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="turnstream eval tiny", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=DEFAULT_MODEL, help="Hugging Face model directory")
    ap.add_argument("--backend", default="torch", choices=sorted(BACKENDS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--scale", type=float, default=1.0, help="fraction of the default prompt counts")
    ap.add_argument("--json", type=Path, help="also write the rates here")
    ap.add_argument("--failures", type=int, default=0, help="print this many failed prompts")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    if not (args.model / "config.json").exists():
        print(f"no model at {args.model}", file=sys.stderr)
        return 2
    import torch

    torch.set_num_threads(1)
    s = args.scale
    items = build_items(args.seed, int(150 * s), int(60 * s), int(40 * s), int(80 * s))
    print(f"evaluating {args.model} with backend {args.backend} on {len(items)} held-out prompts", file=sys.stderr)
    failures: list = []
    rates = evaluate(make_backend(args.backend, args.model), items, not args.quiet, failures)
    print(report(rates))
    for metric, user, calls, text in random.Random(0).sample(failures, min(args.failures, len(failures))):
        print(f"--- {metric}: {user!r}\n    expected {json.dumps(calls)}\n    got {text!r}")
    if args.json:
        args.json.write_text(json.dumps(rates, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
