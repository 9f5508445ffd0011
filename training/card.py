"""The model card (README.md) of the shipped tiny-agent directory, filled in from the final evaluation
(``training.watch.full_eval``) and the learning curve (``<run>/curve.jsonl``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from safetensors import safe_open

from training.evaluate import LEGACY_METRICS, METRICS, TARGETS
from training.train import machine_text

_TEMPLATE = Path(__file__).resolve().parent / "data" / "card_template.md"
CURVE_COLUMNS = [("indist", m) for m in ("right_tool", "exact_args", "answer_values")] + [
    ("harder", m) for m in ("right_tool", "exact_args", "no_tool", "answer_values")]


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{x * 100:.1f} %"


def metrics_table(row: dict) -> str:
    """indist and harder side by side, with the harder set's targets."""
    lines = ["| metric | in-distribution | harder | harder target |", "|---|---|---|---|"]
    for m in (*METRICS, "answer_grounded"):
        target = TARGETS["harder"].get(m)
        lines.append(f"| {m} | {_pct(row['indist'].get(m))} | {_pct(row['harder'].get(m))} | "
                     f"{'≥ %.0f %%' % (target * 100) if target else '–'} |")
    return "\n".join(lines)


def categories_table(row: dict) -> str:
    cats = sorted({k.split("/")[1] for s in ("indist", "harder") for k in row[s] if k.startswith("exact_args/")})
    lines = ["| category | indist exact_args | harder right_tool | harder exact_args |", "|---|---|---|---|"]
    for c in cats:
        lines.append(f"| {c} | {_pct(row['indist'].get('exact_args/' + c))} | {_pct(row['harder'].get('right_tool/' + c))} "
                     f"| {_pct(row['harder'].get('exact_args/' + c))} |")
    return "\n".join(lines)


def legacy_table(row: dict) -> str:
    head = "| " + " | ".join(LEGACY_METRICS) + " |"
    return "\n".join([head, "|" + "---|" * len(LEGACY_METRICS),
                      "| " + " | ".join(_pct(row["legacy"].get(m)) for m in LEGACY_METRICS) + " |"])


def curve_table(curve: list[dict]) -> str:
    """One row per evaluated snapshot; with a ``phase`` column where the curve spans several phases
    (each phase counts its own steps and minutes)."""
    phased = len({r.get("phase", 1) for r in curve}) > 1
    head = "| " + ("phase | " if phased else "") + "step | minutes | " + " | ".join(f"{s} {m}" for s, m in CURVE_COLUMNS) + " |"
    rows = [f"| {str(r.get('phase', 1)) + ' | ' if phased else ''}{r['step']} | {r['elapsed_s'] / 60:.0f} | "
            + " | ".join(_pct(r[s].get(m)) for s, m in CURVE_COLUMNS) + " |" for r in curve]
    return "\n".join([head, "|---" * (3 if phased else 2) + "|" + "---|" * len(CURVE_COLUMNS), *rows])


GRAMMAR_RESULTS = Path(__file__).resolve().parent.parent / "bench" / "results" / "grammar.json"
_GRAMMAR_START, _GRAMMAR_END = "<!-- grammar: turnstream bench grammar -->", "<!-- /grammar -->"


def grammar_section(results_file: Path = GRAMMAR_RESULTS) -> str:
    """Unoffered-tool and invalid-argument rates without and with the decoder's grammar, from the
    latest ``turnstream bench grammar`` run (``bench/results/grammar.json``)."""
    if not results_file.exists():
        return f"{_GRAMMAR_START}\n(no `turnstream bench grammar` run yet)\n{_GRAMMAR_END}"
    data = json.loads(results_file.read_text())
    res = data["results"]
    rows = []
    if "heldout" in res:
        for label in ("before", "after"):
            r = res["heldout"][label]
            rows.append(f"| held-out harder eval, call prompts, `auto` | {label} | {int(r['requests'])} | {int(r['calls'])} "
                        f"| {_pct(r['unoffered_rate'])} | {_pct(r['invalid_args_rate'])} |")
    for mode in ("required", "named", "auto"):
        for label in ("before", "after"):
            r = res[label][mode]
            rows.append(f"| generated, unseen schemas, `{mode}` | {label} | {int(r['requests'])} | {int(r['calls'])} "
                        f"| {_pct(r['unoffered_rate'])} | {_pct(r['invalid_args_rate'])} |")
    return "\n".join([_GRAMMAR_START, f"Measured {data['time']} with `turnstream bench grammar` (greedy, native engine, "
                      f"max {data['max_tokens']} tokens; \"before\" forces only a call's opener, \"after\" is the "
                      "decoder's grammar):", "",
                      "| prompts | | requests | calls | unoffered tool | invalid arguments |", "|---|---|---|---|---|---|",
                      *rows, _GRAMMAR_END])


