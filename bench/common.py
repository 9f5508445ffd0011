"""Shared benchmark plumbing: percentiles, progress lines, and JSON + markdown + PNG output."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

DEFAULT_OUT = Path(__file__).resolve().parent / "results"
REPO = Path(__file__).resolve().parent.parent
VLLM_VENV = REPO / ".venv-vllm"
SERVE_TOPICS = ("the weather in Paris", "a good book", "the test results", "your plan for today", "the last meeting",
                "a trip to Oslo", "the build failure", "a dinner for two")


def serve_prompt(i: int) -> str:
    """The ``i``-th user message ``bench serve`` sends (and ``bench.engine_alone`` renders)."""
    return f"Request {i}: tell me about {SERVE_TOPICS[i % len(SERVE_TOPICS)]}."


def vllm_python(venv: Path = VLLM_VENV) -> tuple[Path | None, str]:
    """The python of the vLLM venv (``make venv-vllm``), or None and why it cannot be used."""
    python = venv / "bin" / "python"
    if not (venv / ".installed").exists() or not python.exists():
        return None, f"no vLLM venv at {venv} (make venv-vllm builds it)"
    return python, ""


def vllm_env(tmp: Path) -> dict[str, str]:
    """Offline, no usage report, a 1 GiB KV cache, caches and temp files under ``tmp``."""
    return {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "VLLM_CPU_KVCACHE_SPACE": "1",
            "VLLM_CACHE_ROOT": str(tmp / "vllm"), "TORCHINDUCTOR_CACHE_DIR": str(tmp / "inductor"),
            "XDG_CACHE_HOME": str(tmp / "cache"), "TMPDIR": str(tmp)}


QUIET_CORES = 0.05  # under this share of one core: quiet
QUIET_WINDOW_S = 0.25
QUIET_TIMEOUT_S = 20.0


def wait_quiet(cpu_seconds: Callable[[], float], timeout_s: float = QUIET_TIMEOUT_S) -> float | None:
    """Wait until ``cpu_seconds`` (of other processes: a server, an engine) grows by under ``QUIET_CORES``
    of a core over ``QUIET_WINDOW_S``: the seconds waited, or None when it did not within ``timeout_s``.
    vLLM's engine keeps a core busy for about a second after its last request; whatever is timed next
    on a 2-core machine would otherwise pay for it."""
    waited, prev = 0.0, cpu_seconds()
    while waited < timeout_s:
        time.sleep(QUIET_WINDOW_S)
        waited += QUIET_WINDOW_S
        cur = cpu_seconds()
        if cur - prev < QUIET_CORES * QUIET_WINDOW_S:
            return waited
        prev = cur
    return None


def tree_cpu_seconds(root: int) -> float:
    """User + system CPU seconds of ``root`` and all its live descendants (and their reaped children)."""
    return sum(process_tree_cpu(root).values())


def process_tree_cpu(root: int) -> dict[int, float]:
    """CPU seconds (user + system, reaped children included) of ``root`` and each live descendant, by pid."""
    return {pid: seconds for pid, (_, seconds) in process_tree(root).items()}


def process_tree(root: int) -> dict[int, tuple[int, float]]:
    """``root`` and each live descendant, by pid: its parent's pid and its CPU seconds (user + system,
    reaped children included)."""
    stats: dict[int, tuple[int, float]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue  # exited meanwhile
            ticks = sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
            stats[int(entry.name)] = (int(fields[1]), ticks / os.sysconf("SC_CLK_TCK"))
    tree, frontier = {root}, [root]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, (ppid, _) in stats.items() if ppid == parent and pid not in tree]
        tree.update(children)
        frontier += children
    return {pid: stats[pid] for pid in tree if pid in stats}


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0..100) by nearest rank; NaN for no values."""
    if not values:
        return float("nan")
    s = sorted(values)
    k = max(0, min(len(s) - 1, int(round(q / 100 * (len(s) - 1)))))
    return s[k]


def progress(msg: str) -> None:
    print(f"  [{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def mismatches(what: str, got: dict[str, Any], want: dict[str, Any]) -> list[str]:
    """``what: key got, expected want`` for every key where the run differs from its scenario."""
    return [f"{what}: {k} {got.get(k)!r}, expected {v!r}" for k, v in want.items() if got.get(k) != v]


def verdict(name: str, problems: list[str]) -> int:
    """Exit status of a benchmark: 1, naming each problem, when it did not measure what it says it
    measures (calls not made, events missing, tokens not computed); a figure of nothing is no figure."""
    for p in problems[:20]:
        print(f"turnstream bench {name}: INVALID: {p}", file=sys.stderr, flush=True)
    if problems:
        print(f"turnstream bench {name}: {len(problems)} problems; the scenario did not happen as stated, "
              "so its figures are void", file=sys.stderr, flush=True)
    return 1 if problems else 0


def markdown_table(headers: list[str], rows: list[list[Any]]) -> str:
    def cell(x: Any) -> str:
        return f"{x:.3g}" if isinstance(x, float) else str(x)

    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cell(x) for x in row) + " |" for row in rows]
    return "\n".join(lines)


def write_results(name: str, out: str | Path | None, data: dict[str, Any], table: str) -> Path:
    """Write ``<name>.json`` and ``<name>.md`` under ``out``; returns the directory."""
    d = Path(out or DEFAULT_OUT)
    d.mkdir(parents=True, exist_ok=True)
    meta = {"benchmark": name, "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "cpus": os.cpu_count(), "python": sys.version.split()[0]}
    (d / f"{name}.json").write_text(json.dumps({**meta, **data}, indent=2))
    (d / f"{name}.md").write_text(f"### bench {name}\n\n{table}\n")
    print(table, flush=True)
    return d


def plot(path: Path, title: str, xlabel: str, ylabel: str, series: dict[str, tuple[list[float], list[float]]],
         logy: bool = False) -> None:
    """A line plot of several (x, y) series to ``path`` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    for label, (xs, ys) in series.items():
        ax.plot(xs, ys, marker="o", label=label)
    ax.set_title(title)
    if all(float(x).is_integer() for xs, _ in series.values() for x in xs):
        from matplotlib.ticker import MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if logy:
        ax.set_yscale("log")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def save_figure(fig: Any, path: Path, axes: list[Any]) -> None:
    """Grid and legend on each of ``axes``, then the figure to ``path`` (PNG), closed."""
    import matplotlib.pyplot as plt

    for ax in axes:
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
