"""EngineCore under grammar constraints: masks hold across preemption and batching; a prefill opens the grammar."""

from __future__ import annotations

import dataclasses

import pytest

from engine_harness import TOOLS, make_core, request, run, text_of
from workers.decode.constraints import ConstraintError, constraint_for
from workers.parser import parse_text


def _constrained(rid: str, choice: object = "required", **kw: object):
    req = request(rid, f"s-{rid}", history=[{"role": "user", "content": f"question {rid}"}], **kw)  # tools unrendered
    return dataclasses.replace(req, constraint=constraint_for("hermes", None, TOOLS, {"tool_choice": choice}))


def test_constrained_outputs_survive_preemption_unchanged_and_stay_grammatical() -> None:
    def generate(num_blocks: int) -> tuple[list[str], dict]:
        core = make_core(num_blocks=num_blocks)
        reqs = [_constrained(f"r{i}", max_tokens=40) for i in range(4)]
        for r in reqs:
            core.add_request(r)
        out = run(core)
        for r in reqs:
            ids = core.grammars.tokenizer.tokenize_str(text_of(out[r.rid]), parse_special=True)
            assert core.grammars.violation(r.constraint, ids, complete=out[r.rid][-1].finish_reason == "stop") is None
        return [text_of(out[r.rid]) for r in reqs], core.stats()

    small, stats = generate(num_blocks=24)
    big, _ = generate(num_blocks=256)
    assert stats["preemptions"] > 0
    assert small == big and all(t.lstrip().startswith('<tool_call>\n{"name": "get_weather", "arguments": ') for t in small)


def test_a_prefill_is_the_grammars_first_text() -> None:
    core = make_core()
    head = '<tool_call>\n{"name": "get_weather", "arguments": '
    req = _constrained("p", {"name": "get_weather"}, max_tokens=40, prefill=head)
    core.add_request(req)
    text = head + text_of(run(core)["p"])
    ids = core.grammars.tokenizer.tokenize_str(text, parse_special=True)
    assert core.grammars.violation(req.constraint, ids, complete=False) is None
    with pytest.raises(ConstraintError, match="breaks the request's grammar"):
        core.add_request(_constrained("q", prefill="Sure!"))
    assert parse_text("hermes", text).calls or parse_text("hermes", text).invalid
