"""Gemma's argument notation as grammar: ``{key:value,...}``, typed by the tool's schema.

One generator for both families that write it; only the quote token differs (``<|"|>`` for Gemma 4,
``<escape>`` for FunctionGemma; an added token in each tokenizer), written QUOTE below.

    string    QUOTE text without QUOTE QUOTE
    integer   -?(0|[1-9][0-9]*)      number: a JSON number      boolean: true | false      null: null
    enum      one of its values, each written as above
    object    {key:value,...}: declared properties in schema order, required ones present, no others;
              without ``properties``: any keys
    array     [value,...] of ``items``;  anyOf / oneOf / a list of types: one of them
    other     any Gemma value ($ref, allOf, no type ...)

Written as the checkpoints' templates write a past call (no blanks, bare keys); a key that is not
a plain word is quoted like a string, which the parser (``workers.parser.formats.gemmaargs``) reads too.
Text-level string keywords (``pattern``, ``minLength`` ...) and array lengths are not enforced.
"""

from __future__ import annotations

import json
import re
from typing import Any

from workers.decode.constraints.pieces import Pieces

_BARE_KEY = re.compile(r"[A-Za-z0-9_]+")
_INT = r"/-?(0|[1-9][0-9]*)/"
_NUMBER = r"/-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?/"
_SCALARS = {"integer": _INT, "number": _NUMBER, "boolean": '("true" | "false")', "null": '"null"'}


class GemmaArgs:
    """The rules of one call's arguments; rule names carry the call's index, so calls never clash."""

    def __init__(self, p: Pieces, i: int, quote: str) -> None:
        self.p, self.prefix, self.n, self.quote = p, f"gm{i}_", 0, quote
        self.rules: list[str] = []
        # text up to and including the closing quote, never spelling the quote as text
        self.string, rule = p.until("gemma_str", quote, "" if p.is_text(quote) else re.escape(quote))
        self.rules.append(rule)

    def arguments(self, schema: dict[str, Any]) -> tuple[str, list[str]]:
        """(expression, rules): the arguments object of ``schema``."""
        top = schema if schema.get("properties") is not None else {**schema, "type": "object"}
        return self.value(top), self.rules

    def value(self, schema: Any) -> str:
        """The expression of one value of ``schema``."""
        if not isinstance(schema, dict):
            return self.any()
        if "enum" in schema or "const" in schema:
            values = schema.get("enum", [schema.get("const")])
            return "(" + " | ".join(self.p.expr(render(v, self.quote)) for v in values) + ")"
        for key in ("anyOf", "oneOf"):
            if isinstance(schema.get(key), list) and schema[key]:
                return "(" + " | ".join(self.value(s) for s in schema[key]) + ")"
        types = schema.get("type")
        if isinstance(types, list) and types:
            return "(" + " | ".join(self.value({**schema, "type": t}) for t in types) + ")"
        if types is None and "properties" in schema:
            types = "object"
        return self._typed(types, schema)

    def _typed(self, types: Any, schema: dict[str, Any]) -> str:
        if types == "string":
            return f"{self.p.expr(self.quote)} {self.string}"
        if types in _SCALARS:
            return _SCALARS[types]
        if types == "object":
            if isinstance(schema.get("properties"), dict):
                return self._object(schema["properties"], set(schema.get("required") or ()))
            return self.any_rule("gemma_obj")
        if types == "array":
            item = self.value(schema["items"]) if isinstance(schema.get("items"), dict) else self.any()
            return f'("[" ({item} ("," {item})*)? "]")'
        return self.any()

    def _object(self, props: dict[str, Any], required: set[str]) -> str:
        """``{k:v,...}`` in schema order: rule first_k starts at property k (no comma), rest_k goes on after one."""
        name = f"{self.prefix}{self.n}"
        self.n += 1
        items = [(f"{self.p.expr(key_text(k, self.quote) + ':')} {self.value(s)}", k in required) for k, s in props.items()]
        for k, (item, req) in enumerate(items):
            skip = "" if req else f" | {name}_first{k + 1}"
            self.rules.append(f"{name}_first{k}: {item} {name}_rest{k + 1}{skip}")
            self.rules.append(f'{name}_rest{k}: "," {item} {name}_rest{k + 1}' + ("" if req else f" | {name}_rest{k + 1}"))
        self.rules += [f'{name}_first{len(items)}: ""', f'{name}_rest{len(items)}: ""']
        return f'("{{" {name}_first0 "}}")'

    def any(self) -> str:
        return self.any_rule("gemma_any")

    def any_rule(self, which: str) -> str:
        """Any Gemma value (``gemma_any``) or object (``gemma_obj``): shared rules, the same in every call."""
        s = f"{self.p.expr(self.quote)} {self.string}"
        key = f"(GEMMA_KEY | {s})"
        self.rules += [f"gemma_any: {s} | gemma_obj | gemma_arr | {_NUMBER} | \"true\" | \"false\" | \"null\"",
                       f'gemma_obj: "{{" ({key} ":" gemma_any ("," {key} ":" gemma_any)*)? "}}"',
                       'gemma_arr: "[" (gemma_any ("," gemma_any)*)? "]"', f"GEMMA_KEY: /{_BARE_KEY.pattern}/"]
        return which


def key_text(key: str, quote: str) -> str:
    """A key as written: bare when a plain word, else quoted like a string."""
    return key if _BARE_KEY.fullmatch(key) else quote + key + quote


def render(value: Any, quote: str) -> str:
    """A JSON value in Gemma's argument syntax (the templates' ``format_argument``)."""
    if isinstance(value, str):
        return quote + value + quote
    if isinstance(value, dict):
        return "{" + ",".join(f"{key_text(k, quote)}:{render(v, quote)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(render(v, quote) for v in value) + "]"
    return json.dumps(value)


def arguments(parameters: dict[str, Any], i: int, quote: str, p: Pieces) -> tuple[str, list[str]]:
    """(expression, rules) of call rule ``i``'s arguments, strings between ``quote`` tokens."""
    return GemmaArgs(p, i, quote).arguments(parameters)

