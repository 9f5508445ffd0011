"""Enqueue tool calls on their pool's arq queue the moment the parser sees them ready.

Job ids are deterministic (``{sid}:{turn}:{index}``), so a replayed dispatch is a no-op.
After each enqueue a wake token is pushed to the pool's wake list: tool workers block on
it instead of sleeping a poll interval (see ``workers.tools.worker``).
"""

from __future__ import annotations

import logging
import time

import msgspec
from arq.connections import ArqRedis, RedisSettings, create_pool

from schemas import keys
from schemas.codec import encode
from schemas.events import ToolCallInvalid, ToolCallReady, ToolJob
from workers.tools.registry import Registry

log = logging.getLogger(__name__)

RUN_TOOL = "run_tool"
WAKE_MAX = 1000


def serialize(obj: object) -> bytes:
    """arq job serialiser: msgspec msgpack, not pickle."""
    return msgspec.msgpack.encode(obj)


def deserialize(data: bytes) -> object:
    return msgspec.msgpack.decode(data)


def wake_key(pool: str) -> str:
    return f"{keys.tool_queue(pool)}:wake"


async def arq_pool(url: str) -> ArqRedis:
    return await create_pool(RedisSettings.from_dsn(url), job_serializer=serialize, job_deserializer=deserialize,
                             default_queue_name=keys.tool_queue("default"))


class Dispatcher:
    """Parser side of the tool queue."""

    def __init__(self, arq: ArqRedis, registry: Registry) -> None:
        self.arq, self.registry = arq, registry

    def pool_of(self, name: str) -> str:
        spec = self.registry.get(name)
        return spec.pool if spec else "default"

    async def dispatch(self, sid: str, turn: int, attempt: int, call: ToolCallReady | ToolCallInvalid) -> bool:
        """Enqueue one call (an invalid one too: the tool worker turns it into an error result)."""
        valid = isinstance(call, ToolCallReady)
        job = ToolJob(sid=sid, turn=turn, attempt=attempt, index=call.index, call_id=call.id, name=call.name,
                      arguments=call.arguments if valid else call.raw, valid=valid,
                      error="" if valid else (call.error or ("truncated" if call.truncated else "invalid call")),
                      t_ready=time.time())
        pool = self.pool_of(call.name)
        queued = await self.arq.enqueue_job(RUN_TOOL, encode(job), _job_id=keys.tool_job_id(sid, turn, call.index),
                                            _queue_name=keys.tool_queue(pool))
        pipe = self.arq.pipeline(transaction=False)
        pipe.lpush(wake_key(pool), b"1")
        pipe.ltrim(wake_key(pool), 0, WAKE_MAX)
        await pipe.execute()
        log.info("sid=%s turn=%d call %d %s -> pool %s%s", sid, turn, call.index, call.name, pool,
                 "" if queued else " (already queued)")
        return queued is not None