def refresh_grammar(card: Path, results_file: Path = GRAMMAR_RESULTS) -> None:
    """Rewrite the grammar section of an existing card from the latest results."""
    text = card.read_text()
    start, end = text.find(_GRAMMAR_START), text.find(_GRAMMAR_END)
    if start < 0 or end < 0:
        raise ValueError(f"{card}: no grammar section to refresh")
    card.write_text(text[:start] + grammar_section(results_file) + text[end + len(_GRAMMAR_END):])


def _threads_text(n: int | None) -> str:
    return {None: "one thread", 1: "one thread", 2: "two threads"}.get(n, f"{n} threads")


def _schedule_text(st: dict) -> str:
    steps = st["schedules"][-1][1] if st.get("schedules") else None
    return (f"peak lr {st['lr']:g}, " if "lr" in st else "") + (
        f"{st['warmup']} warm-up steps, " if "warmup" in st else "") + (f"{steps}-step cosine, " if steps else "") + (
        "bf16 autocast" if st.get("precision", "bf16") == "bf16" else "fp32") + f", {_threads_text(st.get('threads'))}"


# what each data version adds, for the recipe's phase bullets
DATA_NOTES = {"v1": "`training/phrasebook.py`", "v2": "v1 plus `training/broad.py`",
              "v3": "v2 plus names of several words and tails that are never a held-out small-talk body",
              "v4": "v3 plus \"Cafe X\", \"Mount X\", made-up zones under real regions, \"a - (b + c)\", two-topic queries and more follow-ups",
              "v5": "v4 with a terse reply, shown but not learned, before 40 % of follow-ups",
              "v6": "v5 with any pages' titles, not the demo tool's, in half of the search results",
              "v7": "v6 with calculations typed without spaces called as typed, and half of the titled searches in a client's result shape",
              "v8": "v7 with half of the titled searches' titles any words of the phrasing parts, names and numbers, in no form",
              "v9": "v8 with titles of common page kinds (\"A Short History of X\", \"X News\") in 60 % of the titled searches"}
_COUNT = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight"}


def phase_chain(row: dict) -> list[dict]:
    """The phases that made ``row``'s checkpoint, first first (each fine-tuning run's starting model under ``init``)."""
    chain = []
    while row:
        chain.insert(0, row)
        row = row.get("init", {})
    return chain


def phases_text(row: dict, hardware: str) -> str:
    """The recipe bullets of each training phase: settings, machine, and where the shipped pick stands."""
    here = row.get("machine", hardware)
    chain = phase_chain(row)
    if len(chain) == 1:
        return (f"- {_schedule_text(row)}, data {row.get('data', 'v1')}.\n- Hardware: {here}. The shipped checkpoint is "
                f"step {row['step']}, after {row['elapsed_s'] / 60:.0f} minutes of training.")
    total = sum(st["elapsed_s"] for st in chain) / 60
    lines = []
    for i, st in enumerate(chain, 1):
        data = st.get("data", "v1" if i == 1 else "v2")
        head = (f"- Phase 1, from nothing on data {data} ({DATA_NOTES.get(data, data)}): " if i == 1 else
                f"- Phase {i}, fine-tuning phase {i - 1}'s pick on data {data} ({DATA_NOTES.get(data, data)}) with a "
                "fresh optimizer: ")
        machine = here if st is row else st.get("machine", "machine not recorded")
        tail = (f"The shipped checkpoint is its step {st['step']}, after {st['elapsed_s'] / 60:.0f} minutes "
                f"({total:.0f} minutes of training in all)." if st is row else
                f"Its pick was step {st['step']}, after {st['elapsed_s'] / 60:.0f} minutes.")
        lines.append(f"{head}{_schedule_text(st)}; {machine}. {tail}")
    return "\n".join(lines)


