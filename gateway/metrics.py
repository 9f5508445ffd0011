"""Prometheus metrics of one gateway process (``GET /metrics``, text format).

Event-derived metrics are observed by the relay's shared reader, once per event per process,
for the sessions this process relays (every API request and every subscribed session); a
session relayed by two replicas is counted by both.  Queue depths and the workers' load are
read from Redis at scrape time; the per-worker series come from live heartbeats only, so a
dead worker's series disappear with it.

    turnstream_completion_tokens_total          rate() = generated tokens/s (relayed sessions)
    turnstream_turn_tokens_per_second           per turn: completion tokens / (turn.ended - turn.started)
    turnstream_time_to_first_token_seconds      request accepted here -> first token event of turn 0
    turnstream_continuation_ttft_seconds        last tool.result of a turn -> first token of the next
                                                (the pinned-KV continuation: the headline latency)
    turnstream_time_per_output_token_seconds    per turn: (turn.ended - first token) / (tokens - 1)
    turnstream_dispatch_latency_seconds         tool_call.ready -> tool.started (server tools)
    turnstream_prompt_tokens_total / turnstream_cached_prompt_tokens_total   KV reuse (pin hits)
    turnstream_host_cached_prompt_tokens_total  of the cached ones, copied back from the host KV tier
    turnstream_pin_hit_ratio                    per turn: cached_tokens / prompt_tokens
    turnstream_queue_length{stream} / turnstream_queue_pending{stream}       XLEN / XPENDING of job streams
    turnstream_tool_queue_length{pool}          queued arq jobs per tool pool
    turnstream_decoder_tokens_out_total{worker} tokens a live decoder generated since it started
    turnstream_decoder_requests{worker,state}   running / waiting sequences of a live decoder
    turnstream_decoder_kv_usage{worker}         used share of a live decoder's KV blocks (native engine)
    turnstream_processes_alive{kind}            live processes by kind (heartbeats)
    turnstream_relay_*                          subscribers, watched sessions; relayed events and
                                                dropped clients (counters)
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from redis.exceptions import ResponseError

from gateway.frames import Frame
from runtime.heartbeat import live
from schemas import keys
from schemas.events import (ContentDelta, Event, ReasoningDelta, ToolCallBegin, ToolCallReady, ToolResult,
                            ToolStarted, TurnEnded, TurnStarted)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
_TRACKED = 10_000  # bounded memory for per-session timing state
_FIRST_OUTPUT = {c.__struct_config__.tag for c in (ContentDelta, ReasoningDelta, ToolCallBegin)}  # a turn's first output
_READ = {c.__struct_config__.tag for c in (TurnStarted, TurnEnded, ToolCallReady, ToolStarted, ToolResult)}  # decoded


class _Bounded(OrderedDict):
    def put(self, key: object, value: object) -> None:
        self[key] = value
        while len(self) > _TRACKED:
            self.popitem(last=False)


class _Scraped:
    """Families rebuilt from the last refresh at every scrape: live workers only, counters as counters."""

    def __init__(self, metrics: "Metrics") -> None:
        self.m = metrics

    def collect(self) -> Iterable[Any]:
        m = self.m
        tokens = CounterMetricFamily("turnstream_decoder_tokens_out", "Tokens a live decoder generated since it "
                                     "started", labels=["worker"])
        reqs = GaugeMetricFamily("turnstream_decoder_requests", "Sequences of a live decoder", labels=["worker", "state"])
        kv = GaugeMetricFamily("turnstream_decoder_kv_usage", "Used share of a live decoder's KV blocks",
                               labels=["worker"])
        for b in m.beats.values():
            if b.get("kind") != "decode":
                continue
            w = str(b.get("worker", "?"))
            tokens.add_metric([w], float(b.get("tokens_out", 0) or 0))
            for state in ("running", "waiting"):
                reqs.add_metric([w, state], float(b.get(state, 0) or 0))
            if b.get("total_blocks"):
                kv.add_metric([w], 1.0 - float(b.get("free_blocks", 0)) / float(b["total_blocks"]))
        alive = GaugeMetricFamily("turnstream_processes_alive", "Live processes by kind", labels=["kind"])
        for kind in ("gateway", "decode", "parser", "tools"):
            alive.add_metric([kind], sum(1 for b in m.beats.values() if b.get("kind") == kind))
        relayed = CounterMetricFamily("turnstream_relay_events", "Events read by the shared reader")
        relayed.add_metric([], float(getattr(m.relay, "relayed", 0)))
        dropped = CounterMetricFamily("turnstream_relay_dropped_subscribers", "Slow subscribers dropped")
        dropped.add_metric([], float(getattr(m.relay, "dropped", 0)))
        yield from (tokens, reqs, kv, alive, relayed, dropped)


class Metrics:
    """The metric families, the relay's observer, and the scrape-time refresh."""

    def __init__(self) -> None:
        self.registry = reg = CollectorRegistry()
        self.completion_tokens = Counter("turnstream_completion_tokens", "Generated tokens", registry=reg)
        self.turn_rate = Histogram("turnstream_turn_tokens_per_second", "Decode rate of one turn", registry=reg,
                                   buckets=(1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000))
        self.ttft = Histogram("turnstream_time_to_first_token_seconds", "Request to first token of turn 0",
                              registry=reg, buckets=_LATENCY_BUCKETS)
        self.continuation_ttft = Histogram("turnstream_continuation_ttft_seconds", "Last tool result of a turn to "
                                           "the first token of the next", registry=reg, buckets=_LATENCY_BUCKETS)
        self.tpot = Histogram("turnstream_time_per_output_token_seconds", "Inter-token latency of one turn",
                              registry=reg, buckets=_LATENCY_BUCKETS)
        self.dispatch = Histogram("turnstream_dispatch_latency_seconds", "tool_call.ready to tool.started",
                                  registry=reg, buckets=_LATENCY_BUCKETS)
        self.prompt_tokens = Counter("turnstream_prompt_tokens", "Prompt tokens of admitted turns", registry=reg)
        self.cached_tokens = Counter("turnstream_cached_prompt_tokens", "Prompt tokens served from KV cache/pins",
                                     registry=reg)
        self.host_cached_tokens = Counter("turnstream_host_cached_prompt_tokens", "Of the cached prompt tokens, "
                                          "those copied back from the host KV tier", registry=reg)
        self.pin_hit = Histogram("turnstream_pin_hit_ratio", "cached_tokens / prompt_tokens per turn", registry=reg,
                                 buckets=(0, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 1.0))
        self.queue_length = Gauge("turnstream_queue_length", "XLEN of a job stream", ["stream"], registry=reg)
        self.queue_pending = Gauge("turnstream_queue_pending", "XPENDING of a job stream's group", ["stream"],
                                   registry=reg)
        self.tool_queue = Gauge("turnstream_tool_queue_length", "Queued jobs of a tool pool", ["pool"], registry=reg)
        self.decoders = Gauge("turnstream_decoders_alive", "Decoders with a live heartbeat", registry=reg)
        self.subscribers = Gauge("turnstream_relay_subscribers", "Subscriptions relayed by this process",
                                 registry=reg)
        self.watched = Gauge("turnstream_relay_watched_sessions", "Session streams the shared reader reads",
                             registry=reg)
        reg.register(_Scraped(self))
        self.beats: dict[str, dict[str, Any]] = {}
        self.relay: object = None
        self._requests: _Bounded = _Bounded()  # sid -> request time (for TTFT)
        self._turns: _Bounded = _Bounded()  # (sid, turn) -> [turn.started ts, first token ts]
        self._ready: _Bounded = _Bounded()  # (sid, turn, index) -> tool_call.ready ts
        self._last_result: _Bounded = _Bounded()  # sid -> ts of its latest tool.result
        self._continuing: _Bounded = _Bounded()  # (sid, turn) -> the tool result a continuation waits on
        self._awaiting: _Bounded = _Bounded()  # sid -> its started turn, until that turn's first output

    # ------------------------------------------------------------------ event observer
    def accepted(self, sid: str) -> None:
        """A session's first turn was requested now (the TTFT clock starts)."""
        self._requests.put(sid, time.time())

    def observe(self, sid: str, frame: Frame) -> None:
        """Called by the relay's shared reader once per event; decodes only what it reads: a turn's
        first output, and the kinds in ``_READ``."""
        if frame.kind in _FIRST_OUTPUT:
            if sid in self._requests or sid in self._awaiting:
                self._first_token(sid, frame.event)
            return
        if frame.kind not in _READ:
            return
        ev = frame.event
        body = ev.body
        if isinstance(body, TurnStarted):
            self._on_turn_started(sid, ev, body)
        elif isinstance(body, TurnEnded):
            self._on_turn_ended(sid, ev, body)
        elif isinstance(body, ToolCallReady):
            self._ready.put((sid, ev.turn, body.index), ev.ts)
        elif isinstance(body, ToolStarted):
            t = self._ready.pop((sid, ev.turn, body.index), None)
            if t is not None:
                self.dispatch.observe(max(0.0, ev.ts - t))
        elif isinstance(body, ToolResult):
            self._last_result.put(sid, ev.ts)

    def _first_token(self, sid: str, ev: Event) -> None:
        t0 = self._requests.pop(sid, None)
        if t0 is not None:
            self.ttft.observe(max(0.0, time.time() - t0))
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
        self.tool_queue.clear()
        for pool in pools:
            self.tool_queue.labels(pool).set(await r.zcard(keys.tool_queue(pool)))
        self.decoders.set(sum(1 for b in self.beats.values() if b.get("kind") == "decode"))
        self.subscribers.set(getattr(relay, "subscribers", 0))
        self.watched.set(getattr(relay, "watched", 0))

    async def _stream_depth(self, r: aioredis.Redis, stream: str, group: str) -> None:
        self.queue_length.labels(stream).set(await r.xlen(stream))
        try:
            pending = await r.xpending(stream, group)
        except ResponseError:  # no such stream or group yet
            pending = {"pending": 0}
        self.queue_pending.labels(stream).set(int(pending.get("pending", 0) or 0))

    def render(self) -> bytes:
        return generate_latest(self.registry)
