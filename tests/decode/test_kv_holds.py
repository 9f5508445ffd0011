"""How long a decoder keeps a session's KV after a turn: provisional, then what the parser says."""

from __future__ import annotations

from typing import Any

from runtime.config import load_config
from runtime.session import SessionInfo, Status
from schemas import keys
from schemas.events import TurnParsed
from workers.decode.kv_holds import KvHolds


class RecordingEngine:
    """A test double: records the pin/release calls a decoder makes (no model)."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def pin(self, session: str, seconds: float) -> None:
        self.calls.append(("pin", session, seconds))

    def release(self, session: str) -> None:
        self.calls.append(("release", session))


def _info(sid: str = "s", **params: Any) -> SessionInfo:
    return SessionInfo(sid, Status.ACTIVE, 0, "", "", 8, params=params)


async def test_a_turn_is_held_until_the_parser_says_what_it_called(r) -> None:
    engine, cfg = RecordingEngine(), load_config(pin_default_s=5, pin_max_s=60)
    holds = KvHolds(cfg, engine, r)
    holds.turn_ended(_info(), 0)
    assert engine.calls == [("pin", "s", 5.0)]  # provisional: the calls are not known yet
    await r.hset(keys.TOOL_DURATIONS, "slow", "20000")
    await holds.parsed(TurnParsed(sid="s", turn=0, attempt=1, calls=["slow", "fast"]))
    assert engine.calls[-1] == ("pin", "s", 41.0)  # 2 x 20 s + 1 s for the slowest call
    holds.turn_ended(_info(), 1)
    await holds.parsed(TurnParsed(sid="s", turn=1, attempt=1, calls=[]))
    assert engine.calls[-1] == ("release", "s")  # a final turn: nothing to wait for


async def test_stale_notes_change_nothing(r) -> None:
    engine = RecordingEngine()
    holds = KvHolds(load_config(), engine, r)
    await holds.parsed(TurnParsed(sid="unknown", turn=0, attempt=1, calls=[]))  # adopted from a dead decoder
    holds.turn_ended(_info(), 2)
    await holds.parsed(TurnParsed(sid="s", turn=1, attempt=1, calls=[]))  # an older turn's note, late
    assert engine.calls == [("pin", "s", 5.0)]


async def test_a_clients_cache_ttl_keeps_the_kv_after_a_final_turn(r) -> None:
    """Anthropic ``cache_control`` (``params.keep_kv_s``): pinned that long, capped by pin_max_s."""
    engine = RecordingEngine()
    holds = KvHolds(load_config(pin_default_s=5, pin_max_s=60), engine, r)
    holds.turn_ended(_info(keep_kv_s=300), 0)
    assert engine.calls == [("pin", "s", 60.0)]
    await holds.parsed(TurnParsed(sid="s", turn=0, attempt=1, calls=[]))
    assert engine.calls[-1] == ("pin", "s", 60.0)
    holds.turn_ended(_info(keep_kv_s=30), 1)
    await holds.parsed(TurnParsed(sid="s", turn=1, attempt=1, calls=[]))
    assert engine.calls[-1] == ("pin", "s", 30.0)
    holds.turn_ended(_info(keep_kv_s="junk"), 2)
    await holds.parsed(TurnParsed(sid="s", turn=2, attempt=1, calls=[]))
    assert engine.calls[-1] == ("release", "s")
