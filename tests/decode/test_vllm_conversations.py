"""Which idle sessions a new session's request on the vLLM engine may continue (``VllmEngine._conversation``):
those whose requests opened its conversation, not every idle one.  Pure bookkeeping, no vLLM."""

from __future__ import annotations

from pathlib import Path

from runtime.routing import conversation_key
from workers.decode.engine import GenerateRequest
from workers.decode.vllm_engine import MAX_CONVERSATION_SESSIONS, VllmConfig, VllmEngine

SYSTEM = {"role": "system", "content": "You are terse."}


def request(session: str, first: str, *later: dict, keyed: bool = True) -> GenerateRequest:
    messages = [SYSTEM, {"role": "user", "content": first}, *later]
    return GenerateRequest(rid=f"{session}:0:0", session=session, messages=messages,
                           conversation=conversation_key(messages, None) if keyed else "")


def test_a_request_may_continue_only_sessions_of_its_conversation(tmp_path: Path) -> None:
    engine = VllmEngine(VllmConfig(model=str(tmp_path)))  # not started: no model is read
    assert engine._conversation(request("a1", "plan a trip")) == []
    assert engine._conversation(request("b1", "fix the build")) == []
    follow = request("a2", "plan a trip", {"role": "assistant", "content": "Where to?"},
                     {"role": "user", "content": "Oslo"})
    assert engine._conversation(follow) == ["a1"]  # the client's next turn: same opening, so a candidate
    assert engine._conversation(request("a3", "plan a trip", keyed=False)) == ["a1", "a2"]  # the key computed here
    assert engine._conversation(request("a2", "plan a trip")) == ["a1", "a3"]  # a session is never its own


def test_a_conversation_keeps_its_latest_sessions_and_the_engine_its_latest_conversations(tmp_path: Path) -> None:
    engine = VllmEngine(VllmConfig(model=str(tmp_path), max_session_records=3))
    for i in range(MAX_CONVERSATION_SESSIONS + 4):
        engine._conversation(request(f"a{i}", "plan a trip"))
    last = MAX_CONVERSATION_SESSIONS + 4
    assert engine._conversation(request(f"a{last}", "plan a trip")) == [f"a{i}" for i in range(last - MAX_CONVERSATION_SESSIONS, last)]
    for topic in ("one", "two", "three"):
        engine._conversation(request(topic, topic))
    assert engine._conversation(request("a-again", "plan a trip")) == []  # pushed out by three newer ones
    assert len(engine._conversations) == 3
