"""Python literals -> JSON text (for pythonic calls and Python-style XML values).

Only literals are accepted (strings, numbers, True/False/None, lists, tuples, dicts, sets);
numbers keep the digits the model wrote, so big integers stay exact and floats are not
re-rendered.  Anything else (names, calls, operators) is rejected with ``None``.
"""

from __future__ import annotations

import ast
import json
import warnings

_JSON_NUMBER_OK = frozenset("0123456789.eE+-")


class NotALiteral(ValueError):
    """The text is not a Python literal that maps to JSON."""


def literal_to_json(text: str) -> str | None:
    """JSON text for the Python literal ``text``, or None if it is not one."""
    try:
        with warnings.catch_warnings():  # "1and 2": not a literal, and no warning on the worker's stderr
            warnings.simplefilter("error", SyntaxWarning)
            tree = ast.parse(text.strip(), mode="eval")
        return _node(tree.body, text.strip())
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _node(node: ast.AST, src: str) -> str:
    if isinstance(node, ast.Constant):
        return _constant(node, src)
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return "[" + ", ".join(_node(e, src) for e in node.elts) + "]"
    if isinstance(node, ast.Dict):
        return _dict(node, src)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        inner = _node(node.operand, src)
        if not inner[:1].isdigit():
            raise NotALiteral("sign on a non-number")
        return "-" + inner if isinstance(node.op, ast.USub) else inner
    raise NotALiteral(type(node).__name__)


def _constant(node: ast.Constant, src: str) -> str:
    v = node.value
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return _float(node, v, src)
    raise NotALiteral(type(v).__name__)


def _float(node: ast.Constant, v: float, src: str) -> str:
    seg = ast.get_source_segment(src, node) or ""
    seg = seg.replace("_", "")
    if seg and set(seg) <= _JSON_NUMBER_OK and seg[0].isdigit() and seg[-1].isdigit() and ".e" not in seg.lower():
        try:
            json.loads(seg)
            return seg
        except ValueError:
            pass
    if v != v or v in (float("inf"), float("-inf")):
        raise NotALiteral("non-finite float")
    return repr(v)


def _dict(node: ast.Dict, src: str) -> str:
    items = []
    for k, v in zip(node.keys, node.values):
        if k is None:
            raise NotALiteral("dict unpacking")
        key = _node(k, src)
        if not key.startswith('"'):
            key = json.dumps(key, ensure_ascii=False)
        items.append(f"{key}: {_node(v, src)}")
    return "{" + ", ".join(items) + "}"
