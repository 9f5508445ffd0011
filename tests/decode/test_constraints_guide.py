"""llguidance behind the constraint: masks onto logits, schemas it cannot compile, the per-step mask job."""

from __future__ import annotations

import pytest
import torch

from runtime.config import load_config
from workers.decode.constraints import ConstraintError, constraint_for, turn_constraint
from workers.decode.constraints.guide import GrammarCompiler
from workers.decode.native.masks import allocate_bitmask, apply_masks
from workers.decode.synthetic import build_tokenizer

BROKEN = {"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_masks_forbid_exactly_the_cleared_bits_of_their_rows(dtype: torch.dtype) -> None:
    logits = torch.zeros(3, 70, dtype=dtype)
    bitmask = allocate_bitmask(2, 70)
    bitmask[0] = 0
    bitmask[0, 0] = 0b101  # row 2 of the logits: tokens 0 and 2 only
    bitmask[1, 2] = 0  # row 0: all but 64..69
    apply_masks(logits, bitmask, [2, 0])
    assert torch.isfinite(logits[2]).nonzero().flatten().tolist() == [0, 2]
    assert torch.isinf(logits[0]).nonzero().flatten().tolist() == list(range(64, 70))
    assert torch.isfinite(logits[1]).all()  # not a constrained row


@pytest.fixture(scope="module")
def compiler() -> GrammarCompiler:
    tok = build_tokenizer(512)
    return GrammarCompiler(tok.to_str(), [tok.token_to_id("<|im_end|>")])


def _tools(strict: bool) -> list[dict]:
    return [{"type": "function", "function": {"name": "f", "parameters": BROKEN, "strict": strict}}]


def test_a_non_strict_schema_llguidance_rejects_is_loosened_to_an_object(compiler, caplog) -> None:
    c = constraint_for("hermes", None, _tools(False), {"tool_choice": "required"})
    m = compiler.matcher(c)
    assert not m.is_error()
    assert "loosened" in caplog.text


def test_a_strict_schema_llguidance_rejects_is_an_error(compiler) -> None:
    with pytest.raises(ConstraintError, match="grammar for this request is invalid"):
        compiler.matcher(constraint_for("hermes", None, _tools(True), {"tool_choice": "required"}))


def test_grammars_are_cached_per_constraint(compiler) -> None:
    tools = [{"type": "function", "function": {"name": "g", "parameters": {"type": "object"}}}]
    c = constraint_for("hermes", None, tools, {})
    assert compiler.grammar(c) is compiler.grammar(constraint_for("hermes", None, tools, {}))


def test_a_client_grammar_of_token_ids_admits_exactly_those_tokens(compiler) -> None:
    tok = build_tokenizer(512)
    ids = tok.encode('<tool_call>\n{"name": "f"}\n</tool_call>').ids
    c = turn_constraint(load_config(), [], {"structured_outputs": {"grammar": "start: " + " ".join(
        f"<[{i}]>" for i in ids) + "\n"}}, continuation=False)
    assert compiler.violation(c, ids) is None
    assert compiler.violation(c, ids[:-1]) is not None  # must go on to the end
    assert compiler.violation(c, [ids[1], ids[0], *ids[2:]]) is not None  # that order, nothing else
