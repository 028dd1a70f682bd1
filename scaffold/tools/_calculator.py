"""A calculator tool: arithmetic and ``math`` functions on a parsed expression, never ``eval``.

The expression is parsed with :mod:`ast` and only numbers, the arithmetic operators, parentheses
and a fixed list of functions and constants are evaluated; anything else (names, attributes,
calls of other functions, comprehensions) is refused with a message saying what. Integers stay
exact; results and intermediate values are bounded (digits, exponent, factorial argument) so an
expression cannot exhaust the machine.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from typing import Any

from scaffold._tools import Tool, tool

__all__ = ["calculator", "evaluate"]

MAX_DIGITS = 1000
"""Largest integer result, in decimal digits."""

_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_FUNCTIONS: dict[str, Callable[..., Any]] = {
    name: getattr(math, name) for name in (
        "sqrt", "exp", "log", "log2", "log10", "sin", "cos", "tan", "asin", "acos", "atan", "atan2", "sinh", "cosh",
        "tanh", "floor", "ceil", "gcd", "lcm", "comb", "perm", "factorial", "isqrt", "degrees", "radians", "hypot",
    )
} | {"abs": abs, "round": round, "min": min, "max": max}
_CONSTANTS = {"pi": math.pi, "e": math.e, "tau": math.tau, "inf": math.inf}


class CalculatorError(ValueError):
    """An expression the calculator does not evaluate (it says which part)."""


def evaluate(expression: str) -> int | float:
    """The value of an arithmetic ``expression``.

    Examples:
        >>> evaluate("2 ** 10 + sqrt(16) * 3")
        1036.0
        >>> evaluate("factorial(20) // 3")
        810967336058880000
        >>> try:
        ...     evaluate("__import__('os')")
        ... except CalculatorError as exc:
        ...     print(exc)
        unknown function '__import__'; known: abs, acos, asin, ...
    """
    if len(expression) > 10_000:
        raise CalculatorError("the expression is longer than 10,000 characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as exc:
        raise CalculatorError(f"not an arithmetic expression: {exc.msg}") from None
    return _value(tree.body)


def _value(node: ast.AST) -> Any:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.Name):
        if node.id in _CONSTANTS:
            return _CONSTANTS[node.id]
        raise CalculatorError(f"unknown name {node.id!r}; known constants: {', '.join(sorted(_CONSTANTS))}")
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_value(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _value(node.left), _value(node.right)
        if isinstance(node.op, ast.Pow):
            _check_power(left, right)
        return _bounded(_BINARY[type(node.op)](left, right))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
        function = _FUNCTIONS.get(node.func.id)
        if function is None:
            known = ", ".join(sorted(_FUNCTIONS)[:3])
            raise CalculatorError(f"unknown function {node.func.id!r}; known: {known}, ...")
        args = [_value(arg) for arg in node.args]
        if node.func.id in ("factorial", "comb", "perm") and any(abs(a) > 5000 for a in args if isinstance(a, int)):
            raise CalculatorError(f"{node.func.id}() of a number above 5000 is too large")
        return _bounded(function(*args))
    raise CalculatorError(f"{type(node).__name__} is not arithmetic: {ast.unparse(node)[:60]!r}")


def _check_power(base: Any, exponent: Any) -> None:
    if isinstance(base, int) and isinstance(exponent, int) and exponent > 0 and abs(base) > 1:
        if exponent * math.log10(abs(base)) > MAX_DIGITS:
            raise CalculatorError(f"the result has more than {MAX_DIGITS} digits")


def _bounded(value: Any) -> Any:
    if isinstance(value, int) and value.bit_length() > MAX_DIGITS * 3.33:
        raise CalculatorError(f"the result has more than {MAX_DIGITS} digits")
    return value


def _calculate(expression: str) -> str:
    """Evaluate an arithmetic expression exactly where it can (integers stay integers).

    Supports + - * / // % ** and parentheses, the constants pi, e, tau, and the functions sqrt, exp, log,
    log2, log10, sin, cos, tan, asin, acos, atan, atan2, sinh, cosh, tanh, floor, ceil, gcd, lcm, comb, perm,
    factorial, isqrt, degrees, radians, hypot, abs, round, min and max.

    Args:
        expression: The expression, in Python's syntax, for example "sqrt(2) * (3 + 4) ** 2".
    """
    try:
        return repr(evaluate(expression))
    except CalculatorError:
        raise
    except (ArithmeticError, ValueError, TypeError) as exc:
        raise CalculatorError(f"{type(exc).__name__}: {exc}") from None


calculator: Tool = tool(_calculate, name="calculator", blocking=False, timeout=5.0)
"""The calculator as a tool (``calculator(expression)``); an expression it refuses is the tool's error.

Examples:
    >>> import asyncio
    >>> asyncio.run(calculator.call('{"expression": "(2 + 3) * 7"}')).text
    '35'
"""
