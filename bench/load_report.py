"""The load benchmark's tables and plot: latency, and CPU per token of every stage, for each mode."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.common import markdown_table

PIPELINE = ("decoder", "parser", "gateway", "redis")  # the stages every streamed token crosses
OTHERS = ("engine", "tools", "client")  # the ReplayEngine's own work; per call, not per token; the bench client
MODE_STYLE = {"batched": "-", "per_session": "--"}
_LABEL = {"decoder": "decoder shell", "engine": "replay engine", "client": "bench client"}


def us_per_token(row: dict[str, Any]) -> dict[str, float]:
    """CPU microseconds per streamed token of each stage, and the pipeline's total.  The decoder is its
    process less its ReplayEngine's own work (making the tokens), which a real engine does on its device."""
    tokens = max(1, row["tokens"])
    us = {k: round(1e6 * v / tokens, 1) for k, v in row["cpu_s"].items()}
    us.setdefault("engine", 0.0)
    us["decoder"] = round(us["decode"] - us["engine"], 1)
    us["pipeline"] = round(sum(us[k] for k in PIPELINE), 1)
    return us


def _name(r: dict[str, Any]) -> str:
    """The row's mode, led by its variant when the run compared several."""
    return r["mode"] if r.get("variant", "default") == "default" else f"{r['variant']} {r['mode']}"


def tables(rows: list[dict[str, Any]]) -> str:
    """Two markdown tables: delivery and latency; CPU µs per token per stage."""
    lat = markdown_table(
        ["mode", "sessions", "tok/s each", "tokens", "p50 ms", "p99 ms", "max ms", "lost", "problems",
         "cmds/token", "pipeline µs/token", "load avg"],
        [[_name(r), r["sessions"], r["rate"], r["tokens"], r["p50_ms"], r["p99_ms"], r["max_ms"], r["lost"],
          len(r["problems"]), r["cmds_per_token"], round(r["us_per_token"]["pipeline"]), r["loadavg"]] for r in rows])
    stages = (*PIPELINE, "pipeline", *OTHERS)
    cpu = markdown_table(["mode", "sessions", *[f"{_LABEL.get(k, k)} µs/tok" for k in stages]],
                         [[_name(r), r["sessions"], *[round(r["us_per_token"][k]) for k in stages]] for r in rows])
    return lat + "\n\n" + cpu


def plot(path: Path, rows: list[dict[str, Any]], rate: float) -> None:
    """Left: added latency p50/p99 against S for each mode.  Right: CPU µs per token, stacked by stage."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.4), dpi=110)
    for name in dict.fromkeys(_name(r) for r in rows):
        mine = [r for r in rows if _name(r) == name]
        xs = [r["sessions"] for r in mine]
        for q, marker in (("p50", "o"), ("p99", "s")):
            left.plot(xs, [r[f"{q}_ms"] for r in mine], MODE_STYLE.get(mine[0]["mode"], "-"), marker=marker,
                      label=f"{name} {q}")
    left.set(title=f"added latency, token taken → client received ({rate:g} tok/s per session)",
             xlabel="concurrent sessions", ylabel="ms", yscale="log")
    left.grid(True, alpha=0.3)
    left.legend(fontsize=8)
    labels = [f"{_name(r)}\nS={r['sessions']}" for r in rows]
    bottom = [0.0] * len(rows)
    for stage in PIPELINE:
        vals = [r["us_per_token"][stage] for r in rows]
        right.bar(labels, vals, bottom=bottom, label=stage)
        bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    right.plot(labels, [r["us_per_token"]["client"] for r in rows], "k:", marker="x", label="bench client")
    right.set(title="CPU µs per streamed token, by stage", xlabel="mode / sessions", ylabel="µs per token")
    right.tick_params(axis="x", labelsize=7)
    right.grid(True, axis="y", alpha=0.3)
    right.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
