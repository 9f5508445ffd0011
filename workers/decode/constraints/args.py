"""A call's arguments as grammar: one JSON object, XML-style parameters, or Python keyword arguments.

    json    %json <the tool's schema>                      (hermes, llama3_json, mistral, kimi, deepseek, harmony)
    xml     open(key) value close, per declared parameter  (qwen3_coder, minimax_m2, glm45)
    xtml    xml, the open tag naming the value's type      (kimi_k3: one alternative per type of the schema)
    python  key=literal, ... in schema order               (pythonic)
    gemma   {key:value,...}, strings between quote tokens  (functiongemma, gemma4; see gemma.py)

XML and Python parameters come in schema order; required ones must appear, optional ones may.
Values: a plain string is bare text up to the close tag (XML) or a quoted literal (Python);
an enum is one of its values; numbers, booleans and null by their type; anything else
(objects, arrays in XML, ...) is JSON of its schema.  Text-level string keywords (``pattern``,
``minLength``...) hold inside JSON arguments but not for bare-text or Python values.
"""

from __future__ import annotations

import json
from typing import Any

from workers.decode.constraints.formats import NAME, STRING_FLAG, XTML_TYPE, Params, Syntax
from workers.decode.constraints.gemma import arguments as gemma_arguments
from workers.decode.constraints.pieces import Pieces, json_rule, lit
from workers.decode.constraints.spec import ToolSpec

_PY_STR = r"""(/'([^'\\\n]|\\.)*'/ | /"([^"\\\n]|\\.)*"/)"""
_PY_TYPES = {"integer": r"/-?(0|[1-9][0-9]*)/", "number": r"/-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?/",
             "boolean": '("True" | "False")', "null": '"None"', "string": _PY_STR}


def arguments(tool: ToolSpec, i: int, s: Syntax, p: Pieces) -> tuple[str, list[str]]:
    """(expression, rules) of the arguments of call rule ``i``."""
    if s.args == "xml":
        return _xml(tool, s.params, p)
    if s.args == "xtml":
        return _xtml(tool, s.params, p)
    if s.args == "python":
        return _python(tool, i)
    if s.args == "gemma":
        return gemma_arguments(tool.parameters, i, s.quote, p)
    return f"args_{i}", [f"args_{i}: {json_rule(tool.parameters)}"]


def _props(tool: ToolSpec) -> tuple[dict[str, Any], set[str]]:
    return tool.parameters.get("properties") or {}, set(tool.parameters.get("required") or ())


def _xml(tool: ToolSpec, params: Params, p: Pieces) -> tuple[str, list[str]]:
    props, required = _props(tool)
    parts, rules = [], []
    for key, schema in props.items():
        value, extra = _xml_value(schema, params.close.replace(NAME, key), p)
        rules += extra
        flag = "true" if schema.get("type") == "string" else "false"
        param = f"({p.expr(params.open.replace(NAME, key).replace(STRING_FLAG, flag))} {value})"
        parts.append(param if key in required else param + "?")
    return " ".join(parts) or '""', rules


def _xml_value(schema: dict[str, Any], close_text: str, p: Pieces) -> tuple[str, list[str]]:
    close = p.expr(close_text)
    if "enum" in schema or "const" in schema:
        values = schema.get("enum", [schema.get("const")])
        return "(" + " | ".join(lit(v if isinstance(v, str) else json.dumps(v)) for v in values) + f") {close}", []
    if schema.get("type") == "string":
        symbol, rule = p.until("string_value_" + close_text.encode().hex(), close_text)  # one rule per close tag
        return symbol, [rule]
    return f"{json_rule(schema)} {close}", []


_XTML = {"string": "string", "integer": "number", "number": "number", "boolean": "boolean", "null": "null",
         "object": "object", "array": "array"}


def _xtml(tool: ToolSpec, params: Params, p: Pieces) -> tuple[str, list[str]]:
    """One element per parameter as ``_xml``; its open tag says the value's type, one alternative per type."""
    props, required = _props(tool)
    parts, rules = [], []
    for key, schema in props.items():
        alts = []
        for xtml, types in _xtml_types(schema).items():
            narrowed = {**schema, "type": types[0] if len(types) == 1 else types}
            if isinstance(schema.get("enum"), list):  # each alternative lists the values of its own type
                narrowed["enum"] = [v for v in schema["enum"] if _json_type(v) in types
                                    or (_json_type(v) == "integer" and "number" in types)]
                if not narrowed["enum"]:
                    continue
            value, extra = _xml_value(narrowed, params.close, p)
            rules += extra
            attr = key.replace("&", "&amp;").replace('"', "&quot;")
            alts.append(f"{p.expr(params.open.replace(NAME, attr).replace(XTML_TYPE, xtml))} {value}")
        param = "(" + " | ".join(alts or ['""']) + ")"
        parts.append(param if key in required else param + "?")
    return " ".join(parts) or '""', rules


def _xtml_types(schema: dict[str, Any]) -> dict[str, list[str]]:
    """XTML type -> the JSON types it writes, for ``schema`` (no type known: a string, as vLLM reads it)."""
    declared = schema.get("type")
    types = [declared] if isinstance(declared, str) else declared if isinstance(declared, list) else []
    if not types and isinstance(schema.get("enum"), list):
        types = [_json_type(v) for v in schema["enum"]]
    out: dict[str, list[str]] = {}
    for t in types:
        if t in _XTML and t not in out.get(_XTML[t], []):
            out.setdefault(_XTML[t], []).append(t)
    return out or {"string": ["string"]}


def _json_type(value: Any) -> str:
    return {bool: "boolean", int: "integer", float: "number", str: "string", list: "array", dict: "object"}.get(
        type(value), "null")


def _python(tool: ToolSpec, i: int) -> tuple[str, list[str]]:
    """``k=v, ...``: rule first_k starts at parameter k (no comma), rest_k continues after one."""
    props, required = _props(tool)
    items = [(f"{lit(key + '=')} {_py_value(schema)}", key in required) for key, schema in props.items()]
    n, rules = len(items), []
    for k, (item, req) in enumerate(items):
        rules.append(f"py{i}_first{k}: {item} py{i}_rest{k + 1}" + ("" if req else f" | py{i}_first{k + 1}"))
        rules.append(f'py{i}_rest{k}: ", " {item} py{i}_rest{k + 1}' + ("" if req else f" | py{i}_rest{k + 1}"))
    rules += [f'py{i}_first{n}: ""', f'py{i}_rest{n}: ""']
    return f"py{i}_first0", rules


def _py_value(schema: dict[str, Any]) -> str:
    if "enum" in schema or "const" in schema:
        return "(" + " | ".join(lit(_py_repr(v)) for v in schema.get("enum", [schema.get("const")])) + ")"
    types = schema.get("type")
    if isinstance(types, list) and all(t in _PY_TYPES for t in types):
        return "(" + " | ".join(_PY_TYPES[t] for t in types) + ")"
    if types in _PY_TYPES:
        return _PY_TYPES[types]
    if types == "array" and isinstance(schema.get("items"), dict):
        item = _py_value(schema["items"])
        return f'("[" ({item} (", " {item})*)? "]")'
    return f"{json_rule(schema)}"


def _py_repr(value: Any) -> str:
    return repr(value) if isinstance(value, (str, int, float, bool)) or value is None else json.dumps(value)

