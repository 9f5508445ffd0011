"""Shared benchmark plumbing: percentiles, progress lines, and JSON + markdown + PNG output."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

DEFAULT_OUT = Path(__file__).resolve().parent / "results"


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0..100) by nearest rank; NaN for no values."""
    if not values:
        return float("nan")
    s = sorted(values)
    k = max(0, min(len(s) - 1, int(round(q / 100 * (len(s) - 1)))))
    return s[k]


def progress(msg: str) -> None:
    print(f"  [{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


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
