"""Prompt token ids that reproduce, byte for byte, what the session's last turn had in its KV.

Re-tokenising a conversation need not give back the ids the model generated (a model may
emit a non-canonical split of a word), and the chat template may re-render an assistant turn
differently from what was generated.  Either breaks prefix reuse and greedy reproducibility.

What we do: per session, remember the token ids of the last finished turn (prompt +
completion) and their decoded text.  A new prompt is rendered to text as usual; if that text
starts with the text of a remembered id sequence (all ids, all but the final stop token, or
the prompt alone, longest first), the prompt is those ids followed by the tokenisation of the
rest of the text only.  The rest begins at a turn boundary (``<|im_end|>``-style special
tokens), where tokenisation does not merge across.  Otherwise (no record, e.g. another
decoder held the session) the whole text is tokenised.  Records are a bounded LRU of sessions
holding one text and one id list each.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Protocol


class TextCodec(Protocol):
    """Any tokenizer: ``encode`` adds no special tokens, ``decode`` keeps them."""

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...


@dataclass(frozen=True)
class _Record:
    text: str  # decode(ids)
    ids: tuple[int, ...]
    cuts: tuple[tuple[int, int], ...]  # (text length, id count) of each reusable prefix, longest first
    prompt_ids: int  # how many of ``ids`` were its prompt


class SessionPrompts:
    def __init__(self, tokenizer: TextCodec, max_records: int) -> None:
        self.tokenizer, self.max_records = tokenizer, max_records
        self.records: OrderedDict[str, _Record] = OrderedDict()

    def build(self, session: str, text: str) -> tuple[list[int], int]:
        """Prompt ids for ``text``, and how many leading ids came from the session's record."""
        cut = self._cut(self.records.get(session), text)
        if cut is None:
            return self.tokenizer.encode(text), 0
        text_len, num_ids = cut
        return list(self.records[session].ids[:num_ids]) + self.tokenizer.encode(text[text_len:]), num_ids

    @staticmethod
    def _cut(record: _Record | None, text: str, min_ids: int = 0) -> tuple[int, int] | None:
        """The longest reusable prefix of ``record`` (of more than ``min_ids`` ids) that ``text`` extends."""
        for text_len, num_ids in record.cuts if record else ():
            if num_ids > min_ids and _extends(text, record.text, text_len):
                return text_len, num_ids
        return None

    def predecessor(self, text: str, sessions: list[str]) -> str | None:
        """The first of ``sessions`` whose recorded turn, its completion included, ``text`` extends: a
        client that runs the agent loop itself sends each turn as a new request, so the conversation
        continues in a new session; None when none does."""
        for session in sessions:
            record = self.records.get(session)
            if record is not None and self._cut(record, text, min_ids=record.prompt_ids) is not None:
                return session
        return None

    def remember(self, session: str, token_ids: list[int], num_prompt_tokens: int) -> None:
        """Record a finished turn's ids (prompt + completion)."""
        text = self.tokenizer.decode(token_ids)
        cuts = [(len(text), len(token_ids))]
        for n in (len(token_ids) - 1, num_prompt_tokens):
            prefix = self.tokenizer.decode(token_ids[:n]) if 0 < n < cuts[-1][1] else None
            if prefix is not None and text.startswith(prefix):  # holds unless a cut splits a character
                cuts.append((len(prefix), n))
        self.records[session] = _Record(text, tuple(token_ids), tuple(cuts), num_prompt_tokens)
        self.records.move_to_end(session)
        while len(self.records) > self.max_records:
            self.records.popitem(last=False)

    def ids(self, session: str) -> tuple[int, ...]:
        """The remembered ids of the session's last finished turn (empty if none)."""
        record = self.records.get(session)
        return record.ids if record else ()


def _extends(text: str, recorded: str, n: int) -> bool:
    """Whether ``text`` starts with ``recorded[:n]``: the last 64 characters of it first (sibling sessions
    of one conversation share long openings and part near their ends), with no copy of ``recorded`` when
    ``n`` is all of it."""
    if len(text) < n or text[max(0, n - 64):n] != recorded[max(0, n - 64):n]:
        return False
    return text.startswith(recorded) if n == len(recorded) else text.startswith(recorded[:n])
