"""``turnstream up`` / ``demo``: the whole pipeline on one machine, as separate processes.

Starts the embedded Redis-compatible server (unless ``redis_url`` is set), one process per
worker kind and the gateway; Ctrl-C (or the end of the demo) stops them all, children
first, then the server.  Children also die with us (parent-death signal).  On vLLM's engine, with one
decoder and one gateway process on fewer than 8 usable cores, the decoder's process serves the gateway too (``gateway_in_decoder``,
``colocate``; ``turnstream.colocated``), and says so.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from typing import Any

import httpx

from schemas import keys
from runtime import cluster, cpu
from runtime.config import Config, ConfigError
from turnstream.embedded import EmbeddedRedis, free_port
from turnstream.gateways import CORES_PER_PROCESS, resolve as resolve_gateways
from turnstream.processes import spawn, stop_all

DEMO_MESSAGE = "What's the weather in Paris today, and can you book a table for 2 at Chez Nous at 19:00?"


def spawn_kind(kind: str, cfg: Config, **popen: Any) -> subprocess.Popen:
    """One process of ``kind``: a worker kind (decode, parser, tools) or ``gateway``."""
    return spawn(["gateway"] if kind == "gateway" else ["worker", kind], cfg, **popen)


def start_processes(cfg: Config, kinds: list[str], timeout_s: float = 120.0,
                    gateways: int = 1) -> list[tuple[str, subprocess.Popen]]:
    """One process per entry of ``kinds``, returned once every one of them is live (the gateway's
    ``/readyz`` counts their heartbeats; a ``gateway`` entry is ``gateways`` processes); all stopped on
    failure."""
    if "gateway" in kinds:  # a gateway process of its own: no decoder serves one too (``gateway_in_decoder``)
        cfg = cfg.replace(gateway_in_decoder="off")
    procs = [(k, spawn_kind(k, cfg)) for k in kinds if k]
    try:
        wait_ready(f"http://{cfg.host}:{cfg.port}", procs, timeout_s, gateways)
    except BaseException:
        stop_all([p for _, p in procs])
        raise
    return procs


def wait_ready(url: str, procs: list[tuple[str, subprocess.Popen]], timeout_s: float = 120.0,
               gateways: int = 1) -> None:
    """Until the gateway answers and, when decoders were started, reports every started process live
    (a ``gateway`` entry: ``gateways`` processes sharing its port)."""
    want = {k: sum(gateways if kind == "gateway" else 1 for kind, _ in procs if kind == k) for k, _ in procs}
    path = "/readyz" if want.get("decode") else "/healthz"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if any(p.poll() is not None for _, p in procs):
            raise RuntimeError("a turnstream process exited during start-up")
        try:
            resp = httpx.get(url + path, timeout=1.0)
            if resp.status_code == 200 and (path == "/healthz" or
                                            all(resp.json()["live"].get(k, 0) >= n for k, n in want.items())):
                return
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(0.1)
    raise RuntimeError(f"the stack at {url} was not ready after {timeout_s}s")


def wait_for_decoders(redis_url: str, n: int, timeout_s: float = 120.0) -> None:
    """Until ``n`` decoders send heartbeats (their engines are loaded and they take jobs)."""
    r = cluster.connect_sync(redis_url)
    deadline = time.monotonic() + timeout_s
    try:
        while len(set(r.scan_iter(match=keys.decoder_heartbeat("*"), count=500))) < n:  # a cluster: every master
            if time.monotonic() > deadline:
                raise RuntimeError(f"fewer than {n} decoders up after {timeout_s}s")
            time.sleep(0.1)
    finally:
        r.close()


class StackError(ConfigError):
    """A configuration ``up`` cannot start (said before anything starts, the model's download included: ``check``)."""


def check(cfg: Config, kinds: list[str]) -> None:
    """``StackError`` where ``up`` cannot start ``kinds`` as ``cfg`` asks (``colocate``'s rule); ``up`` asks before it
    resolves the model, so nothing is fetched for a stack that cannot start."""
    colocate(cfg, kinds, resolve_gateways(cfg)[0], cpu.usable_cores())


def colocate(cfg: Config, kinds: list[str], gateways: int, cores: int) -> tuple[bool, str]:
    """Whether the decoder's process serves the gateway (``gateway_in_decoder``), and why; ``StackError``
    when asked for where it cannot be: the gateway of several processes, or not exactly one decoder.  ``auto``
    does so on vLLM's engine, whose model runs in its engine-core process (the decoder's own is then Python I/O,
    like the gateway's), never on the native engine, whose steps would hold the gateway up; and only where
    ``cores`` (usable) are scarce, fewer than a gateway process is given (``CORES_PER_PROCESS``): with more, each
    of the two gets a core of its own (one process serves ~14k tokens/s at most), and the saving was measured
    on 2 cores only."""
    decoders = kinds.count("decode")
    if cfg.gateway_in_decoder == "off":
        return False, "gateway_in_decoder off"
    if cfg.gateway_in_decoder == "on":
        if gateways != 1 or decoders != 1:
            raise StackError(f"gateway_in_decoder on needs one gateway process and one decoder (here {gateways} and "
                             f"{decoders})")
        return True, "gateway_in_decoder on"
    if cfg.engine != "vllm":  # the native engine computes in the decoder's process: the gateway would wait on it
        return False, f"auto: the {cfg.engine} engine runs its model in the decoder's process"
    if gateways != 1 or decoders != 1:
        return False, f"auto: {decoders} decoders, {gateways} gateway processes"
    if cores >= CORES_PER_PROCESS:
        return False, f"auto: {cores} usable CPU cores, a core each"
    return True, f"auto: vLLM's engine, one decoder, one gateway process, {cores} usable CPU cores"


def run_stack(cfg: Config, kinds: list[str], demo: bool = False, data_dir: str | None = None,
              ready_timeout_s: float = 120.0) -> int:
    gateways, why = resolve_gateways(cfg)
    fused, fused_why = colocate(cfg, kinds, gateways, cpu.usable_cores())  # refusals came earlier: ``check``
    cfg = cfg.replace(gateway_processes=str(gateways), gateway_in_decoder="on" if fused else "off")
    server = None
    if not cfg.redis_url:  # not on the gateway's port, which its caller may have just found free too
        server = EmbeddedRedis(port=free_port(avoid={cfg.port}), data_dir=data_dir,
                               appendonly=data_dir is not None).start()
        cfg = cfg.replace(redis_url=server.url)
    if demo:
        cfg = cfg.replace(port=free_port(avoid={server.port} if server else set()))
    url = f"http://{cfg.host}:{cfg.port}"
    signal.signal(signal.SIGTERM, _raise_interrupt)
    procs: list[subprocess.Popen] = []
    interrupted = False
    try:
        print(f"turnstream: starting redis={cfg.redis_url} gateway={url} workers={','.join(kinds)}", flush=True)
        if fused:
            print(f"turnstream: the gateway on port {cfg.port} runs in the decoder's process ({fused_why}; "
                  "--gateway-in-decoder off for a process of its own)", flush=True)
        else:
            print(f"turnstream: {gateways} gateway process{'es' if gateways > 1 else ''} on port {cfg.port} ({why}; "
                  "--gateway-processes N to choose)", flush=True)
        procs = [p for _, p in start_processes(cfg, kinds if fused else [*kinds, "gateway"], ready_timeout_s, gateways)]
        print(f"turnstream: up. Try:  turnstream chat --url {url} \"{DEMO_MESSAGE}\"", flush=True)
        if demo:
            from turnstream.chat import chat

            return asyncio.run(chat(url, DEMO_MESSAGE, max_turns=cfg.max_turns))
        _wait_for_signal()
        return 0
    except KeyboardInterrupt:
        interrupted = True
        return 130
    finally:
        print("turnstream: stopping" + (" (interrupted)" if interrupted else ""), flush=True)
        stop_all(procs)
        if server:
            server.cleanup()


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _wait_for_signal() -> None:
    """Block until SIGINT or SIGTERM (Ctrl-C, or a service manager stopping us)."""
    signals = {signal.SIGINT, signal.SIGTERM}
    signal.pthread_sigmask(signal.SIG_BLOCK, signals)
    signal.sigwait(signals)
