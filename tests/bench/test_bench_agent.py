"""``bench agent``'s pure parts: the workload it draws, the turn texts it forces, and the checks that
make a run INVALID when a side did not do what the trace says.  The runs themselves are in the
smoke tests (``test_bench_smoke.py``, ``test_bench_vllm_smoke.py``)."""

from __future__ import annotations

import json

import pytest

from bench.agent import _args, context_tokens, pools, shape
from bench.agent_report import breakdown, check, headline, summarise
from bench.agent_sides import TaskRun, TurnObs
from bench.agent_tools import registry, tools_toml
from bench.agent_trace import Shape, Trace, build_trace, grammar, turn_text
from runtime.chat_template import ChatTokenizer
from workers.decode.synthetic import CHAT_TEMPLATE, build_checkpoint, build_tokenizer


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return build_checkpoint(tmp_path_factory.mktemp("m") / "m", vocab_size=512)


@pytest.fixture(scope="module")
def trace() -> Trace:
    return build_trace(Shape(tasks=12, seed=3), build_tokenizer(512))


def test_the_workload_has_the_issues_shape(trace: Trace) -> None:
    tok = build_tokenizer(512)
    for task in trace.tasks:
        assert 3 <= len(task.turns) <= 8 and not task.turns[-1].calls and task.turns[-1].answer
        assert all(1 <= len(t.calls) <= 3 for t in task.turns[:-1])
        for call in (c for t in task.turns for c in t.calls):
            assert 0.001 <= call.latency_s <= 6.0
            assert 50 <= len(tok.encode(call.result).ids) <= 800 * 1.15  # within a word of the drawn size
    calls = [c for t in trace.tasks for turn in t.turns for c in turn.calls]
    assert any(len(t.calls) > 1 for task in trace.tasks for t in task.turns)  # some parallel calls
    assert any(c.latency_s <= 0.001 for c in calls) and any(c.latency_s > 1.0 for c in calls)  # a heavy tail
    assert len({c.ref for c in calls}) == len(calls)


def test_the_same_seed_draws_the_same_trace(tmp_path, trace: Trace) -> None:
    again = build_trace(Shape(tasks=12, seed=3), build_tokenizer(512))
    trace.save(tmp_path / "a.json")
    again.save(tmp_path / "b.json")
    assert (tmp_path / "a.json").read_text() == (tmp_path / "b.json").read_text()
    assert Trace.load(tmp_path / "a.json").calls().keys() == trace.calls().keys()
    other = build_trace(Shape(tasks=12, seed=4), build_tokenizer(512))
    assert other.tasks[0].system != trace.tasks[0].system