def trained_text(row: dict) -> str:
    """The card's first line on cost: one phase or several."""
    chain = phase_chain(row)
    if len(chain) == 1:
        return (f"It was trained from scratch in about {row['elapsed_s'] / 60:.0f} minutes with "
                f"{_threads_text(row.get('threads'))} on a shared 2-core CPU machine")
    minutes = " + ".join(f"{st['elapsed_s'] / 60:.0f}" for st in chain)
    return (f"It was trained from scratch in {_COUNT.get(len(chain), len(chain))} phases, about {minutes} minutes "
            f"with {_threads_text(row.get('threads'))} on shared 2-core CPU machines")


def reproduce_text(row: dict, subject: str = "The shipped model") -> str:
    """How ``make train`` reproduces the run that made ``row``'s checkpoint, from its recorded schedules;
    for a fine-tuned model, every phase (``subject`` names whose run a sentence is about)."""
    chain = phase_chain(row)
    if len(chain) > 1:
        n = len(chain)
        steps = ["phase 1 into `.train/run1` (its pick goes to `.train/run1/pick`)"]
        steps += [f"phase {i} into `.train/run{i}` from phase {i - 1}'s pick" +
                  ("" if i == n else f" (its pick goes to `.train/run{i}/pick`)") for i in range(2, n + 1)]
        runs = ", then ".join(steps)
        every = "both phases" if n == 2 else f"all {_COUNT.get(n, n)} phases"
        return (f"`make train` runs {every}: {runs}, each with its watcher; phase {n}'s pick is shipped here. "
                f"This model's phase {n} started from `{row.get('init_from', '?')}`. " +
                reproduce_text(chain[0], "Phase 1"))
    threads = row.get("threads", 1)
    flag = "" if threads == 1 else f" TRAIN_THREADS={threads}"
    schedules = row.get("schedules")
    if not schedules:
        return f"{subject} is the output of one run of `make train` in a fresh clone."
    if len(schedules) == 1:
        return f"{subject} is the output of one run of `make train TRAIN_STEPS={schedules[0][1]}{flag}` in a fresh clone."
    cmds = ", then ".join(f"`make train TRAIN_STEPS={steps}{flag}`" for _, steps in schedules)
    switches = "; ".join(f"from step {start} the lr follows the {steps}-step run's cosine"
                         for start, steps in schedules[1:])
    return (f"{subject}'s run changed its schedule: {cmds}, on the same run directory (each resumes "
            f"where the last stopped; {switches}, a warm restart). Each `make train` ships its own pick "
            "here; the last one's is this model.")


def build_card(model_dir: Path, row: dict, curve: list[dict], hardware: str | None = None) -> str:
    """README.md text for ``model_dir`` shipping the checkpoint described by ``row``; ``hardware``
    defaults to this machine's (``machine_text``)."""
    hardware = hardware or machine_text()
    c = json.loads((model_dir / "config.json").read_text())
    size = (model_dir / "model.safetensors").stat().st_size
    with safe_open(str(model_dir / "model.safetensors"), "pt") as f:
        params = sum(math.prod(f.get_slice(k).get_shape()) for k in f.keys())
    n_curve = curve[-1]["indist"].get("n", "?") if curve else "?"
    fields = {
        "params": f"{params:,}", "params_m": f"{params / 1e6:.1f}",
        "hidden": c["hidden_size"], "layers": c["num_hidden_layers"], "heads": c["num_attention_heads"],
        "kv": c["num_key_value_heads"], "hd": c["head_dim"], "ffn": c["intermediate_size"], "vocab": c["vocab_size"],
        "theta": f"{c['rope_theta']:.0f}", "size_mb": f"{size / 1e6:.1f}", "step": row["step"],
        "n_indist": row["indist"].get("n", "?"), "n_harder": row["harder"].get("n", "?"),
        "metrics_table": metrics_table(row), "categories_table": categories_table(row),
        "legacy_table": legacy_table(row), "probe": row.get("probe_text", "–"), "curve_n": n_curve,
        "curve_table": curve_table(curve), "grammar": grammar_section(),
        "reproduce": reproduce_text(row), "phases": phases_text(row, hardware), "trained": trained_text(row),
    }
    text = _TEMPLATE.read_text()
    for key, value in fields.items():
        text = text.replace("{{" + key + "}}", str(value))
    return text


if __name__ == "__main__":
    import sys

    if sys.argv[1:2] != ["--refresh-grammar"]:
        sys.exit("usage: python -m training.card --refresh-grammar [CARD]")
    refresh_grammar(Path(sys.argv[2] if len(sys.argv) > 2 else Path(__file__).resolve().parent.parent
                         / "models" / "tiny-agent" / "README.md"))
