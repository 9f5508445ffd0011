"""Run ``turnstream bench NAME`` as a user does (a subprocess of the CLI) and read what it wrote."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class BenchRun:
    rc: int
    output: str
    out: Path

    def result(self, name: str) -> dict[str, Any]:
        return json.loads((self.out / f"{name}.json").read_text())


def run_bench(name: str, out: Path, *args: str, timeout_s: float = 600) -> BenchRun:
    """``turnstream bench NAME --out OUT ARGS...``: exit status, stdout + stderr, the output folder."""
    proc = subprocess.run([sys.executable, "-m", "turnstream.cli", "bench", name, "--out", str(out), *args],
                          capture_output=True, text=True, timeout=timeout_s)
    return BenchRun(proc.returncode, proc.stdout + proc.stderr, out)


def assert_valid(run: BenchRun, name: str) -> dict[str, Any]:
    """The benchmark exited 0, found nothing wrong with its scenario and wrote its three outputs."""
    assert run.rc == 0, f"bench {name} exited {run.rc}:\n{run.output[-4000:]}"
    assert "INVALID" not in run.output, run.output[-4000:]
    data = run.result(name)
    assert data.get("problems", []) == [], data["problems"]
    assert (run.out / f"{name}.md").stat().st_size > 0 and (run.out / f"{name}.png").stat().st_size > 1000
    return data
