"""Tool calls with and without the grammar, on the bundled model: unoffered-tool and invalid-argument rates.

    turnstream bench grammar [--out DIR] [--cases 400] [--seed 7] [--max-tokens 96]

The same generated requests (``bench/grammar_cases.py``: tools renamed, arguments renamed and
retyped, enums, tools not offered) run through the native engine twice, greedy:
  * before: what turnstream did before grammars -- tools rendered into the prompt, ``required``
    and named choices forced only the call's opener (a prefill), the rest the model's own;
  * after:  the turn's ``Constraint`` (``workers/decode/constraints``), as the decoder builds it
    (requests without tools as with ``grammar_plain=on``; by default they are not held and the
    parser returns their text as content, never a call).
Each completion is read back by the hermes parser; every call is checked against the tool
offered under its name.  Rates are over calls (unoffered; invalid arguments: complete calls whose
arguments are not JSON or break the schema; cut by max_tokens: calls truncated, reported and
never dispatched) or over requests (no call under required/named, any call without tools).
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable

import torch

from bench.common import markdown_table, progress, save_figure, verdict, write_results
from bench.grammar_cases import MODES, Case, Verdict, build_cases, judge
from workers.decode.constraints import constraint_for
from workers.decode.engine import GenerateRequest, SamplingParams
from workers.decode.native.config import EngineConfig
from workers.decode.native.core import EngineCore

MODEL = Path(__file__).resolve().parent.parent / "models" / "tiny-agent"
FMT = "hermes"


def old_prefill(case: Case) -> str:
    """The opener the gateway forced before grammars (hermes): the marker, or the named call's head."""
    if case.mode == "required":
        return "<tool_call>\n"
    if case.mode == "named":
        return '<tool_call>\n{"name": "' + case.named + '", "arguments":'
    return ""


def request(case: Case, i: int, grammar: bool, max_tokens: int) -> GenerateRequest:
    params: dict[str, Any] = {"tool_choice": case.tool_choice} if case.tool_choice else {}
    constraint = constraint_for(FMT, None, case.tools, params, constrain_plain=True) if grammar else None
    prefill = "" if grammar else old_prefill(case)
    return GenerateRequest(rid=f"g{i}", session=f"g{i}", messages=case.messages, tools=case.tools or None,
                           params=SamplingParams(max_tokens=max_tokens, prefill=prefill), constraint=constraint)


def generate(core: EngineCore, reqs: list[GenerateRequest]) -> list[tuple[str, str]]:
    """(text, finish_reason) of each request, all run to the end on ``core`` (prefill included in the text)."""
    texts: dict[str, list[str]] = defaultdict(list)
    finish: dict[str, str] = {}
    for r in reqs:
        core.add_request(r)
        texts[r.rid].append(r.params.prefill)
    while core.has_work():
        for rid, delta in core.step():
            texts[rid].append(delta.text)
            if delta.finished:
                finish[rid] = delta.finish_reason or "stop"
    return [("".join(texts[r.rid]), finish[r.rid]) for r in reqs]


def tally(cases: list[Case], outputs: list[tuple[str, str]]) -> dict[str, dict[str, float]]:
    """Per mode: requests, calls, unoffered and invalid-argument rates, turns without the required call."""
    rows: dict[str, dict[str, float]] = {}
    for mode in MODES:
        picked = [(c, o) for c, o in zip(cases, outputs) if c.mode == mode]
        verdicts: list[Verdict] = [judge(FMT, text, c) for c, (text, _) in picked]
        calls = sum(v.calls for v in verdicts)
        rows[mode] = {"requests": len(picked), "calls": calls,
                      "unoffered_rate": sum(v.unoffered for v in verdicts) / max(1, calls),
                      "invalid_args_rate": sum(v.invalid_args + v.malformed for v in verdicts) / max(1, calls),
                      "truncated_rate": sum(v.truncated for v in verdicts) / max(1, calls),
                      "no_call_rate": sum(v.no_call for v in verdicts) / max(1, len(picked)),
                      "no_call_finished": sum(v.no_call and f != "length" for v, (_, (_, f)) in zip(verdicts, picked)),
                      "wrong_name_rate": sum(v.wrong_name for v in verdicts) / max(1, calls),
                      "requests_with_calls": sum(v.calls > 0 for v in verdicts) / max(1, len(picked)),
                      "cut_by_length": sum(f == "length" for _, f in (o for _, o in picked)) / max(1, len(picked))}
    return rows


def measure(cases: list[Case], max_tokens: int, grammar: bool,
            core_factory: Callable[[], EngineCore]) -> dict[str, dict[str, float]]:
    core = core_factory()
    outputs = generate(core, [request(c, i, grammar, max_tokens) for i, c in enumerate(cases)])
    return tally(cases, outputs)


