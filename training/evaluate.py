"""Evaluation of the tiny tool-calling model (``turnstream eval tiny``), greedy decoding, four reports:

  indist  the training generator's held-out values and phrasing combinations (in distribution)
  harder  an evaluation-only template family with its own noise, held-out values, real tools
  probe   26 hand-written everyday requests, run as full round trips with the real tools
  legacy  the first model's 330 prompts (its phrasings, the 5-tool prompt, strict JSON equality)

and on request (``--set titles``, not in ``all``): the legacy answer prompts titled "A Short History of X"
with that title swapped for forms whose words split into rare token pairs, answer_values per form.

Metrics (``training/scoring.py``): well_formed, right_tool, exact_args, no_tool (small talk),
answer_values, answer_grounded; each also per category (single, pair, triple, ...).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections import defaultdict
from pathlib import Path

from training.backends import BACKENDS, Backend, make_backend
from training.evalsets import Item, indist, legacy, titles
from training.harder import harder
from training.scoring import score
from training.tools_spec import SERVER_TOOLS, TOOLS

DEFAULT_MODEL = Path(__file__).resolve().parent.parent / "models" / "tiny-agent"
MAX_NEW_TOKENS = 200
METRICS = ("well_formed", "right_tool", "exact_args", "no_tool", "answer_values")
TARGETS = {"harder": {"right_tool": 0.90, "exact_args": 0.85, "answer_values": 0.85, "no_tool": 0.95}}
LEGACY_METRICS = ("well_formed", "right_tool", "exact_args", "parallel_both", "answer_values")
_TOOL_LISTS = {"server": SERVER_TOOLS, "demo5": TOOLS}


def _context(item: Item) -> str:
    return " ".join(m.get("content") or "" for m in item.messages)


def evaluate(backend: Backend, items: list[Item], progress: bool = True, failures: list | None = None,
             strict: bool = False) -> dict[str, float]:
    """Run every item greedily; the rate of each metric, overall and per category (``metric/category``)."""
    hits: dict[str, list[bool]] = defaultdict(list)
    start = time.time()
    for i, item in enumerate(items, 1):
        text = backend.complete(item.messages, MAX_NEW_TOKENS, _TOOL_LISTS[item.tools])
        for metric, ok in score(item.kind, text, item.calls, item.keys, _context(item), strict).items():
            hits[metric].append(ok)
            hits[f"{metric}/{item.category}"].append(ok)
            if not ok and failures is not None:
                failures.append((metric, item, text))
        if progress and (i % 20 == 0 or i == len(items)):
            print(f"\r  {i}/{len(items)} prompts, {time.time() - start:.0f}s", end="", file=sys.stderr, flush=True)
    if progress:
        print(file=sys.stderr)
    return {k: sum(v) / len(v) for k, v in sorted(hits.items())} | {"n": len(items)}


def legacy_rates(rates: dict[str, float]) -> dict[str, float]:
    """The legacy set's rates under the first evaluation's names (its right_tool counted small talk too)."""
    n_call, n_none = 210, 40
    right = (rates["right_tool"] * n_call + rates["no_tool"] * n_none) / (n_call + n_none)
    return {"well_formed": rates["well_formed"], "right_tool": right, "exact_args": rates["exact_args/single"],
            "parallel_both": rates["exact_args/parallel"], "answer_values": rates["answer_values"], "n": rates["n"]}


def run_set(name: str, backend: Backend, seed: int = 0, scale: float = 1.0, progress: bool = True,
            failures: list | None = None) -> dict[str, float]:
    """The rates of one report (``indist``, ``harder``, ``legacy`` or ``titles``)."""
    if name == "legacy":
        return legacy_rates(evaluate(backend, legacy(), progress, failures, strict=True))
    if name == "titles":
        return evaluate(backend, titles(), progress, failures)
    items = indist(seed, scale) if name == "indist" else harder(seed, scale)
    return evaluate(backend, items, progress, failures)


def report(name: str, rates: dict[str, float]) -> str:
    targets = TARGETS.get(name, {})
    lines = [f"[{name}] {rates.get('n', 0):.0f} prompts"]
    for m in LEGACY_METRICS if name == "legacy" else METRICS:
        if m in rates:
            mark = "" if m not in targets else ("  ok" if rates[m] >= targets[m] else "  BELOW") + f" (target {targets[m] * 100:.0f} %)"
            lines.append(f"  {m:15s} {rates[m] * 100:6.1f} %{mark}")
    detail = {k: v for k, v in rates.items() if "/" in k and k.split("/")[0] in ("exact_args", "answer_values", "right_tool")}
    if detail and name != "legacy":
        lines.append("  by category: " + ", ".join(f"{k} {v * 100:.0f}%" for k, v in detail.items()))
    return "\n".join(lines)


def probe_report(backend: Backend, verbose: bool) -> tuple[str, dict[str, float]]:
    from training.probes import run_all

    results = run_all(backend)
    tool = [r for r in results if r.answer_ok is not None]
    rates = {"right_tool": sum(r.right_tool for r in tool) / len(tool), "exact_args": sum(r.exact_args for r in tool) / len(tool),
             "answer_ok": sum(bool(r.answer_ok) for r in tool) / len(tool),
             "no_tool": sum(r.right_tool for r in results if r.answer_ok is None) / max(1, len(results) - len(tool)),
             "n": len(results)}
    lines = [f"[probe] {len(results)} hand-written requests, round trips with the real tools",
             f"  right tools {sum(r.right_tool for r in tool)}/{len(tool)}, exact values {sum(r.exact_args for r in tool)}/{len(tool)}, "
             f"answer quotes every result value {sum(bool(r.answer_ok) for r in tool)}/{len(tool)}, "
             f"small talk without tools {sum(r.right_tool for r in results if r.answer_ok is None)}/{len(results) - len(tool)}"]
    for r in results if verbose else []:
        flags = "".join("+" if ok else "-" for ok in (r.right_tool, r.exact_args, r.answer_ok is not False))
        lines.append(f"  {flags} {r.prompt!r}\n      " + "\n      ".join(t.replace("\n", " ") for t in r.transcript))
    return "\n".join(lines), rates


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="turnstream eval tiny", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=DEFAULT_MODEL, help="Hugging Face model directory")
    ap.add_argument("--backend", default="torch", choices=sorted(BACKENDS))
    ap.add_argument("--set", default="all", choices=["all", "indist", "harder", "probe", "legacy", "titles"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--scale", type=float, default=1.0, help="fraction of the indist/harder prompt counts")
    ap.add_argument("--json", type=Path, help="also write the rates here")
    ap.add_argument("--failures", type=int, default=0, help="print this many failed prompts per set")
    ap.add_argument("--verbose", action="store_true", help="print every probe's transcript")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    if not (args.model / "config.json").exists():
        print(f"no model at {args.model}", file=sys.stderr)
        return 2
    import torch

    torch.set_num_threads(1)
    backend = make_backend(args.backend, args.model)
    names = ["indist", "harder", "probe", "legacy"] if args.set == "all" else [args.set]
    out: dict[str, dict[str, float]] = {}
    for name in names:
        if name == "probe":
            text, out[name] = probe_report(backend, args.verbose)
            print(text, flush=True)
            continue
        failures: list = []
        out[name] = run_set(name, backend, args.seed, args.scale, not args.quiet, failures)
        print(report(name, out[name]), flush=True)
        for metric, item, text in random.Random(0).sample(failures, min(args.failures, len(failures))):
            print(f"  --- {metric} [{item.category}]: {item.messages[-1].get('content')!r}\n"
                  f"      expected {json.dumps(item.calls or item.keys, ensure_ascii=False)}\n      got {text!r}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
