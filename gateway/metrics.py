"""Prometheus metrics of one gateway process (``GET /metrics``, text format).

Event-derived metrics are observed by the relay's shared reader, once per event per process,
for the sessions this process relays (every API request and every subscribed session).  **Each
event is counted once however many replicas relay it**: only the gateway that accepted a run
counts it (``accepted``: the request that queued its first turn came in here), from that run's
turn.started to its session.ended, continuations included; another replica relaying the same
session (a client following it there) counts nothing of it.  A session whose accepting gateway does
not relay it (the sessions API, created on one replica and followed only on another) is counted by
nobody.  Queue depths and the workers' load are read from Redis at scrape time; the per-worker
series come from live heartbeats only, so a dead worker's series disappear with it.  Where several
gateway processes share one port (``turnstream.gateways``), a scrape reaches one of them and reports
them all: their series live in a directory they share (prometheus_client's multiprocess mode), counters
and histograms summed, the relay's gauges summed over the live processes, the Redis readings the latest.

The request and token series carry ``model_name`` (the served model id, as vLLM's ``vllm:*`` series
do); vLLM's name for the same fact is given where there is one.

    turnstream_requests_total{api,status}       HTTP requests of each API (chat_completions, messages,
                                                responses, sessions, ...) by response status
    turnstream_request_finished_total{api,finish_reason}   runs accepted here that ended, by the
                                                session.ended reason (a one-turn run: its turn.ended's,
                                                the same) (vllm:request_success_total)
    turnstream_e2e_request_latency_seconds{api} request accepted -> session.ended (a one-turn run, whose
                                                client is answered at its turn's end: turn.ended)
                                                (vllm:e2e_request_latency_seconds)
    turnstream_completion_tokens_total          rate() = generated tokens/s (vllm:generation_tokens_total)
    turnstream_turn_tokens_per_second           per turn: completion tokens / (turn.ended - turn.started)
    turnstream_time_to_first_token_seconds      request accepted here -> first token event of its first turn
                                                (vllm:time_to_first_token_seconds)
    turnstream_continuation_ttft_seconds        last tool.result of a turn -> first token of the next
                                                (the pinned-KV continuation: the headline latency)
    turnstream_time_per_output_token_seconds    per turn: (turn.ended - first token) / (tokens - 1)
                                                (vllm:inter_token_latency_seconds)
    turnstream_dispatch_latency_seconds         tool_call.ready -> tool.started (server tools)
    turnstream_prompt_tokens_total / turnstream_cached_prompt_tokens_total   KV reuse (pin hits)
                                                (vllm:prompt_tokens_total, vllm:prefix_cache_hits)
    turnstream_host_cached_prompt_tokens_total  of the cached ones, copied back from the host KV tier
    turnstream_pin_hit_ratio                    per turn: cached_tokens / prompt_tokens
    turnstream_queue_length{stream} / turnstream_queue_pending{stream}       XLEN / XPENDING of job streams
    turnstream_tool_queue_length{pool}          queued arq jobs per tool pool
    turnstream_decoder_tokens_out_total{worker} tokens a live decoder generated since it started
    turnstream_decoder_requests{worker,state}   running / waiting sequences of a live decoder
                                                (vllm:num_requests_running / _waiting)
    turnstream_decoder_kv_usage{worker}         used share of a live decoder's KV blocks (vllm:kv_cache_usage_perc)
    turnstream_decoder_pinned_sessions{worker}  sessions whose KV a live decoder keeps through their tools
    turnstream_decoder_pins_lapsed_total{worker}, turnstream_decoder_admission_waits_total{worker},
    turnstream_decoder_kv_refreshes_total{worker}   the vLLM engine's residency (``workers.decode.residency``):
                                                pins that ran out before the session came back, requests
                                                that waited for room, kept sessions moved behind ended ones
    turnstream_processes_alive{kind}            live processes by kind (heartbeats)
    turnstream_relay_*                          subscribers, watched sessions; relayed events and
                                                dropped clients (counters)
"""

from __future__ import annotations

import contextvars
import os
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, multiprocess
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from redis.exceptions import ResponseError

from gateway.frames import Frame
from runtime.heartbeat import live
from schemas import keys
from schemas.events import (ContentDelta, Event, ReasoningDelta, SessionEnded, ToolCallBegin, ToolCallReady,
                            ToolResult, ToolStarted, TurnEnded, TurnStarted)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
