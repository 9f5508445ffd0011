"""``bench agent``'s checks, figures, table, plot and headline line.

    check(trace, side, memory, level, result)   what the side did that the trace did not say: INVALID lines
    summarise(trace, result)                     one level of one side in figures
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from bench.agent_sides import TaskRun
from bench.agent_trace import Trace
from bench.common import markdown_table, percentile, save_figure

HEADLINE_LEVEL = 4
BASE, OURS = "vllm-client", "turnstream-vllm"
GOAL = 1.43


def check(trace: Trace, side: str, memory: str, level: int, result: dict[str, Any]) -> list[str]:
    """Every task made exactly the trace's calls (names, arguments), its answer, the trace's token count
    per turn (plus one end token, counted or not, the same on every turn), and every tool ran."""
    tasks = {t.id: t for t in trace.tasks}
    problems = []
    for run in result["runs"]:
        where = f"{side} ({memory}, concurrency {level}), task {run.task}"
        if run.error:
            problems.append(f"{where}: {run.error}")
            continue
        task = tasks[run.task]
        if len(run.turns) != len(task.turns):
            problems.append(f"{where}: {len(run.turns)} turns, the trace has {len(task.turns)}")
            continue
        extra = {obs.completion_tokens - len(turn.ids) for obs, turn in zip(run.turns, task.turns)}
        if len(extra) != 1 or not extra <= {0, 1}:
            problems.append(f"{where}: tokens per turn {[o.completion_tokens for o in run.turns]}, "
                            f"the trace's {[len(t.ids) for t in task.turns]}")
        for k, (obs, turn) in enumerate(zip(run.turns, task.turns)):
            want = [(c.name, c.arguments) for c in turn.calls]
            if obs.calls != want:
                problems.append(f"{where}, turn {k}: calls {obs.calls}, the trace's {want}")
            if not turn.calls and obs.text != turn.answer:
                problems.append(f"{where}: answer {obs.text[:60]!r}..., the trace's {turn.answer[:60]!r}...")
            missing = [c.ref for c in turn.calls if c.ref not in result["stamps"]]
            if missing:
                problems.append(f"{where}: tools never ran for {missing}")
    return problems


def summarise(trace: Trace, result: dict[str, Any]) -> dict[str, Any]:
    runs: list[TaskRun] = [r for r in result["runs"] if not r.error]
    stamps, tasks = result["stamps"], {t.id: t for t in trace.tasks}
    walls = [r.wall_s for r in runs]
    dispatch, resume = [], []
    for r in runs:
        for k, obs in enumerate(r.turns):
            dispatch += [1e3 * (stamps[ref]["start"] - t) for ref, t in obs.closed.items() if ref in stamps]
            prev = tasks[r.task].turns[k - 1].calls if k else []
            ends = [stamps[c.ref]["end"] for c in prev if c.ref in stamps]
            if ends and obs.first_token:
                resume.append(1e3 * (obs.first_token - max(ends)))
    n = max(len(runs), 1)
    phases = {k: sum(v) / n for k, v in breakdown(runs, stamps).items()}
    return {"phases_s_per_task": phases, "task_mean_s": sum(walls) / n, "tasks": len(runs),
            "task_p50_s": percentile(walls, 50), "task_p99_s": percentile(walls, 99),
            "tasks_per_min": 60 * len(runs) / result["wall_s"] if result["wall_s"] else 0.0,
            "prompt_tokens_per_task": sum(o.prompt_tokens for r in runs for o in r.turns) / n,
            "prompt_computed_per_task": sum(o.prompt_tokens - o.cached_tokens for r in runs for o in r.turns) / n,
            "dispatch_p50_ms": percentile(dispatch, 50), "dispatch_p99_ms": percentile(dispatch, 99),
            "resume_p50_ms": percentile(resume, 50), "resume_p99_ms": percentile(resume, 99),
            "cpu_s_per_task": result["cpu_s"] / n,
            "residency_per_task": {k.removeprefix("turnstream_decoder_"): v / n
                                   for k, v in result.get("residency", {}).items()},
            "completion_tokens_per_task": sum(o.completion_tokens for r in runs for o in r.turns) / n}


PHASES = ("first token", "decode", "tools after turn end", "result to next token", "other")


def breakdown(runs: list[TaskRun], stamps: dict[str, dict[str, float]]) -> dict[str, list[float]]:
    """Where each task's time went, seconds by phase: the first turn's wait for its first token, the
    turns' decoding (first token to end), tools still running after their turn ended, last result
    to the next turn's first token; "other" is what is left (0 when the phases tile the task)."""
    out: dict[str, list[float]] = {p: [] for p in PHASES}
    for r in runs:
        t, acc = r.start, dict.fromkeys(PHASES, 0.0)
        for k, obs in enumerate(r.turns):
            if obs.first_token is None:
                continue
            acc["first token" if k == 0 else "result to next token"] += max(0.0, obs.first_token - t)
            acc["decode"] += max(0.0, (obs.end or obs.first_token) - obs.first_token)
            t = obs.end or obs.first_token
            ends = [stamps[ref]["end"] for ref in obs.closed if ref in stamps]
            if ends:
                acc["tools after turn end"] += max(0.0, max(ends) - t)
                t = max(t, max(ends))
        acc["other"] = max(0.0, r.end - r.start - sum(acc.values()))
        for p in PHASES:
            out[p].append(acc[p])
    return out


