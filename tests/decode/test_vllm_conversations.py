"""Which idle sessions a new session's request on the vLLM engine may continue (``VllmEngine._continuable``):
those whose requests opened its conversation, not every idle one.  Pure bookkeeping over the residency
rule, no vLLM."""

from __future__ import annotations

from pathlib import Path

from runtime.routing import conversation_key
from workers.decode.engine import GenerateRequest
from workers.decode.residency import Residency
from workers.decode.vllm_engine import VllmConfig, VllmEngine

SYSTEM = {"role": "system", "content": "You are terse."}


def request(session: str, first: str | None, *later: dict, keyed: bool = True) -> GenerateRequest:
    messages = [SYSTEM, *([{"role": "user", "content": first}] if first is not None else []), *later]
    return GenerateRequest(rid=f"{session}:0:0", session=session, messages=messages,
                           conversation=conversation_key(messages, None) if keyed else "")


def served(engine: VllmEngine, rule: Residency, req: GenerateRequest, now: float) -> list[str]:
    """What ``generate`` asks before ``req`` is sent, then ``req`` sent and finished: its session idle."""
    candidates = engine._continuable(req, rule, now)
    assert rule.ask(req.session, req.rid, 30, now)
    rule.finished(req.session, 40, now)
    return candidates


def setup(tmp_path: Path, **config) -> tuple[VllmEngine, Residency]:
    return VllmEngine(VllmConfig(model=str(tmp_path), **config)), Residency(10_000, 16)  # not started


def test_a_request_may_continue_only_idle_sessions_of_its_conversation(tmp_path: Path) -> None:
    engine, rule = setup(tmp_path)
    assert served(engine, rule, request("a1", "plan a trip"), 0.0) == []
    assert served(engine, rule, request("b1", "fix the build"), 0.0) == []
    follow = request("a2", "plan a trip", {"role": "assistant", "content": "Where to?"},
                     {"role": "user", "content": "Oslo"})
    assert served(engine, rule, follow, 0.1) == ["a1"]  # the client's next turn: same opening
    assert rule.ask("a2", "a2:again", 30, 0.2)  # a2 is live now: no candidate
    assert engine._continuable(request("a3", "plan a trip", keyed=False), rule, 0.2) == ["a1"]  # key made here
    assert "a3" not in engine._continuable(request("a3", "plan a trip"), rule, 0.3)  # never its own candidate
    assert engine._continuable(request("a4", "plan a trip"), rule, 10.0) == []  # their grace is over: gone
    assert engine._conversations[follow.conversation] == ["a2", "a4"]  # a1 and a3 left the rule: dropped


def test_ended_siblings_leave_the_list_before_a_waiting_one_is_pushed_out(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr("workers.decode.vllm_engine.MAX_CONVERSATION_SESSIONS", 4)
    engine, rule = setup(tmp_path)
    served(engine, rule, request("r0", "solve task 7"), 0.0)
    rule.pin("r0", 60.0, 0.0)  # waits on its tool
    for i in range(1, 8):
        served(engine, rule, request(f"r{i}", "solve task 7"), 0.0)
        rule.release(f"r{i}", 0.0)  # ended
    assert engine._continuable(request("r0-next", "solve task 7"), rule, 0.1) == ["r0"]


def test_a_session_whose_request_has_not_reached_the_rule_stays_a_candidate(tmp_path: Path) -> None:
    """A long prompt is rendered in a thread between the lookup and the rule's ``ask``: a sibling's lookup
    meanwhile must not drop it, or its own next turn would not find it."""
    engine, rule = setup(tmp_path)
    first = request("r0", "solve task 7")
    engine._continuable(first, rule, 0.0)
    engine._entering["r0"] = 1  # as generate() counts it until it returns
    engine._continuable(request("r1", "solve task 7"), rule, 0.0)  # r0 has not asked yet
    assert rule.ask("r0", first.rid, 30, 0.1)
    rule.finished("r0", 40, 0.2)
    rule.pin("r0", 60.0, 0.2)
    assert engine._continuable(request("r0-next", "solve task 7"), rule, 0.3) == ["r0"]


def test_many_rollouts_of_one_task_each_find_their_own_predecessor(tmp_path: Path, monkeypatch) -> None:
    """Parallel rollouts share tools, system and first user message, so one key: every rollout waiting on its
    tool stays a candidate; those that ended leave the list (up to the cap, the latest)."""
    engine, rule = setup(tmp_path)
    for i in range(40):
        served(engine, rule, request(f"r{i}", "solve task 7"), 0.0)
        rule.pin(f"r{i}", 60.0, 0.0)  # each waits on its tool
    assert engine._continuable(request("r0-turn2", "solve task 7"), rule, 1.0) == [f"r{i}" for i in range(40)]
    for i in range(1, 40):
        rule.release(f"r{i}", 1.0)  # those rollouts ended
    assert engine._continuable(request("r1-turn2", "solve task 7"), rule, 1.0) == ["r0"]
    monkeypatch.setattr("workers.decode.vllm_engine.MAX_CONVERSATION_SESSIONS", 4)
    for i in range(40, 50):
        served(engine, rule, request(f"r{i}", "solve task 7"), 1.0)
    assert engine._continuable(request("r50", "solve task 7"), rule, 1.5) == ["r46", "r47", "r48", "r49"]


def test_a_conversation_without_a_user_message_is_compared_with_every_idle_session(tmp_path: Path) -> None:
    engine, rule = setup(tmp_path)
    served(engine, rule, request("x1", "hello"), 0.0)
    served(engine, rule, request("s1", None), 0.0)
    assert engine._continuable(request("s2", None, {"role": "assistant", "content": "hi"}), rule, 0.5) == ["x1", "s1"]


def test_the_engine_remembers_its_latest_conversations(tmp_path: Path) -> None:
    engine, rule = setup(tmp_path, max_session_records=3)
    served(engine, rule, request("a1", "plan a trip"), 0.0)
    for topic in ("one", "two", "three"):
        served(engine, rule, request(topic, topic), 0.0)
    assert engine._continuable(request("a2", "plan a trip"), rule, 0.5) == []  # pushed out by three newer ones
    assert len(engine._conversations) == 3