_E2E_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600, 1800)
_TRACKED = 10_000  # bounded memory for per-session timing state
_FIRST_OUTPUT = {c.__struct_config__.tag for c in (ContentDelta, ReasoningDelta, ToolCallBegin)}  # a turn's first output
_READ = {c.__struct_config__.tag for c in (TurnStarted, TurnEnded, ToolCallReady, ToolStarted, ToolResult,
                                           SessionEnded)}  # decoded
_TURN_STARTED = TurnStarted.__struct_config__.tag
# The API label of a /v1/ path's first segment (a fixed set: a label never takes a client's text).
_APIS = {"chat": "chat_completions", "completions": "completions", "messages": "messages",
         "responses": "responses", "sessions": "sessions", "models": "models", "tools": "tools"}
_API: contextvars.ContextVar[str] = contextvars.ContextVar("turnstream_api", default="other")


def api_of(path: str) -> str | None:
    """The API a request path belongs to (the ``api`` label), or None outside ``/v1/``."""
    parts = path.split("/", 3)
    if len(parts) < 3 or parts[0] or parts[1] != "v1":
        return None
    return _APIS.get(parts[2], "other")


class _Bounded(OrderedDict):
    def put(self, key: object, value: object) -> None:
        self[key] = value
        while len(self) > _TRACKED:
            self.popitem(last=False)


@dataclass
class _Run:
    """A run this process accepted: from the request that queued its first turn to its session.ended."""

    api: str
    accepted_at: float
    one_turn: bool = False  # a oneshot request's: its turn's end is the run's (``gateway.translator.TurnOutput``)
    first_output: bool = False
    ended: bool = False