def ratio(results: dict[str, Any], memory: str, level: int, key: str = "task_p50_s") -> float:
    try:
        return results[memory][BASE][level][key] / results[memory][OURS][level][key]
    except (KeyError, ZeroDivisionError):
        return float("nan")


def headline(results: dict[str, Any]) -> str:
    r = ratio(results, "tight", HEADLINE_LEVEL)
    shown = "n/a (needs both sides, tight memory)" if math.isnan(r) else f"{r:.2f}x"
    return (f"agent: at concurrency {HEADLINE_LEVEL}, task p50 {shown} shorter than vLLM's server with a client "
            f"loop (goal >= {GOAL}x)")


def table(results: dict[str, Any], levels: list[int]) -> str:
    headers = ["memory", "side", "conc.", "task p50 s", "p99 s", "tasks/min", "vs vllm-client (p50)",
               "prompt tok computed / task", "closed->started p50 ms", "result->next token p50 ms", "CPU s / task",
               "pins lapsed / admission waits per task"]
    rows = []
    for memory, sides in results.items():
        for side, by_level in sides.items():
            for level in levels:
                s = by_level.get(level)
                if s is None:
                    continue
                base = results[memory].get(BASE, {}).get(level, {}).get("task_p50_s", float("nan"))
                rows.append([memory, side, level, s["task_p50_s"], s["task_p99_s"], s["tasks_per_min"],
                             f"{base / s['task_p50_s']:.2f}x" if s["task_p50_s"] and not math.isnan(base) else "-",
                             round(s["prompt_computed_per_task"]), s["dispatch_p50_ms"], s["resume_p50_ms"],
                             s["cpu_s_per_task"], kept(s.get("residency_per_task") or {})])
    return markdown_table(headers, rows)


def kept(per_task: dict[str, float]) -> str:
    """The vLLM engine's residency per task (turnstream on vLLM only): pins lapsed / admission waits."""
    if "pins_lapsed" not in per_task:
        return "-"
    return f"{per_task['pins_lapsed']:.1f} / {per_task.get('admission_waits', 0.0):.1f}"


def phase_table(results: dict[str, Any], level: int) -> str:
    """Seconds per task by phase at one concurrency, every side and memory setting."""
    rows = [[memory, side] + [round(by_level[level]["phases_s_per_task"][p], 3) for p in PHASES]
            + [round(by_level[level]["task_mean_s"], 3)]
            for memory, sides in results.items() for side, by_level in sides.items() if level in by_level]
    return markdown_table(["memory", "side", *PHASES, "task (mean)"], rows)


def plot(path: Path, results: dict[str, Any], levels: list[int]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    memories = list(results) or ["(none)"]
    fig, axes = plt.subplots(1, len(memories), figsize=(6.5 * len(memories), 4.2), dpi=110, squeeze=False)
    for ax, memory in zip(axes[0], memories):
        for side, by_level in results.get(memory, {}).items():
            xs = [c for c in levels if c in by_level]
            ax.plot(xs, [by_level[c]["task_p50_s"] for c in xs], marker="o", label=side)
        ax.set_title(f"agent task time, p50 ({memory} KV memory)")
        ax.set_xlabel("tasks in flight")
        ax.set_ylabel("seconds")
        ax.set_xscale("log", base=2)
    save_figure(fig, path, list(axes[0]))
