"""py-spy flame graphs of running processes, for the benchmarks' ``--profile``.

py-spy (PyPI: ``pip install py-spy``) samples another process from outside without pausing it
(``--nonblocking``); a recording runs until ``stop()`` interrupts it, and py-spy then writes the
file.  The samples cost the profiled machine some CPU: figures of a profiled run are not quoted.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from pathlib import Path

PROFILED = ("decode", "parser", "gateway")
SUFFIX = {"flamegraph": "svg", "raw": "txt", "speedscope": "json"}


class ProfilerMissing(RuntimeError):
    """py-spy is not installed."""


def py_spy() -> str:
    """The py-spy executable: next to this interpreter, or on PATH."""
    here = Path(sys.executable).with_name("py-spy")
    found = str(here) if here.exists() else shutil.which("py-spy")
    if not found:
        raise ProfilerMissing("--profile needs py-spy: pip install py-spy")
    return found


class Profiler:
    """One py-spy recording per profiled process, started together and stopped together."""

    def __init__(self, procs: list[subprocess.Popen], files: list[Path]) -> None:
        self.procs, self.files = procs, files

    @classmethod
    def start(cls, out: str | None, tag: str, pids: dict[str, int], fmt: str = "flamegraph",
              names: tuple[str, ...] = PROFILED) -> "Profiler":
        """Record the processes ``names`` of ``pids`` to ``out/<tag>-<name>.<ext>`` (a name ``pids`` lacks
        is passed over); a no-op when ``out`` is None."""
        if out is None:
            return cls([], [])
        exe, d = py_spy(), Path(out)
        d.mkdir(parents=True, exist_ok=True)
        procs, files = [], []
        for name in (n for n in names if n in pids):
            path = d / f"{tag}-{name}.{SUFFIX[fmt]}"
            path.unlink(missing_ok=True)  # an earlier run's file is not this run's
            procs.append(subprocess.Popen([exe, "record", "--nonblocking", "--rate", "100", "--format", fmt,
                                           "--output", str(path), "--pid", str(pids[name])],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            files.append(path)
        return cls(procs, files)

    def stop(self, timeout_s: float = 60.0) -> list[Path]:
        """Interrupt every recording and wait for its file; returns the files written."""
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
        for p in self.procs:
            try:
                p.wait(timeout_s)
            except subprocess.TimeoutExpired:
                p.kill()
        return [f for f in self.files if f.exists()]
