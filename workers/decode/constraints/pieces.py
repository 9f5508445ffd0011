"""Lark building blocks over one tokenizer: text vs added tokens, and "text up to a close marker"."""

from __future__ import annotations

import json
import re
from typing import Any

ANY = r"/(.|\n)*/"


class Pieces:
    """Writes text as Lark, each of the tokenizer's added tokens as a token reference ``<[id]>``.

    llguidance matches an added token only as that token, never as its spelling in text."""

    def __init__(self, added: dict[str, int]) -> None:
        self.added = added
        self._split = re.compile("|".join(re.escape(t) for t in sorted(added, key=len, reverse=True))) if added else None

    def expr(self, *texts: str) -> str:
        """A Lark sequence matching the concatenation of ``texts`` ('' when empty)."""
        out = []
        for text in texts:
            out += [f"<[{self.added[p]}]>" if p in self.added else lit(p) for p in self._parts(text) if p]
        return " ".join(out)

    def is_text(self, text: str) -> bool:
        """True when ``text`` contains no added token (it can be part of a text lexeme)."""
        return self._split is None or self._split.search(text) is None

    def text_lead(self, text: str) -> tuple[str, str]:
        """(the text of ``text`` before its first added token, the rest)."""
        m = self._split.search(text) if self._split is not None else None
        return (text, "") if m is None else (text[:m.start()], text[m.start():])

    def until(self, name: str, close: str, avoid_re: str = "") -> tuple[str, str]:
        """(symbol, rule): text up to and including the first ``close``, never matching ``avoid_re``.

        A text ``close`` is folded into the same lexeme (lexemes are greedy: a separate close
        lexeme would never be reached); a token ``close`` cannot occur in text anyway."""
        avoid = "|".join(x for x in (_regex(close.strip() or close) if self.is_text(close) else "", avoid_re) if x)
        body = f"(({ANY}) & ~/(.|\\n)*({avoid})(.|\\n)*/)" if avoid else ANY
        if not self.is_text(close):
            text = f"{name.upper()}_TEXT"
            return name.lower(), f"{text}: {body}\n{name.lower()}: {text} {self.expr(close)}"
        return name.upper(), f"{name.upper()}: {body} {lit(close)}"

    def _parts(self, text: str) -> list[str]:
        if self._split is None:
            return [text]
        parts, pos = [], 0
        for m in self._split.finditer(text):
            parts += [text[pos:m.start()], m.group()]
            pos = m.end()
        return parts + [text[pos:]]


def added_tokens(tokenizer_json: str) -> dict[str, int]:
    """The added tokens (text -> id) of a ``tokenizer.json``: llguidance matches them only as tokens."""
    return {t["content"]: t["id"] for t in json.loads(tokenizer_json).get("added_tokens", [])}


# JSON as models write it (Python's json.dumps, chat templates' tojson): ", " and ": ", no other
# whitespace.  Free whitespace lets a small model that dislikes the forced key pad forever.
JSON_STYLE = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


def json_rule(schema: dict[str, Any]) -> str:
    """``%json`` of ``schema`` in ``JSON_STYLE`` (a schema's own ``x-guidance`` wins)."""
    style = {**JSON_STYLE, **(schema.get("x-guidance") or {})} if isinstance(schema, dict) else JSON_STYLE
    return f"%json {json.dumps({**schema, 'x-guidance': style})}"


def lit(text: str) -> str:
    """A Lark string literal."""
    return json.dumps(text, ensure_ascii=False)


def _regex(text: str) -> str:
    """``text`` as a regex inside Lark's ``/.../``."""
    return re.escape(text).replace("/", "\\/")
