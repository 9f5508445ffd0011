"""A safe arithmetic evaluator: an AST walker over a tiny whitelist, never ``eval``.

Allowed: int and float literals, ``+ - * / // % **``, unary ``+ -``, parentheses, the
constants in ``CONSTANTS`` and calls of the functions in ``FUNCTIONS``.  Anything else (names,
attributes, subscripts, strings, comprehensions, lambdas, keyword arguments) is rejected.
Size limits keep every evaluation cheap: the expression length, integer sizes (checked before
a power is computed) and float overflow.
"""

from __future__ import annotations

import ast
import math
import operator
import warnings
from typing import Callable

from workers.tools.registry import ToolError

MAX_EXPRESSION_CHARS = 500
MAX_INT_BITS = 4096
MAX_FACTORIAL = 500

Number = int | float

CONSTANTS: dict[str, float] = {"pi": math.pi, "e": math.e, "tau": math.tau}
FUNCTIONS: dict[str, Callable[..., Number]] = {
    "abs": abs, "round": round, "min": min, "max": max,
    "sqrt": math.sqrt, "exp": math.exp, "log": math.log, "log2": math.log2, "log10": math.log10,
    "sin": math.sin, "cos": math.cos, "tan": math.tan, "asin": math.asin, "acos": math.acos,
    "atan": math.atan, "atan2": math.atan2, "hypot": math.hypot, "degrees": math.degrees,
    "radians": math.radians, "floor": math.floor, "ceil": math.ceil, "gcd": math.gcd,
    "factorial": lambda n: math.factorial(_factorial_arg(n)),
}
_BINARY: dict[type[ast.operator], Callable[[Number, Number], Number]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Number], Number]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}


def evaluate(expression: str) -> Number:
    """The value of an arithmetic ``expression``; ``ToolError`` explains any rejection."""
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise ToolError(f"expression too long ({len(expression)} > {MAX_EXPRESSION_CHARS} characters)")
    try:
        with warnings.catch_warnings():  # "2or 3": a SyntaxError here, not a warning on the worker's stderr
            warnings.simplefilter("error", SyntaxWarning)
            tree = ast.parse(expression.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        raise ToolError(f"cannot parse {expression!r}: {getattr(e, 'msg', e)}") from None
    try:
        return _check(_eval(tree.body))
    except ZeroDivisionError:
        raise ToolError("division by zero") from None
    except OverflowError:
        raise ToolError("result too large") from None
    except (ValueError, TypeError) as e:
        raise ToolError(f"math error: {e}") from None


def format_number(value: Number) -> str:
    """A number as the model should read it: ints exact, floats to 12 significant digits."""
    if isinstance(value, int):
        return str(value)
    return f"{value:.12g}"


def _eval(node: ast.expr) -> Number:
    match node:
        case ast.Constant(value=bool()) | ast.Constant(value=complex()):
            raise ToolError(f"unsupported literal {node.value!r}")
        case ast.Constant(value=int() | float() as value):
            return value
        case ast.BinOp(left=left, op=op, right=right) if type(op) in _BINARY:
            return _binary(op, _eval(left), _eval(right))
        case ast.UnaryOp(op=op, operand=operand) if type(op) in _UNARY:
            return _check(_UNARY[type(op)](_eval(operand)))
        case ast.Name(id=name) if name in CONSTANTS:
            return CONSTANTS[name]
        case ast.Call(func=ast.Name(id=name), args=args, keywords=[]) if name in FUNCTIONS:
            return _check(FUNCTIONS[name](*[_eval(a) for a in args]))
    raise ToolError(f"unsupported syntax: {_describe(node)}")


def _binary(op: ast.operator, left: Number, right: Number) -> Number:
    if isinstance(op, ast.Pow):
        _check_power(left, right)
    return _check(_BINARY[type(op)](left, right))


def _check_power(base: Number, exponent: Number) -> None:
    """Refuse an integer power whose result would exceed ``MAX_INT_BITS``, before computing it."""
    if isinstance(base, int) and isinstance(exponent, int) and abs(base) > 1 and exponent > 0:
        if exponent * math.log2(abs(base)) > MAX_INT_BITS:
            raise ToolError(f"result too large: {base} ** {exponent} exceeds {MAX_INT_BITS} bits")


def _check(value: Number) -> Number:
    if isinstance(value, complex):
        raise ToolError("the result is a complex number")
    if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
        raise ToolError(f"result too large (more than {MAX_INT_BITS} bits)")
    if isinstance(value, float) and math.isnan(value):
        raise ToolError("the result is not a number (NaN)")
    return value


def _factorial_arg(n: Number) -> int:
    if isinstance(n, float) and n.is_integer():
        n = int(n)
    if not isinstance(n, int) or n < 0 or n > MAX_FACTORIAL:
        raise ToolError(f"factorial needs an integer between 0 and {MAX_FACTORIAL}, got {n!r}")
    return n


def _describe(node: ast.expr) -> str:
    match node:
        case ast.Name(id=name):
            return f"unknown name {name!r}; allowed constants: {', '.join(CONSTANTS)}; " \
                   f"functions: {', '.join(FUNCTIONS)}"
        case ast.Attribute(attr=attr) | ast.Call(func=ast.Attribute(attr=attr)):
            return f"attribute access '.{attr}' is not allowed"
        case ast.Call(func=ast.Name(id=name)) if name not in FUNCTIONS:
            return f"unknown function {name!r}; allowed: {', '.join(FUNCTIONS)}"
        case ast.Call():
            return "only calls of the allowed functions by name, without keyword arguments"
        case ast.Constant(value=value):
            return f"literal {value!r} is not a number"
    return type(node).__name__
