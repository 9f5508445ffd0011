"""KV-aware routing of new turns: send a turn to the decoder that already holds its prefix.

Continuations (tool results) already go to the decoder that kept the session's KV pinned.
This covers the other turns that start from a prefix some decoder has computed:

* a user message that continues a session (``POST /v1/sessions/{sid}/messages``): the decoder
  that ran the session's previous turn (its ``claim:{turn}`` field) holds the conversation;
* a new session whose conversation opens like an earlier one -- above all the OpenAI API, where
  every follow-up request (the client's tool results, the next user message) is a new one-turn
  session repeating the whole conversation so far.  The decoder records, as it starts every
  turn, ``ts:decode:route:{conversation_key}`` = itself, where the key hashes the tools and the
  messages up to the first user message (what every later request of that conversation starts
  with); the gateway looks it up.

A turn goes to that decoder's private stream only if the decoder is alive and not busier than
the least busy decoder by more than ``route_max_imbalance`` turns in flight (``ts:decode:load``,
kept by the decoders); otherwise to the shared queue, where the first free decoder takes it.
Without that guard, sticky conversations pile onto whichever decoder started them while
another idles, and the saved prefill is lost to queueing (``turnstream bench routing``).  A
route is a hint: a wrong or stale one costs a prefix-cache miss, never correctness, and a dead
decoder's private stream is adopted by the others as for continuations.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Callable
from typing import Any

import redis.asyncio as aioredis

from schemas import keys
from runtime.config import Config


def conversation_key(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
    """Hash of what every request of one conversation starts with: tools, then messages to the first user one."""
    head: list[dict[str, Any]] = []
    for m in messages:
        head.append({"role": m.get("role"), "content": m.get("content")})
        if m.get("role") == "user":
            break
    blob = json.dumps([tools or [], head], sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.blake2b(blob.encode(), digest_size=12).hexdigest()


def turn_started(pipe: Any, cfg: Config, key: str, worker: str) -> None:
    """Queue on ``pipe``: ``worker`` starts a turn of a conversation opening like ``key`` (it will hold that KV)."""
    for build in started_calls(cfg, key, worker):
        build(pipe)


def started_calls(cfg: Config, key: str, worker: str) -> list[Callable[[Any], Any]]:
    """``turn_started``'s commands, each queued by one build (``pipe`` -> the command queued on it)."""
    calls: list[Callable[[Any], Any]] = [lambda pipe: pipe.hincrby(keys.DECODE_LOAD, worker, 1)]
    if cfg.kv_routing == "prefix":
        calls.append(lambda pipe: pipe.set(keys.decoder_route(key), worker, ex=cfg.route_ttl_s))
    return calls


def turn_ended(pipe: Any, worker: str) -> None:
    """Queue on ``pipe``: ``worker`` finished a turn (with the turn's end, in its round trip)."""
    pipe.hincrby(keys.DECODE_LOAD, worker, -1)


async def forget_dead(r: aioredis.Redis) -> None:
    """Drop the load entries of decoders without a heartbeat (each decoder also rewrites its own count
    with every heartbeat, which corrects any drift of the increments)."""
    workers = [w.decode() for w in await r.hkeys(keys.DECODE_LOAD)]
    if not workers:
        return
    pipe = r.pipeline(transaction=False)
    for w in workers:
        pipe.exists(keys.decoder_heartbeat(w))
    dead = [w for w, alive in zip(workers, await pipe.execute()) if not alive]
    if dead:
        await r.hdel(keys.DECODE_LOAD, *dead)


def settled(cfg: Config, *, key: str | None = None, owner: str | None = None,
            live: frozenset[str] | None = None) -> str | None:
    """The stream a new turn goes to when no lookup could change it, else None: the shared queue when
    routing is off or has nothing to go by, or when at most one decoder is alive (``live``, as
    ``job_stream`` takes it) and no ``owner`` is named -- a route could only name that decoder, which
    reads the shared queue too (one that started since the heartbeats were read misses a prefix at
    worst: a route is a hint)."""
    if cfg.kv_routing != "prefix" or (owner is None and key is None):
        return keys.DECODE_JOBS
    if owner is None and live is not None and len(live) <= 1:
        return keys.DECODE_JOBS
    return None


async def job_stream(r: aioredis.Redis, cfg: Config, *, key: str | None = None, owner: str | None = None,
                     batcher: Any = None, live: frozenset[str] | None = None) -> str:
    """The stream a new turn goes to: ``owner``'s (or ``key``'s decoder's) private one when it may
    take it, else the shared queue (``settled``, when that needs no lookup).  ``batcher`` (a
    ``runtime.bus.Batcher``): the lookup leaves with the other commands of its round trip.  ``live``:
    the decoders known to be alive (their heartbeats, read recently by the caller), which saves the
    round trip that checks the holder's heartbeat."""
    known = settled(cfg, key=key, owner=owner, live=live)
    if known is not None:
        return known
    reads: list[Any] = [lambda p: p.hgetall(keys.DECODE_LOAD)]
    if owner is None:
        reads.append(lambda p: p.get(keys.decoder_route(key)))
    if batcher is not None:
        load, *found = await asyncio.gather(*(batcher.submit(build) for build in reads))
    else:
        pipe = r.pipeline(transaction=False)
        for build in reads:
            build(pipe)
        load, *found = await pipe.execute()
    owner = owner or (found[0].decode() if found and found[0] else None)
    if not owner:
        return keys.DECODE_JOBS
    if not (owner in live if live is not None else await r.exists(keys.decoder_heartbeat(owner))):
        return keys.DECODE_JOBS
    turns = {k.decode(): int(v) for k, v in load.items()}
    if turns.get(owner, 0) > min(turns.values(), default=0) + cfg.route_max_imbalance:
        return keys.DECODE_JOBS
    return keys.decoder_jobs(owner)
