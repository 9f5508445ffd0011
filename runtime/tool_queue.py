"""The tool queues: enqueue tool calls on their pool's arq queue the moment the parser sees them
ready (the parser's side), and the wake protocol the tool workers share.

Job ids are deterministic (``{sid}:{turn}:{index}``) and an id whose job or result still exists
is refused (as arq's ``enqueue_job`` does), so a replayed dispatch is a no-op.  One script per
call writes arq's own job record (``arq.jobs.serialize_job``, read back by arq's ``Job`` and
``Worker`` unchanged), adds it to the pool's queue and pushes its id as a wake token on the
pool's wake list (``keys.tool_wake``): an idle tool worker blocked on that list claims the job
at once (see ``workers.tools.worker``).  One round trip instead of arq's four.  Payloads are
msgspec msgpack (``ToolJob``), and so is arq's envelope -- never pickle.
"""

from __future__ import annotations

import logging
import time

import msgspec
from arq.connections import ArqRedis, RedisSettings, create_pool
from arq.constants import job_key_prefix, result_key_prefix
from arq.jobs import serialize_job
from arq.utils import timestamp_ms

from schemas import keys
from schemas.codec import encode
from schemas.events import ToolCallInvalid, ToolCallReady, ToolJob
from runtime.tool_catalog import ToolCatalog

log = logging.getLogger(__name__)

RUN_TOOL = "run_tool"
WAKE_MAX = 1000  # tokens kept at most; the periodic poll finds the jobs of trimmed ones
WAKE_TTL_S = 60  # tokens nobody took (no worker up) vanish; the periodic poll covers the rest
POLL_TOKEN = b"*"  # a wake token naming no job: "poll the whole queue"

# KEYS: arq job key, arq result key, the pool's queue, its wake list.
# ARGV: job record, score (ms), record expiry (ms), job id, wake max, wake ttl (s).
_ENQUEUE = """
if redis.call('EXISTS', KEYS[1], KEYS[2]) > 0 then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3])
redis.call('ZADD', KEYS[3], ARGV[2], ARGV[4])
redis.call('LPUSH', KEYS[4], ARGV[4])
redis.call('LTRIM', KEYS[4], 0, tonumber(ARGV[5]) - 1)
redis.call('EXPIRE', KEYS[4], ARGV[6])
return 1
"""


def serialize(obj: object) -> bytes:
    """arq job serialiser: msgspec msgpack, not pickle."""
    return msgspec.msgpack.encode(obj)


def deserialize(data: bytes) -> object:
    return msgspec.msgpack.decode(data)


async def arq_pool(url: str) -> ArqRedis:
    return await create_pool(RedisSettings.from_dsn(url), job_serializer=serialize, job_deserializer=deserialize,
                             default_queue_name=keys.tool_queue("default"))


def tool_job(sid: str, turn: int, attempt: int, call: ToolCallReady | ToolCallInvalid) -> ToolJob:
    """The job of one call, stamped ``t_ready`` now (an invalid call becomes an error result)."""
    valid = isinstance(call, ToolCallReady)
    error = "" if valid else (call.error or ("truncated" if call.truncated else "invalid call"))
    return ToolJob(sid=sid, turn=turn, attempt=attempt, index=call.index, call_id=call.id, name=call.name,
                   arguments=call.arguments if valid else call.raw, valid=valid, error=error, t_ready=time.time(),
                   unavailable=not valid and call.unavailable)


class Dispatcher:
    """Parser side of the tool queues."""

    def __init__(self, arq: ArqRedis, catalog: ToolCatalog) -> None:
        """``arq``: the queue server; ``catalog``: the published tools (which pool serves which)."""
        self.arq, self.catalog = arq, catalog
        self._enqueue = arq.register_script(_ENQUEUE)

    async def dispatch(self, sid: str, turn: int, attempt: int, call: ToolCallReady | ToolCallInvalid) -> bool:
        """Enqueue one call; False when it was already queued (a replayed dispatch)."""
        return await self.enqueue(tool_job(sid, turn, attempt, call))

    async def enqueue(self, job: ToolJob) -> bool:
        """Put ``job`` on its pool's queue and wake one idle worker of that pool for it (one script)."""
        pool, job_id = await self.catalog.pool_of(job.name), keys.tool_job_id(job.sid, job.turn, job.index)
        now = timestamp_ms()
        record = serialize_job(RUN_TOOL, (encode(job),), {}, None, now, serializer=serialize)
        queued = await self._enqueue(
            keys=[job_key_prefix + job_id, result_key_prefix + job_id, keys.tool_queue(pool), keys.tool_wake(pool)],
            args=[record, now, self.arq.expires_extra_ms, job_id, WAKE_MAX, WAKE_TTL_S])
        log.info("sid=%s turn=%d call %d %s -> pool %s%s", job.sid, job.turn, job.index, job.name, pool,
                 "" if queued else " (already queued)")
        return bool(queued)

    async def wake(self, pool: str) -> None:
        """Push a poll token for ``pool``: the worker that takes it polls the whole queue."""
        await push_poll_token(self.arq, keys.tool_wake(pool))


async def push_poll_token(r: ArqRedis, wake: str) -> None:
    """Wake one idle worker of the pool of ``wake`` to poll its queue (bounded, expiring list)."""
    pipe = r.pipeline(transaction=False)
    pipe.lpush(wake, POLL_TOKEN)
    pipe.ltrim(wake, 0, WAKE_MAX - 1)
    pipe.expire(wake, WAKE_TTL_S)
    await pipe.execute()
