"""llguidance behind the ``Constraint``: matchers for one tokenizer, masks onto logits.

    compiler = GrammarCompiler.from_dir(model_dir, eos_ids)
    m = compiler.matcher(constraint)         # one per sequence; grammar text cached per constraint
    fill_mask(m, bitmask, row); apply_masks(logits, bitmask, rows); m.consume_token(t)
    compiler.violation(constraint, ids)      # None, or why the token ids break the grammar

Why llguidance (``turnstream bench grammar_libs``, README): no dependencies, a matcher for a new
tool set is built in ~2 ms on any vocabulary (xgrammar: 5-80 ms, vocabulary-bound), lazy
lexemes for triggered calls, and it reads ``tokenizer.json`` itself.  Its masks cost more per
step than xgrammar's, so the native engine computes them while the model runs.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import OrderedDict
from pathlib import Path

import llguidance
import numpy as np
import torch

from workers.decode.constraints.lark import to_lark
from workers.decode.constraints.pieces import added_tokens
from workers.decode.constraints.spec import Constraint, ConstraintError

log = logging.getLogger(__name__)
_LOOSE = {"type": "object"}


class GrammarCompiler:
    """Builds llguidance matchers for ``Constraint``s over one tokenizer (thread-safe after init)."""

    def __init__(self, tokenizer_json: str, eos_ids: list[int], max_cached: int = 256) -> None:
        self.added = added_tokens(tokenizer_json)
        self.tokenizer = llguidance.LLTokenizer(tokenizer_json, eos_token=list(eos_ids) or None)
        self.vocab_size = self.tokenizer.vocab_size
        self.max_cached = max_cached
        self._grammars: OrderedDict[str, str] = OrderedDict()

    @classmethod
    def from_dir(cls, model_dir: str | Path, eos_ids: list[int]) -> "GrammarCompiler":
        return cls((Path(model_dir) / "tokenizer.json").read_text(), eos_ids)

    def lark(self, c: Constraint) -> str:
        """The Lark text of ``c`` for this tokenizer (what vLLM's guidance backend is given too)."""
        return to_lark(c, self.added)

    def grammar(self, c: Constraint) -> str:
        """llguidance's grammar of ``c``; a non-strict tool whose schema llguidance rejects is loosened
        to any JSON object (logged); raises ``ConstraintError`` when that does not help."""
        key = c.key()
        if key in self._grammars:
            self._grammars.move_to_end(key)
            return self._grammars[key]
        grammar, error = self._checked(c)
        if error and any(not t.strict for t in c.tools):
            log.warning("grammar of %s rejected (%s); non-strict tools loosened to any object", c.format, error)
            loose = tuple(t if t.strict else dataclasses.replace(t, parameters=_LOOSE) for t in c.tools)
            grammar, error = self._checked(dataclasses.replace(c, tools=loose))
        if error:
            raise ConstraintError(f"the {c.format} grammar for this request is invalid: {error}")
        self._grammars[key] = grammar
        while len(self._grammars) > self.max_cached:
            self._grammars.popitem(last=False)
        return grammar

    def matcher(self, c: Constraint) -> llguidance.LLMatcher:
        """A fresh matcher at the start of a turn under ``c``."""
        m = llguidance.LLMatcher(self.tokenizer, self.grammar(c), log_level=0)
        if m.is_error():
            raise ConstraintError(f"the {c.format} grammar could not start: {m.get_error()}")
        return m

    def violation(self, c: Constraint, ids: list[int], complete: bool = True) -> str | None:
        """None if ``ids`` follow ``c`` (and, when ``complete``, may end there); else what went wrong."""
        m = self.matcher(c)
        n = m.try_consume_tokens(ids)
        if n < len(ids):
            done = self.tokenizer.decode_str(ids[:n])
            return f"token {n} ({self.tokenizer.decode_str(ids[n:n + 1])!r}) is not allowed after {done[-80:]!r}"
        if complete and not m.is_accepting():
            return f"the text ends where the grammar needs more ({self.tokenizer.decode_str(ids)[-80:]!r})"
        return None

    def _checked(self, c: Constraint) -> tuple[str, str]:
        grammar = llguidance.LLMatcher.grammar_from_lark(self.lark(c))
        is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(grammar, self.tokenizer)
        return grammar, (messages[0] if is_error else "")


def allocate_bitmask(rows: int, vocab_size: int) -> torch.Tensor:
    """An all-allowed bitmask for ``rows`` sequences (32 tokens per int32 word)."""
    return torch.full((rows, (vocab_size + 31) // 32), -1, dtype=torch.int32)


def fill_mask(m: llguidance.LLMatcher, bitmask: torch.Tensor, row: int) -> None:
    """Write ``m``'s next-token mask into ``bitmask[row]`` (drops the GIL while it computes)."""
    v = bitmask[row]
    m.unsafe_compute_mask_ptr(v.data_ptr(), v.numel() * v.element_size())


def apply_masks(logits: torch.Tensor, bitmask: torch.Tensor, rows: list[int]) -> None:
    """Set to -inf the logits of tokens ``bitmask[i]`` forbids, for logits row ``rows[i]`` (in place)."""
    if not rows:
        return
    vocab = logits.shape[-1]
    bits = np.unpackbits(bitmask[:len(rows)].numpy().view(np.uint8), axis=-1, bitorder="little")[:, :vocab]
    if logits.device.type != "cpu" or logits.dtype == torch.bfloat16:  # numpy cannot view these
        forbid = torch.from_numpy(bits == 0).to(logits.device)
        index = torch.tensor(rows, device=logits.device)
        logits[index] = logits[index].masked_fill(forbid, float("-inf"))
        return
    values = logits.numpy()  # shares memory with the tensor
    for i, row in enumerate(rows):
        values[row][bits[i] == 0] = -np.inf