class RequestMetrics:
    """ASGI middleware (outermost): counts each ``/v1/`` HTTP request by API and response status, and names
    the API to ``Metrics.accepted`` through a context variable (the route's call into the session
    operations runs in the request's context)."""

    def __init__(self, app: Callable[..., Awaitable[None]]) -> None:
        self.app = app

    async def __call__(self, scope: MutableMapping[str, Any], receive: Callable[..., Awaitable[Any]],
                       send: Callable[..., Awaitable[None]]) -> None:
        api = api_of(scope["path"]) if scope["type"] in ("http", "websocket") else None
        if api is None:
            await self.app(scope, receive, send)
            return
        status = 500  # unless a response starts

        async def seen(message: MutableMapping[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        token = _API.set(api)
        try:  # a WebSocket's frames go straight out: its status is not counted (no wrapper for every frame)
            await self.app(scope, receive, seen if scope["type"] == "http" else send)
        finally:
            _API.reset(token)
            if scope["type"] == "http":
                metrics = scope["app"].state.gateway.metrics
                metrics.requests.labels(metrics.model_name, api, status).inc()


RESIDENCY = (  # heartbeat key, series name (a counter: _total is added), help
    ("pins_lapsed", "pins_lapsed", "Pins that ran out before their session came back (vLLM engine)"),
    ("admission_waits", "admission_waits", "Requests that waited for room in the KV pool (vLLM engine)"),
    ("refreshes", "kv_refreshes", "Kept sessions moved behind ended ones in vLLM's eviction order"),
)


class _Scraped:
    """Families rebuilt from the last refresh at every scrape: live workers only, counters as counters."""

    def __init__(self, metrics: "Metrics", relay: bool = True) -> None:
        self.m, self.relay = metrics, relay  # relay: this process's relay counters (one process serves the port)

    def collect(self) -> Iterable[Any]:
        m = self.m
        tokens = CounterMetricFamily("turnstream_decoder_tokens_out", "Tokens a live decoder generated since it "
                                     "started", labels=["worker"])
        reqs = GaugeMetricFamily("turnstream_decoder_requests", "Sequences of a live decoder", labels=["worker", "state"])
        kv = GaugeMetricFamily("turnstream_decoder_kv_usage", "Used share of a live decoder's KV blocks",
                               labels=["worker"])
        pinned = GaugeMetricFamily("turnstream_decoder_pinned_sessions", "Sessions whose KV a live decoder keeps "
                                   "through their tools", labels=["worker"])
        residency = {key: CounterMetricFamily(f"turnstream_decoder_{name}", doc, labels=["worker"])
                     for key, name, doc in RESIDENCY}
        for b in m.beats.values():
            if b.get("kind") != "decode":
                continue
            w = str(b.get("worker", "?"))
            tokens.add_metric([w], float(b.get("tokens_out", 0) or 0))
            for state in ("running", "waiting"):
                reqs.add_metric([w, state], float(b.get(state, 0) or 0))
            if b.get("total_blocks"):
                kv.add_metric([w], 1.0 - float(b.get("free_blocks", 0)) / float(b["total_blocks"]))
            if "pinned_sessions" in b:
                pinned.add_metric([w], float(b["pinned_sessions"] or 0))
            for key, family in residency.items():
                if key in b:  # the vLLM engine's heartbeat
                    family.add_metric([w], float(b[key] or 0))
        alive = GaugeMetricFamily("turnstream_processes_alive", "Live processes by kind", labels=["kind"])
        for kind in ("gateway", "decode", "parser", "tools"):
            alive.add_metric([kind], sum(1 for b in m.beats.values() if b.get("kind") == kind))
        yield from (tokens, reqs, kv, pinned, *residency.values(), alive)
        if self.relay:
            relayed = CounterMetricFamily("turnstream_relay_events", "Events read by the shared reader")
            relayed.add_metric([], float(getattr(m.relay, "relayed", 0)))
            dropped = CounterMetricFamily("turnstream_relay_dropped_subscribers", "Slow subscribers dropped")
            dropped.add_metric([], float(getattr(m.relay, "dropped", 0)))
            yield from (relayed, dropped)


class Metrics:
    """The metric families, the relay's observer, and the scrape-time refresh."""

    def __init__(self, model_name: str = "turnstream") -> None:
        self.model_name = model_name
        self.registry = reg = CollectorRegistry()
        m = ["model_name"]
        self.requests = Counter("turnstream_requests", "HTTP requests by API and response status",
                                [*m, "api", "status"], registry=reg)
        self.finished = Counter("turnstream_request_finished", "Runs accepted here that ended, by the "
                                "session.ended reason", [*m, "api", "finish_reason"], registry=reg)
        self.e2e = Histogram("turnstream_e2e_request_latency_seconds", "Request accepted to session.ended",
                             [*m, "api"], registry=reg, buckets=_E2E_BUCKETS)
        self.completion_tokens = Counter("turnstream_completion_tokens", "Generated tokens", m,
                                         registry=reg).labels(model_name)
        self.turn_rate = Histogram("turnstream_turn_tokens_per_second", "Decode rate of one turn", m, registry=reg,
                                   buckets=(1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000)).labels(model_name)
        self.ttft = Histogram("turnstream_time_to_first_token_seconds", "Request to the first token of its first "
                              "turn", m, registry=reg, buckets=_LATENCY_BUCKETS).labels(model_name)
        self.continuation_ttft = Histogram("turnstream_continuation_ttft_seconds", "Last tool result of a turn to "
                                           "the first token of the next", m, registry=reg,
                                           buckets=_LATENCY_BUCKETS).labels(model_name)
        self.tpot = Histogram("turnstream_time_per_output_token_seconds", "Inter-token latency of one turn", m,
                              registry=reg, buckets=_LATENCY_BUCKETS).labels(model_name)
        self.dispatch = Histogram("turnstream_dispatch_latency_seconds", "tool_call.ready to tool.started", m,
                                  registry=reg, buckets=_LATENCY_BUCKETS).labels(model_name)
        self.prompt_tokens = Counter("turnstream_prompt_tokens", "Prompt tokens of admitted turns", m,
                                     registry=reg).labels(model_name)
        self.cached_tokens = Counter("turnstream_cached_prompt_tokens", "Prompt tokens served from KV cache/pins",
                                     m, registry=reg).labels(model_name)
        self.host_cached_tokens = Counter("turnstream_host_cached_prompt_tokens", "Of the cached prompt tokens, "
                                          "those copied back from the host KV tier", m, registry=reg).labels(model_name)
        self.pin_hit = Histogram("turnstream_pin_hit_ratio", "cached_tokens / prompt_tokens per turn", m,
                                 registry=reg, buckets=(0, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 1.0),
                                 ).labels(model_name)
        # Read from Redis at a scrape: with several processes on the port, the latest scrape's reading;
        # this process's own: summed over the live processes (``multiprocess_mode``, used only then).
        redis_read = {"registry": reg, "multiprocess_mode": "mostrecent"}
        own = {"registry": reg, "multiprocess_mode": "livesum"}
        self.queue_length = Gauge("turnstream_queue_length", "XLEN of a job stream", ["stream"], **redis_read)
        self.queue_pending = Gauge("turnstream_queue_pending", "XPENDING of a job stream's group", ["stream"],
                                   **redis_read)
        self.tool_queue = Gauge("turnstream_tool_queue_length", "Queued jobs of a tool pool", ["pool"], **redis_read)
        self.decoders = Gauge("turnstream_decoders_alive", "Decoders with a live heartbeat", **redis_read)
        self.subscribers = Gauge("turnstream_relay_subscribers", "Subscriptions relayed by this process", **own)
        self.watched = Gauge("turnstream_relay_watched_sessions", "Session streams the shared reader reads", **own)
        # Several gateway processes on one port (``turnstream.gateways``): a scrape reaches one of them and
        # reports every one's counters from the directory they share; the relay's counters go there too.
        self.shared_dir = os.environ.get("PROMETHEUS_MULTIPROC_DIR", "")
        if self.shared_dir:
            self.relayed = Counter("turnstream_relay_events", "Events read by the shared reader", registry=reg)
            self.dropped = Counter("turnstream_relay_dropped_subscribers", "Slow subscribers dropped", registry=reg)
            self._synced = (0, 0)
        reg.register(_Scraped(self, relay=not self.shared_dir))
        self.beats: dict[str, dict[str, Any]] = {}
        self.relay: object = None
        self._pending: _Bounded = _Bounded()  # sid -> _Run accepted here, until the first of its events goes by
        self._runs: _Bounded = _Bounded()  # sid -> _Run: the sessions whose events this process counts
        self._turns: _Bounded = _Bounded()  # (sid, turn) -> [turn.started ts, first token ts]
        self._ready: _Bounded = _Bounded()  # (sid, turn, index) -> tool_call.ready ts
        self._last_result: _Bounded = _Bounded()  # sid -> ts of its latest tool.result
        self._continuing: _Bounded = _Bounded()  # (sid, turn) -> the tool result a continuation waits on
        self._awaiting: _Bounded = _Bounded()  # sid -> its started turn, until that turn's first output

    # ------------------------------------------------------------------ event observer
    def accepted(self, sid: str, one_turn: bool = False) -> None:
        """A request that came in here queued a run of ``sid`` now (the TTFT and end-to-end clocks start):
        this process counts that run's events.  ``one_turn``: a oneshot request's run, which ends with its turn."""
        self._pending.put(sid, _Run(_API.get(), time.time(), one_turn))

    def observe(self, sid: str, frame: Frame) -> None:
        """Called by the relay's shared reader once per event; decodes only what it reads: a turn's
        first output, and the kinds in ``_READ``; counts only the runs accepted here."""
        kind = frame.kind
        if kind not in _FIRST_OUTPUT and kind not in _READ:
            return
        if sid in self._pending:  # the first event here of a run accepted here (its turn.started may be history)
            self._runs.put(sid, self._pending.pop(sid))
        elif kind == _TURN_STARTED and not frame.event.body.continuation:
            self._runs.pop(sid, None)  # a new run of this session, accepted by another replica
        run = self._runs.get(sid)
        if run is None:
            return
        if kind in _FIRST_OUTPUT:
            if not run.first_output or sid in self._awaiting:
                self._first_token(sid, run, frame.event)
            return
        ev = frame.event
        body = ev.body
        if isinstance(body, TurnStarted):
            self._on_turn_started(sid, ev, body)
        elif isinstance(body, TurnEnded):
            self._on_turn_ended(sid, ev, body)
            if run.one_turn:
                self._finished(run, body.finish_reason)
        elif isinstance(body, ToolCallReady):
            self._ready.put((sid, ev.turn, body.index), ev.ts)
        elif isinstance(body, ToolStarted):
            t = self._ready.pop((sid, ev.turn, body.index), None)
            if t is not None:
                self.dispatch.observe(max(0.0, ev.ts - t))
        elif isinstance(body, ToolResult):
            self._last_result.put(sid, ev.ts)
        elif isinstance(body, SessionEnded):
            self._finished(run, body.reason)  # the run stays ours: client tool results continue it

    def _finished(self, run: _Run, reason: str) -> None:
        if not run.ended:
            run.ended = True
            self.finished.labels(self.model_name, run.api, reason).inc()
            self.e2e.labels(self.model_name, run.api).observe(max(0.0, time.time() - run.accepted_at))

    def _first_token(self, sid: str, run: _Run, ev: Event) -> None:
        if not run.first_output:
            run.first_output = True
            self.ttft.observe(max(0.0, time.time() - run.accepted_at))
        if self._awaiting.get(sid) == ev.turn:
            self._awaiting.pop(sid, None)
        turn = self._turns.get((sid, ev.turn))
        if turn is not None and turn[1] is None:
            turn[1] = ev.ts
            waited = self._continuing.pop((sid, ev.turn), None)
            if waited is not None:
                self.continuation_ttft.observe(max(0.0, ev.ts - waited))

    def _on_turn_started(self, sid: str, ev: Event, body: TurnStarted) -> None:
        self._turns.put((sid, ev.turn), [ev.ts, None])
        self._awaiting.put(sid, ev.turn)
        if body.continuation and sid in self._last_result:
            self._continuing.put((sid, ev.turn), self._last_result.pop(sid))
        self.prompt_tokens.inc(body.prompt_tokens)
        self.cached_tokens.inc(body.cached_tokens)
        self.host_cached_tokens.inc(body.host_cached_tokens)
        if body.prompt_tokens > 0:
            self.pin_hit.observe(min(1.0, body.cached_tokens / body.prompt_tokens))

    def _on_turn_ended(self, sid: str, ev: Event, body: TurnEnded) -> None:
        self.completion_tokens.inc(body.completion_tokens)
        turn = self._turns.pop((sid, ev.turn), None)
        if self._awaiting.get(sid) == ev.turn:
            self._awaiting.pop(sid, None)
        if turn is None:
            return
        started, first = turn
        if ev.ts > started and body.completion_tokens:
            self.turn_rate.observe(body.completion_tokens / (ev.ts - started))
        if first is not None and body.completion_tokens > 1 and ev.ts > first:
            self.tpot.observe((ev.ts - first) / (body.completion_tokens - 1))

    # ------------------------------------------------------------------ scrape
    async def refresh(self, r: aioredis.Redis, pools: Iterable[str], relay: object) -> None:
        """Read queue depths and the live processes' heartbeats from Redis."""
        self.relay = relay
        self.queue_length.clear()
        self.queue_pending.clear()
        for stream, group in ((keys.DECODE_JOBS, keys.DECODE_GROUP), (keys.PARSE_JOBS, keys.PARSE_GROUP)):
            await self._stream_depth(r, stream, group)
        self.beats = await live(r)
        for b in self.beats.values():
            if b.get("kind") == "decode":
                await self._stream_depth(r, keys.decoder_jobs(str(b.get("worker"))), keys.DECODE_GROUP)
        if not self.shared_dir:  # a pool that is gone leaves the series (not possible in the shared files)
            self.tool_queue.clear()
        for pool in pools:
            self.tool_queue.labels(pool).set(await r.zcard(keys.tool_queue(pool)))
        self.decoders.set(sum(1 for b in self.beats.values() if b.get("kind") == "decode"))
        self.sync(relay)

    def sync(self, relay: object) -> None:
        """This process's relay figures into its gauges (and, with several processes, their shared counters):
        at every scrape, and every few seconds where a scrape may reach another process (``app``)."""
        self.subscribers.set(getattr(relay, "subscribers", 0))
        self.watched.set(getattr(relay, "watched", 0))
        if self.shared_dir:
            relayed, dropped = getattr(relay, "relayed", 0), getattr(relay, "dropped", 0)
            self.relayed.inc(relayed - self._synced[0])
            self.dropped.inc(dropped - self._synced[1])
            self._synced = (relayed, dropped)

    async def _stream_depth(self, r: aioredis.Redis, stream: str, group: str) -> None:
        self.queue_length.labels(stream).set(await r.xlen(stream))
        try:
            pending = await r.xpending(stream, group)
        except ResponseError:  # no such stream or group yet
            pending = {"pending": 0}
        self.queue_pending.labels(stream).set(int(pending.get("pending", 0) or 0))

    def render(self) -> bytes:
        if not self.shared_dir:
            return generate_latest(self.registry)
        every = CollectorRegistry()  # every process's counters, histograms and gauges, summed
        multiprocess.MultiProcessCollector(every, self.shared_dir)
        every.register(_Scraped(self, relay=False))
        return generate_latest(every)