def core_for(model: Path = MODEL) -> EngineCore:
    return EngineCore(EngineConfig(model=str(model), num_blocks=4096, max_num_seqs=32, max_num_batched_tokens=1024))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="turnstream bench grammar", description=__doc__.split("\n")[0])
    p.add_argument("--out", default=None)
    p.add_argument("--cases", type=int, default=400)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--max-tokens", type=int, default=96)
    p.add_argument("--heldout-scale", type=float, default=1.0,
                   help="share of the held-out harder eval's call prompts (training/harder.py) also run, 0: none")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    cases = build_cases(args.seed, args.cases)
    results = {}
    for label, grammar in (("before", False), ("after", True)):
        progress(f"{label}: {len(cases)} requests through the native engine")
        results[label] = measure(cases, args.max_tokens, grammar, core_for)
    rows = [[mode, label, int(r["requests"]), int(r["calls"]), _pct(r["unoffered_rate"]), _pct(r["invalid_args_rate"]),
             _pct(r["truncated_rate"]), _pct(r["no_call_rate"]) if mode in ("required", "named") else "",
             _pct(r["requests_with_calls"]) if mode == "no_tools" else ""]
            for mode in MODES for label, r in ((k, results[k][mode]) for k in ("before", "after"))]
    table = markdown_table(["tool_choice", "", "requests", "calls", "unoffered tool", "invalid arguments",
                            "cut by max_tokens", "no call", "requests with a call"], rows)
    if args.heldout_scale > 0:
        held = heldout_cases(args.heldout_scale)
        progress(f"held-out eval: {len(held)} call prompts of the harder set, tool_choice auto, before and after")
        results["heldout"] = {label: tally(held, generate(core_for(), [request(c, i, grammar, args.max_tokens)
                                                                       for i, c in enumerate(held)]))["auto"]
                              for label, grammar in (("before", False), ("after", True))}
        h = results["heldout"]
        table += "\n\nheld-out eval (harder set, call prompts, tool_choice auto)\n\n" + markdown_table(
            ["", "requests", "calls", "unoffered tool", "invalid arguments", "cut by max_tokens"],
            [[label, int(h[label]["requests"]), int(h[label]["calls"]), _pct(h[label]["unoffered_rate"]),
              _pct(h[label]["invalid_args_rate"]), _pct(h[label]["truncated_rate"])] for label in ("before", "after")])
    problems = check(results)
    out = write_results("grammar", args.out, {"cases": args.cases, "seed": args.seed, "max_tokens": args.max_tokens,
                                              "model": str(MODEL), "results": results, "problems": problems}, table)
    _plot(out / "grammar.png", results)
    return verdict("grammar", problems)


def check(results: dict[str, dict[str, dict[str, float]]]) -> list[str]:
    """What the figures stand on happened: every mode ran requests, and with the grammar every
    required or named request that was not cut by max_tokens made a call (the grammar was
    applied).  Requests without tools are not held (the parser returns their text as content)."""
    problems = [f"{label}: no {mode} request ran" for label, rows in results.items() if label != "heldout"
                for mode, r in rows.items() if not r["requests"]]
    if "heldout" in results and not results["heldout"]["after"]["calls"]:
        problems.append("held-out eval: no call was made: nothing was measured")
    after = results["after"]
    problems += [f"after: {mode}: {int(after[mode]['no_call_finished'])} requests ended without a call (not cut "
                 "by max_tokens): the grammar was not applied"
                 for mode in ("required", "named") if after.get(mode, {}).get("no_call_finished", 0) > 0]
    return problems


def heldout_cases(scale: float) -> list[Case]:
    """The held-out harder eval's prompts that want calls, with the tool list each was asked with."""
    from training.evaluate import _TOOL_LISTS
    from training.harder import harder

    return [Case(item.messages, _TOOL_LISTS[item.tools], "auto") for item in harder(seed=0, scale=scale)
            if item.kind == "call"]


def _plot(path: Path, results: dict[str, dict[str, dict[str, float]]]) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    groups = [(m, lambda label, m=m: results[label][m]) for m in MODES]
    if "heldout" in results:
        groups.append(("held-out eval", lambda label: results["heldout"][label]))
    for ax, key, title in ((axes[0], "unoffered_rate", "calls of an unoffered tool"),
                           (axes[1], "invalid_args_rate", "calls with invalid arguments")):
        for k, label in enumerate(("before", "after")):
            ax.bar([i + 0.4 * k for i in range(len(groups))], [100 * get(label)[key] for _, get in groups], 0.4,
                   label=f"{label} the grammar")
        ax.set(xticks=[i + 0.2 for i in range(len(groups))], xticklabels=[g for g, _ in groups], ylabel="% of calls",
               title=title)
    save_figure(fig, path, list(axes))


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"

