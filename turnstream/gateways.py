"""``turnstream gateway`` as several processes on one port, as vLLM's ``--api-server-count``.

One gateway process spends a core at most: at ~0.07 ms of CPU per streamed token through chat
completions (``bench serve``) that is ~14k tokens/s, less than one GPU decodes for a small model at a
large batch.  With ``gateway_processes`` > 1 (or ``auto`` on a machine with the cores for it) the
command starts that many gateway processes, each binding the port with SO_REUSEPORT (the kernel
spreads new connections over them), and supervises them:

* every process is a whole gateway (its own relay reader, heartbeat and connections); they share
  nothing but the port and Redis, so a client's session may be served by any of them, as by replicas;
* ``/metrics``, answered by whichever process a scrape reaches, reports all of them: their counters
  and histograms are kept in a directory they share (prometheus_client's multiprocess mode, as vLLM's
  API servers do) and summed at the scrape;
* SIGTERM or SIGINT stops them all (each ends its streams first, ``gateway.app.serve``); a process
  that exits on its own is started again, unless it exits within ``START_GRACE_S`` of its start (a
  port taken by something else, a bad key file): then all stop and the command exits with its code.
"""

from __future__ import annotations

import logging
import shutil
import signal
import subprocess
import tempfile
import threading
import time

from runtime import cpu
from runtime.config import Config
from turnstream.processes import child_env, spawn, stop_all

log = logging.getLogger(__name__)

CORES_PER_PROCESS = 8  # the decoder, parser, tools and Redis want cores too
MAX_AUTO = 4  # past this one parser process is the narrower stage (start more: --workers parser,parser,...)
START_GRACE_S = 10.0
STOP_GRACE_S = 10.0
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


def processes_for(cores: int) -> int:
    """``auto``: one gateway process per ``CORES_PER_PROCESS`` usable cores, 1 to ``MAX_AUTO``."""
    return max(1, min(MAX_AUTO, cores // CORES_PER_PROCESS))


def resolve(cfg: Config) -> tuple[int, str]:
    """How many gateway processes ``cfg`` asks for, and why (for the start-up line)."""
    if cfg.gateway_processes != "auto":
        return int(cfg.gateway_processes), "gateway_processes"
    cores = cpu.usable_cores()
    return processes_for(cores), f"auto: {cores} usable CPU cores, one per {CORES_PER_PROCESS}, at most {MAX_AUTO}"


def serve(cfg: Config) -> int:
    """Run the gateway: in this process, or as ``resolve(cfg)`` processes sharing the port."""
    n, why = resolve(cfg)
    if n == 1:
        from gateway.app import serve as serve_one

        serve_one(cfg)
        return 0
    log.info("gateway: %d processes on %s:%d (%s; set --gateway-processes to choose)", n, cfg.host, cfg.port, why)
    return Supervisor(cfg, n).run()


class Supervisor:
    """Starts ``n`` gateway processes on the port and keeps them running (see the module doc)."""

    def __init__(self, cfg: Config, n: int) -> None:
        self.cfg, self.n = cfg.replace(gateway_processes="1", reuse_port="on"), n
        self.stopping = threading.Event()
        self.metrics_dir = ""

    def run(self) -> int:
        self.metrics_dir = tempfile.mkdtemp(prefix="turnstream-gateway-metrics-")
        env = {**child_env(self.cfg), MULTIPROC_ENV: self.metrics_dir}
        previous = {sig: signal.signal(sig, self._stop) for sig in (signal.SIGTERM, signal.SIGINT)}
        slots: list[tuple[subprocess.Popen, float]] = []
        try:
            slots = [(spawn(["gateway"], self.cfg, env=env), time.monotonic()) for _ in range(self.n)]
            while not self.stopping.wait(0.2):
                for i, (proc, started) in enumerate(slots):
                    code = proc.poll()
                    if code is None:
                        continue
                    self._forget(proc.pid)
                    if time.monotonic() - started < START_GRACE_S:
                        log.error("gateway: process %d exited with %s within %.0f s of its start; stopping",
                                  proc.pid, code, START_GRACE_S)
                        return code or 1
                    log.warning("gateway: process %d exited with %s; starting another", proc.pid, code)
                    slots[i] = (spawn(["gateway"], self.cfg, env=env), time.monotonic())
            return 0
        finally:
            _stop_all([p for p, _ in slots])
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            shutil.rmtree(self.metrics_dir, ignore_errors=True)

    def _stop(self, signum: int, frame: object) -> None:
        self.stopping.set()

    def _forget(self, pid: int) -> None:
        """A gone process's live gauges leave the sums (its counters stay: counters never go down)."""
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid, self.metrics_dir)


def _stop_all(procs: list[subprocess.Popen]) -> None:
    stop_all(procs, STOP_GRACE_S)
