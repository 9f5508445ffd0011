"""Stored responses (``store: true``): one hash per response, ``ts:s:{sid}:resp`` (``schemas.keys.response``).

A response is a session; what the session's own keys do not keep lives here, in the session's
slot (its key carries ``{sid}``):

    key        owner API key id: another key gets 404, as for sessions
    head       JSON: created_at and the request fields the Response object repeats
    policy     JSON: the output policy (server tools by model name, tool_choice, parallel calls)
    input      JSON: the input items as ``input_items`` lists them
    history    JSON: the conversation before this response, without ``instructions`` (chat messages)
    n_initial  how many messages the session started with (instructions and history, merged)
    background 1 for ``background: true``
    final      JSON: the final Response object                 } written once, when a gateway first
    conv       JSON: history + this response's turns           } sees the session end (``finalize``)
    owner      the decoder that ran the last turn (it may still hold the KV)

Lifetime: the hash expires ``response_ttl_s`` after it is created, and again after it is
finalized.  Until then the Response object is translated from the session's event log
(``gateway.responses.format``), which is also what a resumed stream replays.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis

from gateway.responses.output import Policy, ResponseHead, exposed_call_id
from schemas import keys

_INTERNAL_CALL_ID = re.compile(r"^call_\d+_\d+$")


@dataclass(frozen=True)
class StoredResponse:
    sid: str
    key: str
    head: ResponseHead
    policy: Policy
    input: list[dict[str, Any]]
    history: list[dict[str, Any]]
    n_initial: int
    background: bool
    final: dict[str, Any] | None
    conv: list[dict[str, Any]] | None
    owner: str


def _policy_json(p: Policy) -> str:
    return json.dumps({"servers": p.servers, "offer_tools": p.offer_tools, "named": p.named, "parallel": p.parallel,
                       "namespaces": p.namespaces, "clients": p.clients})


def _policy(raw: str) -> Policy:
    d = json.loads(raw)
    return Policy({k: tuple(v) for k, v in d["servers"].items()}, d["offer_tools"], d["named"], d["parallel"],
                  d["namespaces"], tuple(d["clients"]))


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else ("" if v is None else str(v))


def _json(v: Any) -> Any:
    return None if v is None else json.loads(v)


# a response's fields (ARGV[3..]: name, value pairs; HSETNX when ARGV[2] is "nx": the first writer wins) and
# its TTL (ARGV[1]) in one step.  A script, not MULTI: its one key runs it on one server or a cluster alike.
_WRITE = """
local set = ARGV[2] == 'nx' and 'HSETNX' or 'HSET'
for i = 3, #ARGV, 2 do redis.call(set, KEYS[1], ARGV[i], ARGV[i + 1]) end
redis.call('EXPIRE', KEYS[1], ARGV[1])
return 1
"""


class ResponseStore:
    def __init__(self, r: aioredis.Redis, ttl_s: int) -> None:
        self.r, self.ttl_s = r, ttl_s
        self._write = r.register_script(_WRITE)

    async def _put(self, sid: str, how: str, fields: dict[str, Any]) -> None:
        args: list[Any] = [self.ttl_s, how]
        for name, value in fields.items():
            args += [name, value]
        await self._write(keys=[keys.response(sid)], args=args)

    async def create(self, sid: str, *, key: str, head: ResponseHead, policy: Policy, items: list[dict[str, Any]],
                     history: list[dict[str, Any]], n_initial: int, background: bool) -> StoredResponse:
        """Store a new (running) response."""
        await self._put(sid, "set", {
            "key": key, "head": json.dumps({"created_at": head.created_at, "echo": head.echo}),
            "policy": _policy_json(policy), "input": json.dumps(items), "history": json.dumps(history),
            "n_initial": n_initial, "background": int(background)})
        return StoredResponse(sid, key, head, policy, items, history, n_initial, background, None, None, "")

    async def get(self, sid: str) -> StoredResponse | None:
        fields = ("key", "head", "policy", "input", "history", "n_initial", "background", "final", "conv", "owner")
        h = dict(zip(fields, await self.r.hmget(keys.response(sid), *fields)))
        if h["key"] is None:
            return None
        head = json.loads(h["head"])
        return StoredResponse(sid, _s(h["key"]), ResponseHead(sid, head["created_at"], head["echo"]),
                              _policy(h["policy"]), json.loads(h["input"]), json.loads(h["history"]),
                              int(h["n_initial"]), bool(int(h["background"])), _json(h["final"]), _json(h["conv"]),
                              _s(h["owner"]))

    async def finalize(self, stored: StoredResponse, final: dict[str, Any], session_msgs: list[dict[str, Any]],
                       owner: str) -> None:
        """Keep the final object and the conversation (once: the first writer wins; both are deterministic)."""
        conv = stored.history + [_expose_ids(m, stored.sid) for m in session_msgs[stored.n_initial:]]
        await self._put(stored.sid, "nx", {"conv": json.dumps(conv), "owner": owner, "final": json.dumps(final)})

    async def delete(self, sid: str) -> None:
        await self.r.delete(keys.response(sid))


def _expose_ids(msg: dict[str, Any], sid: str) -> dict[str, Any]:
    """A session message with its call ids as clients saw them (``exposed_call_id``)."""
    def expose(call_id: str) -> str:
        return exposed_call_id(sid, call_id) if _INTERNAL_CALL_ID.match(call_id) else call_id

    out = dict(msg)
    if msg.get("tool_calls"):
        out["tool_calls"] = [{**c, "id": expose(c["id"])} for c in msg["tool_calls"]]
    if msg.get("tool_call_id"):
        out["tool_call_id"] = expose(msg["tool_call_id"])
    return out
