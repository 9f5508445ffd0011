"""The gateway served from the decode worker's process (``gateway_in_decoder``), as vLLM's API server hosts
its engine client.

The two stages still meet only through Redis, exactly as in separate processes: the gateway writes the
session and queues its turn, the decoder reads the job, streams the events, and the gateway's relay reads
them back.  Nothing is handed over in memory and neither imports the other (this launcher imports both),
so every delivery property holds as it does across processes.  What one process saves is the second
process's share of the machine: one event loop wakes for an engine step's output and the relay read that
follows it, one interpreter's housekeeping, one set of context switches (~12 % less pipeline CPU a
token through vLLM's engine on 2 cores, two stacks alternated: docs/benchmarks.md).  What it costs: the
gateway and the decoder share one core (the GIL), so this suits one decoder behind one gateway process
where cores are scarce (``turnstream up`` chooses it then, ``auto``: ``turnstream.stack.colocate``); and a
decoder that dies takes the gateway's HTTP connections with it, as vLLM's server does (clients resume
their streams once it runs again: ``turnstream up`` restarts no process of its own).

SIGINT/SIGTERM stop the gateway first (its streams end, as ``gateway.app.server`` says; uvicorn's own handlers
while it serves, this loop's before and after), then the decoder (its heartbeat removed, its engine stopped); a
decoder that ends on its own (its engine failed to start) stops the gateway, and the process exits with its
error.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable

from runtime.config import Config

log = logging.getLogger(__name__)


async def serve_with_gateway(cfg: Config, run_worker: Callable[[asyncio.Event], Awaitable[None]]) -> None:
    """Run ``run_worker(stop)`` (the decode worker) and the gateway in this event loop until a signal."""
    from gateway.app import server, sockets

    stop = asyncio.Event()
    gateway = server(cfg, loop="none")

    def stop_gateway() -> None:  # uvicorn's handlers may have taken the signal already (the same one comes here too)
        if not gateway.should_exit:
            gateway.handle_exit(signal.SIGTERM, None)

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):  # uvicorn raises a signal it took again once it served: it ends here
        loop.add_signal_handler(sig, stop_gateway)
    worker = asyncio.create_task(run_worker(stop), name="decode-worker")
    worker.add_done_callback(lambda _: setattr(gateway, "should_exit", True))
    log.info("gateway on %s:%d served from this decode worker's process (gateway_in_decoder)", cfg.host, cfg.port)
    try:
        await gateway.serve(sockets=sockets(cfg))
    finally:
        stop.set()  # the gateway is done: now the decoder
        await worker
