"""``NativeEngine``: the ``Engine`` protocol over ``EngineCore``, stepped by one background thread.

Threads and ownership::

    event loop thread                         engine thread (owns EngineCore)
    -----------------                         -------------------------------
    generate(): register a stream  --inbox->  add / abort / pin / release
                await deltas       <-call_soon_threadsafe--  core.step() outputs
    stats(): reads plain counters

The engine thread drains the inbox, then steps while there is work; when idle it sleeps on
the inbox until a command arrives or the next pin deadline passes.  Only the engine thread
mutates the core; the loop thread only enqueues commands and reads counters.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from runtime.mailbox import Mailbox
from workers.decode.native.config import EngineConfig, cpu_threads
from workers.decode.native.core import EngineCore
from workers.decode.engine import GenerateDelta, GenerateRequest
from workers.decode.errors import EngineError

log = logging.getLogger(__name__)
_STOP = ("stop",)


Outputs = list[tuple[str, "GenerateDelta | BaseException"]]


class NativeEngine:
    """Paged-KV, continuously batching torch engine for Llama / Qwen2 / Qwen3 checkpoints."""

    name = "native"

    def __init__(self, config: EngineConfig, clock: Callable[[], float] = time.monotonic) -> None:
        self.config, self.clock = config, clock
        self.model = Path(config.model).name
        self.core: EngineCore | None = None
        self._inbox: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
        self._streams: dict[str, Mailbox[GenerateDelta | BaseException]] = {}
        self._thread: _EngineThread | None = None

    @classmethod
    def from_config(cls, cfg: Any) -> "NativeEngine":
        """The engine for the process-wide ``runtime.config.Config`` (``--engine native``)."""
        return cls(EngineConfig.from_process_config(cfg))

    async def start(self) -> None:
        """Load the model (in an executor) and start the stepping thread."""
        loop = asyncio.get_running_loop()
        self.core = await loop.run_in_executor(None, EngineCore, self.config, self.clock)
        deliver = lambda outputs: loop.call_soon_threadsafe(self._put, outputs)  # noqa: E731
        threads = cpu_threads(self.config.threads)
        self._thread = _EngineThread(self.core, self._inbox, deliver, self.clock, threads)
        self._thread.start()
        log.info("native engine up: %s on %s (%s, %s), %d blocks of %d tokens, %d CPU threads", self.model,
                 self.config.device, self.core.dtype, self.core.dtype_reason, self.config.num_blocks,
                 self.config.block_size, threads)

    async def stop(self) -> None:
        if self._thread is None:
            return
        self._inbox.put(_STOP)
        await asyncio.get_running_loop().run_in_executor(None, self._thread.join)
        self._thread = None
        for stream in self._streams.values():
            stream.put_nowait(EngineError("the engine stopped"))

    async def generate(self, req: GenerateRequest) -> AsyncIterator[GenerateDelta]:
        """Deltas of one request; leaving the loop early aborts it.  Errors raise ``EngineError``."""
        if self._thread is None:
            raise EngineError("the engine is not started")
        if req.rid in self._streams:
            raise EngineError(f"request {req.rid} is already streaming")
        stream: Mailbox[GenerateDelta | BaseException] = Mailbox()
        self._streams[req.rid] = stream
        self._inbox.put(("add", req))
        finished = False
        try:
            while not finished:
                item = await stream.get()
                if isinstance(item, BaseException):
                    finished = True
                    raise item
                finished = item.finished
                yield item
        finally:
            self._streams.pop(req.rid, None)
            if not finished:
                self._inbox.put(("abort", req.rid))

    async def abort(self, rid: str) -> None:
        self._inbox.put(("abort", rid))

    def pin(self, session: str, seconds: float) -> None:
        self._inbox.put(("pin", session, seconds))

    def release(self, session: str) -> None:
        self._inbox.put(("release", session))

    def reset_prefix_cache(self) -> None:
        """Forget unpinned cached KV (benchmarks)."""
        self._inbox.put(("reset",))

    def spill_prefix_cache(self) -> None:
        """Move unpinned cached KV to the host tier (benchmarks)."""
        self._inbox.put(("spill",))

    def stats(self) -> dict[str, Any]:
        if self.core is None:
            return {"running": 0, "waiting": 0}
        return dict(self.core.stats(), threads=self._thread.threads if self._thread else 0)

    def _put(self, outputs: Outputs) -> None:
        """On the event loop: hand each output to its request's stream (gone streams are ignored)."""
        for rid, item in outputs:
            stream = self._streams.get(rid)
            if stream is not None:
                stream.put_nowait(item)


class _EngineThread(threading.Thread):
    """Owns the core: drains commands, steps while there is work, sleeps until a command or a deadline."""

    def __init__(self, core: EngineCore, inbox: queue.SimpleQueue[tuple[Any, ...]],
                 deliver: Callable[[Outputs], Any], clock: Callable[[], float], threads: int) -> None:
        super().__init__(name="native-engine", daemon=True)
        self.core, self.inbox, self.deliver, self.clock = core, inbox, deliver, clock
        self.want_threads = threads
        self.threads = 0  # torch's CPU threads as this thread steps with them (stats)

    def run(self) -> None:
        import torch

        torch.set_num_threads(self.want_threads)  # set in the thread that runs the steps
        self.threads = torch.get_num_threads()
        while self._drain(block=not self.core.has_work()):
            if self.core.has_work():
                self._step()  # scheduling expires pins too
            else:
                self.core.expire_pins()

    def _drain(self, block: bool) -> bool:
        """Handle queued commands (waiting for one when ``block``); False once asked to stop."""
        try:
            cmd = self.inbox.get(timeout=self._idle_timeout()) if block else self.inbox.get_nowait()
        except queue.Empty:
            return True
        outputs: Outputs = []
        while cmd != _STOP:
            try:
                self._handle(cmd, outputs)
            except Exception as exc:  # outermost loop of the engine thread: report, keep serving
                log.exception("engine command %s failed", cmd[0])
                if cmd[0] == "add":
                    outputs.append((cmd[1].rid, EngineError(f"request failed: {exc!r}")))
            try:
                cmd = self.inbox.get_nowait()
            except queue.Empty:
                break
        if outputs:
            self.deliver(outputs)
        return cmd != _STOP

    def _idle_timeout(self) -> float | None:
        deadline = self.core.next_deadline()
        return None if deadline is None else max(0.0, deadline - self.clock()) + 0.001

    def _handle(self, cmd: tuple[Any, ...], outputs: Outputs) -> None:
        match cmd:
            case ("add", req):
                try:
                    self.core.add_request(req)
                except EngineError as exc:
                    outputs.append((req.rid, exc))
            case ("abort", rid):
                delta = self.core.abort(rid)
                if delta is not None:
                    outputs.append((rid, delta))
            case ("pin", session, seconds):
                self.core.pin(session, seconds)
            case ("release", session):
                self.core.release(session)
            case ("reset",):
                self.core.reset_prefix_cache()
            case ("spill",):
                self.core.spill_prefix_cache()

    def _step(self) -> None:
        try:
            outputs: Outputs = list(self.core.step())
        except Exception as exc:  # outermost loop: fail the live requests, keep serving
            log.exception("engine step failed; aborting %d requests", len(self.core.requests))
            outputs = []
            for rid in list(self.core.requests):
                self.core.abort(rid)
                outputs.append((rid, EngineError(f"engine step failed: {exc!r}")))
        if outputs:
            self.deliver(outputs)  # one wake-up of the event loop per step
