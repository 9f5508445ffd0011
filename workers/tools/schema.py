"""JSON Schema for a Python function's parameters, from its type hints and docstring.

Supported annotations: ``str``, ``int``, ``float``, ``bool``, ``dict``/``dict[str, X]``,
``list[X]``/``tuple[X, ...]``, ``Literal[...]``, ``X | None`` /
``Optional[X]``, ``Any``, and ``Annotated[X, "description"]`` or
``Annotated[X, {"minimum": 1}]`` (extra schema keywords).  Anything else raises
``TypeError`` when the tool is declared, never when it is called.

Descriptions come from a Google-style docstring: the text before the first section is the
tool's description, and ``Args:`` lines (``name: text`` or ``name (type): text``, with
indented continuation lines) describe the parameters.
"""

from __future__ import annotations

import inspect
import json
import re
import types
import typing
from typing import Any, Callable

_SCALARS: dict[type, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}
_SECTIONS = {"args", "arguments", "parameters", "params", "returns", "return", "raises",
             "yields", "examples", "example", "notes", "note"}
_ARG_LINE = re.compile(r"^(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


def function_schema(fn: Callable[..., Any]) -> tuple[str, dict[str, Any]]:
    """Return ``(description, parameters_schema)`` for ``fn``."""
    summary, arg_docs = parse_docstring(inspect.getdoc(fn) or "")
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except NameError as e:
        raise TypeError(f"tool {fn.__name__}: cannot resolve its type hints ({e})") from None
    properties: dict[str, Any] = {}
    required: list[str] = []
    for param in inspect.signature(fn).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
            raise TypeError(f"tool {fn.__name__}: parameter {param.name!r} must be a plain keyword parameter")
        if param.name not in hints:
            raise TypeError(f"tool {fn.__name__}: parameter {param.name!r} has no type annotation")
        try:
            prop = annotation_schema(hints[param.name])
        except TypeError as e:
            raise TypeError(f"tool {fn.__name__}: parameter {param.name!r}: {e}") from None
        if param.name in arg_docs and "description" not in prop:
            prop["description"] = arg_docs[param.name]
        if param.default is inspect.Parameter.empty:
            required.append(param.name)
        elif _is_json_value(param.default):
            prop["default"] = json.loads(json.dumps(param.default))  # tuples become lists
        properties[param.name] = prop
    schema: dict[str, Any] = {"type": "object", "properties": properties, "required": required,
                              "additionalProperties": False}
    return summary, schema


def annotation_schema(tp: Any) -> dict[str, Any]:
    """JSON Schema of one type annotation."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Annotated:  # first: its metadata may be unhashable
        return _annotated_schema(args[0], args[1:])
    if tp is Any:
        return {}
    if isinstance(tp, type) and tp in _SCALARS:
        return {"type": _SCALARS[tp]}
    if origin is typing.Literal:
        return _enum_schema(list(args))
    if origin in (typing.Union, types.UnionType):
        return _union_schema(args)
    if tp in (list, tuple) or origin in (list, tuple):
        return _array_schema(origin or tp, args)
    if tp is dict or origin is dict:
        return _object_schema(args)
    raise TypeError(f"unsupported type annotation {tp!r}")


def parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Split a cleaned docstring into its one-paragraph summary and ``{arg: description}``."""
    summary: list[str] = []
    args: dict[str, str] = {}
    section: str | None = None
    current: str | None = None
    for line in doc.splitlines():
        stripped = line.strip()
        header = stripped.rstrip(":").lower()
        if stripped.endswith(":") and header in _SECTIONS and not line.startswith((" ", "\t")):
            section, current = header, None
        elif section is None:
            summary.append(stripped)
        elif section in ("args", "arguments", "parameters", "params") and stripped:
            current = _add_arg_line(args, current, stripped)
    return " ".join(" ".join(summary).split()), args


def _add_arg_line(args: dict[str, str], current: str | None, line: str) -> str | None:
    """Record an ``Args:`` line: a new ``name: text`` entry, or a continuation of ``current``."""
    match = _ARG_LINE.match(line)
    if match:
        name = match.group(1).lstrip("*")
        args[name] = match.group(2).strip()
        return name
    if current is not None:
        args[current] = f"{args[current]} {line}".strip()
    return current


def _annotated_schema(base: Any, metadata: tuple[Any, ...]) -> dict[str, Any]:
    schema = annotation_schema(base)
    for item in metadata:
        if isinstance(item, str):
            schema["description"] = item
        elif isinstance(item, dict):
            schema.update(item)
    return schema


def _enum_schema(values: list[Any]) -> dict[str, Any]:
    kinds = {_SCALARS.get(type(v)) for v in values}
    if None in kinds:
        raise TypeError(f"enum values must be str, int, float or bool, got {values!r}")
    schema: dict[str, Any] = {"enum": values}
    if len(kinds) == 1:
        schema = {"type": kinds.pop(), "enum": values}
    return schema


def _union_schema(args: tuple[Any, ...]) -> dict[str, Any]:
    members = [a for a in args if a is not type(None)]
    nullable = len(members) < len(args)
    if len(members) == 1:
        schema = annotation_schema(members[0])
    else:
        schema = {"anyOf": [annotation_schema(a) for a in members]}
    if nullable:
        schema = _add_null(schema)
    return schema


def _add_null(schema: dict[str, Any]) -> dict[str, Any]:
    if isinstance(schema.get("type"), str):
        schema = {**schema, "type": [schema["type"], "null"]}
        if "enum" in schema:
            schema["enum"] = [*schema["enum"], None]
        return schema
    if "anyOf" in schema:
        return {**schema, "anyOf": [*schema["anyOf"], {"type": "null"}]}
    return {"anyOf": [schema, {"type": "null"}]}


def _array_schema(container: Any, args: tuple[Any, ...]) -> dict[str, Any]:
    if container is tuple and args and (len(args) != 2 or args[1] is not Ellipsis):
        raise TypeError("only homogeneous tuples (tuple[X, ...]) are supported")
    schema: dict[str, Any] = {"type": "array"}
    if args:
        schema["items"] = annotation_schema(args[0])
    return schema


def _object_schema(args: tuple[Any, ...]) -> dict[str, Any]:
    if args and args[0] is not str:
        raise TypeError("dict keys must be str (JSON object keys are strings)")
    schema: dict[str, Any] = {"type": "object"}
    if args and args[1] is not Any:
        schema["additionalProperties"] = annotation_schema(args[1])
    return schema


def _is_json_value(value: Any) -> bool:
    if value is None or isinstance(value, (str, int, float, bool)):
        return True
    if isinstance(value, (list, tuple)):
        return all(_is_json_value(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_json_value(v) for k, v in value.items())
    return False