def test_a_forced_turn_is_what_the_chat_template_renders_for_it(model, trace: Trace) -> None:
    """The conversation a client sends back renders the model's own turn token for token, so caches hit."""
    chat = ChatTokenizer.from_dir(model)
    task = trace.tasks[0]
    messages = task.messages("r1")
    for turn in task.turns[:-1]:
        prompt = chat.render(messages, trace.tools)
        calls = [{"id": f"c{i}", "type": "function", "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
                 for i, c in enumerate(turn.calls)]
        messages = messages + [{"role": "assistant", "content": None, "tool_calls": calls}] + [
            {"role": "tool", "tool_call_id": f"c{i}", "content": c.result} for i, c in enumerate(turn.calls)]
        after = chat.render(messages, trace.tools)
        assert after.startswith(prompt + turn_text(turn) + "<|im_end|>")
    assert "<tool_call>" in CHAT_TEMPLATE


def test_the_grammar_of_a_turn_is_its_token_ids(trace: Trace) -> None:
    turn = trace.tasks[0].turns[0]
    assert grammar(turn) == "start: " + " ".join(f"<[{i}]>" for i in turn.ids) + "\n"
    assert turn.ids == build_tokenizer(512).encode(turn_text(turn), add_special_tokens=False).ids


def test_the_tools_are_the_same_python_functions_in_the_client_and_in_the_workers() -> None:
    names = [t["function"]["name"] for t in registry().openai_tools()]
    assert len(names) == 8 and all(f'[python.{n}]' in tools_toml() for n in names)


def _run(task, *, calls=None, tokens=None, text=None, error="") -> TaskRun:
    turns = []
    for k, turn in enumerate(task.turns):
        obs = TurnObs(calls=[(c.name, c.arguments) for c in turn.calls] if calls is None else calls,
                      completion_tokens=len(turn.ids) + 1 if tokens is None else tokens, prompt_tokens=100,
                      cached_tokens=60, text=turn.answer if text is None else text,
                      first_token=10.0 + 2 * k, end=10.5 + 2 * k)
        obs.closed = {c.ref: obs.end for c in turn.calls}
        turns.append(obs)
    return TaskRun(task.id, start=9.0, end=10.0 + 2 * len(task.turns), turns=turns, error=error)


def _stamps(task) -> dict:
    return {c.ref: {"ref": c.ref, "start": 10.6 + 2 * k, "end": 11.0 + 2 * k}
            for k, t in enumerate(task.turns) for c in t.calls}


def test_a_run_that_does_what_the_trace_says_is_valid(trace: Trace) -> None:
    task = trace.tasks[0]
    result = {"runs": [_run(task)], "stamps": _stamps(task), "wall_s": 10.0, "cpu_s": 4.0}
    assert check(trace, "s", "ample", 1, result) == []
    fig = summarise(trace, result)
    assert fig["prompt_computed_per_task"] == 40 * len(task.turns) and fig["cpu_s_per_task"] == 4.0
    assert fig["dispatch_p50_ms"] == pytest.approx(100.0)  # closed at 10.5, started at 10.6


def test_other_calls_tokens_answers_errors_or_tools_never_run_make_it_invalid(trace: Trace) -> None:
    task = trace.tasks[0]
    first = task.turns[0]

    def problems(run: TaskRun, stamps: dict | None = None) -> list[str]:
        return check(trace, "side", "tight", 4, {"runs": [run], "stamps": _stamps(task) if stamps is None else stamps})

    wrong_args = _run(task)
    wrong_args.turns[0].calls = [(first.calls[0].name, {**first.calls[0].arguments, "target": "x"})]
    assert "turn 0: calls" in problems(wrong_args)[0]
    more = _run(task)
    more.turns[1].completion_tokens += 3
    assert "tokens per turn" in problems(more)[0]
    assert "answer" in problems(_run(task, text="nope"))[-1]
    assert problems(_run(task, error="HTTP 500"))[0].endswith("HTTP 500")
    assert "tools never ran" in problems(_run(task), stamps={})[0]
    short = _run(task)
    short.turns.pop()
    assert "turns, the trace has" in problems(short)[0]


def test_the_phases_of_a_task_tile_its_time(trace: Trace) -> None:
    task = trace.tasks[0]
    phases = breakdown([_run(task)], _stamps(task))
    total = sum(v[0] for v in phases.values())
    assert total == pytest.approx(1.0 + 2 * len(task.turns))
    assert phases["first token"] == [pytest.approx(1.0)] and phases["other"][0] == pytest.approx(1.5)  # the answer turn ended 1.5 s before the task


def test_tight_memory_is_half_of_what_four_tasks_in_flight_hold(trace: Trace) -> None:
    contexts = context_tokens(trace, build_tokenizer(512))
    sizes = pools(contexts, [1, 4, 16])
    assert sizes["tight"]["tokens"] >= max(contexts)  # one task always fits
    assert sizes["tight"]["tokens"] == pytest.approx(max(2 * sum(contexts) / len(contexts), max(contexts) + 640), rel=0.01)
    assert sizes["ample"]["tokens"] > 16 * max(contexts)


def test_the_headline_names_the_ratio_or_says_why_not() -> None:
    fig = {"task_p50_s": 2.0}
    results = {"tight": {"vllm-client": {4: {"task_p50_s": 3.0}}, "turnstream-vllm": {4: fig}}}
    assert headline(results).startswith("agent: at concurrency 4, task p50 1.50x shorter than vLLM's server")
    assert "n/a" in headline({"ample": results["tight"]}) and headline(results).endswith("(goal >= 1.43x)")


def test_the_trace_holds_every_task_a_level_runs() -> None:
    """A call is known by its ref: a task run twice in one level would mix its two runs' tool stamps."""
    assert shape(_args(["--concurrency", "1,4,16"])).tasks == 16
    assert shape(_args(["--concurrency", "1,4", "--min-tasks", "3"])).tasks == 8  # the default trace
    assert shape(_args(["--small", "--tasks", "4", "--min-tasks", "6", "--concurrency", "1"])).tasks == 6
