"""The decoder's barrier sweep reads every active session at once and acts only where it must:
an overdue client call gets its error result, a completed turn that was never continued is."""

from __future__ import annotations

import asyncio

from runtime.barrier import Arrival
from runtime.config import load_config
from runtime.turns import Turns
from schemas import keys
from schemas.codec import decode_job
from schemas.events import ContinueTurn
from runtime import bus
from workers.decode.housekeeping import Housekeeping


async def test_the_sweep_answers_overdue_calls_and_continues_unsent_turns_only(r) -> None:
    turns = Turns(r)
    for sid in ("quiet", "waiting", "unsent"):
        await turns.sessions.create(sid, [{"role": "user", "content": "hi"}], max_turns=4)
    await turns.barrier.awaiting_client("waiting", 0, 0, "call_0_0", "ask_user", "{}")
    assert await turns.barrier.turn_end("waiting", 0, 1) == Arrival.RECORDED
    await turns.sessions.record_message("waiting", 0, {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_0_0", "type": "function", "function": {"name": "ask_user", "arguments": "{}"}}]})
    await turns.sessions.record_message("unsent", 0, {"role": "assistant", "content": "x"})
    assert await turns.barrier.turn_end("unsent", 0, 0) == Arrival.COMPLETED  # ...and its completer died
    cfg = load_config(client_tool_timeout_s=0.0, sweep_after_s=0.001)
    await asyncio.sleep(0.01)
    await Housekeeping(cfg, r, "d1", turns).sweep()
    results = await turns.barrier.results("waiting", 0)
    assert [res["is_error"] for res in results] == [True] and "did not return a result" in results[0]["content"]
    jobs = [decode_job(f[bus.FIELD]) for _, f in await r.xrange(keys.DECODE_JOBS)]
    assert ContinueTurn(sid="unsent", turn=0) in jobs and ContinueTurn(sid="waiting", turn=0) in jobs
    assert not any(j.sid == "quiet" for j in jobs)
    assert not await turns.barrier.unsent("unsent", 0, older_than_s=0.0)
