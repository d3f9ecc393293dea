"""AST expressions -> sympy, by the DSL's own rules: no text is ever parsed by sympy.

Names resolve through a lookup function the caller supplies (params, B/N/T, hardware
fields); `min`, `max`, `ceil`, `floor`, `sqrt`, `log2` are the only functions.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Callable

import sympy

from infest.dsl import ast
from infest.dsl.errors import did_you_mean, fail

MATH_FUNCS: dict[str, Callable[..., sympy.Expr]] = {
    "min": sympy.Min, "max": sympy.Max, "ceil": sympy.ceiling, "floor": sympy.floor,
    "sqrt": sympy.sqrt, "log2": lambda x: sympy.log(x, 2),
}
_ARITY = {"ceil": 1, "floor": 1, "sqrt": 1, "log2": 1}
# Anything bigger is a typo or an attack on the evaluator, not a model dimension.
LIMIT = sympy.Integer(10) ** 30
_MAX_EXPONENT = 64
# Exact arithmetic has no size limit of its own: a tower of powers of 1.0001 stays below
# LIMIT while its numerator grows 64-fold per level. Both limits are checked before the
# number or expression is built.
MAX_DIGITS = 1000          # digits of an exact value's numerator or denominator
MAX_EXPR_NODES = 256       # nodes of one expression tree: ample for a line of a spec
_DIGITS_PER_BIT = 0.30103  # log10(2)

Lookup = Callable[[ast.Name], sympy.Expr]
Numeric = Callable[[sympy.Expr], sympy.Expr]


def to_sympy(node: ast.Expr, lookup: Lookup, numeric: Numeric) -> sympy.Expr:
    """Build the sympy expression of an AST expression, checking each step."""
    if isinstance(node, ast.Num):
        return _literal(node)
    if isinstance(node, ast.Name):
        return lookup(node)
    if isinstance(node, ast.Neg):
        return -to_sympy(node.operand, lookup, numeric)
    if isinstance(node, ast.BinOp):
        left = to_sympy(node.left, lookup, numeric)
        right = to_sympy(node.right, lookup, numeric)
        return _binop(node, left, right, numeric)
    if isinstance(node, ast.Call):
        return _call(node, lookup, numeric)
    raise fail(getattr(node, "span", None), "not a number")


def _literal(node: ast.Num) -> sympy.Expr:
    if abs(node.value) > LIMIT:
        raise fail(node.span, f"absurdly large value {node.text}", "values must stay below 1e30")
    return sympy.Rational(node.value.numerator, node.value.denominator)


def _binop(node: ast.BinOp, left: sympy.Expr, right: sympy.Expr, numeric: Numeric) -> sympy.Expr:
    """Apply + - * / % ^ with checks for division by zero and runaway powers."""
    if node.op in "/%" and numeric(right) == 0:
        raise fail(node.right.span, "division by zero", "the divisor evaluates to 0")
    _check_size(node, left, right)
    if node.op == "^":
        exponent = numeric(right)
        if exponent.is_number and abs(exponent) > _MAX_EXPONENT:
            raise fail(node.right.span, f"absurdly large exponent {exponent}",
                       f"exponents are limited to {_MAX_EXPONENT}")
        _check_symbolic_exponent(node, right)
        _check_power_digits(node, numeric(left), exponent)
    result = {"+": lambda: left + right, "-": lambda: left - right,
              "*": lambda: left * right, "/": lambda: left / right,
              "%": lambda: sympy.Mod(left, right), "^": lambda: left ** right}[node.op]()
    _check_power(node, result)
    _check_finite(node, result, numeric)
    return result


@lru_cache(maxsize=65536)
def tree_size(expr: sympy.Basic) -> int:
    """Nodes of an expression counted as a tree (shared subtrees counted each time),
    memoised so that sizing a freshly built expression only visits its new top."""
    return 1 + sum(tree_size(a) for a in expr.args)


def _check_size(node: ast.Expr, *operands: sympy.Expr) -> None:
    """Refuse to build an expression bigger than MAX_EXPR_NODES."""
    if 1 + sum(tree_size(e) for e in operands) > MAX_EXPR_NODES:
        raise fail(node.span, f"expression too large (more than {MAX_EXPR_NODES:,} nodes, "
                   "MAX_EXPR_NODES)", "params that use each other twice per step double in size")


def _digits(value: sympy.Rational) -> float:
    return max(int(value.p).bit_length(), int(value.q).bit_length()) * _DIGITS_PER_BIT


def _check_power_digits(node: ast.BinOp, base: sympy.Expr, exponent: sympy.Expr) -> None:
    """Refuse base^exponent whose exact value would pass MAX_DIGITS, before computing it."""
    if base.is_Rational and exponent.is_number and _digits(base) * abs(exponent) > MAX_DIGITS:
        raise fail(node.span, f"exact value too large (more than {MAX_DIGITS} digits, "
                   "MAX_DIGITS)", "a power of a fraction grows its numerator and denominator")


def _check_symbolic_exponent(node: ast.BinOp, exponent: sympy.Expr) -> None:
    """2^(B + 10^29): an exponent with inputs in it is bounded by its numbers too (each
    constant and coefficient), or its value at the defaults would be computed exactly."""
    big = [a for a in exponent.atoms(sympy.Number) if abs(a) > _MAX_EXPONENT]
    if big:
        raise fail(node.right.span, f"absurdly large number {big[0]} in an exponent",
                   f"exponents (and each number in them) are limited to {_MAX_EXPONENT}")


def _check_power(node: ast.BinOp, result: sympy.Expr) -> None:
    """(x^64)^64 folds into x^4096: the folded exponent is limited like a written one."""
    exponent = result.exp if isinstance(result, sympy.Pow) else None
    if exponent is not None and exponent.is_number and abs(exponent) > _MAX_EXPONENT:
        raise fail(node.span, f"absurdly large exponent {exponent} (powers of powers multiply)",
                   f"exponents are limited to {_MAX_EXPONENT}")


def _check_finite(node: ast.Expr, value: sympy.Expr, numeric: Numeric) -> None:
    """Reject results that are infinite, undefined, complex or absurdly large."""
    num = numeric(value)
    if not num.is_number:
        return
    if num.has(sympy.zoo, sympy.oo, -sympy.oo, sympy.nan) or not num.is_finite:
        raise fail(node.span, "the value is not finite", "check for a division by zero")
    if num.is_real is False:
        raise fail(node.span, "the value is not a real number")
    if num.is_Rational and _digits(num) > MAX_DIGITS:
        raise fail(node.span, f"exact value too large (more than {MAX_DIGITS} digits, "
                   "MAX_DIGITS)", "repeated products of fractions grow without bound")
    if abs(num) > LIMIT:
        raise fail(node.span, f"absurdly large value ({float(num):.3g})",
                   "values must stay below 1e30")


def _call(node: ast.Call, lookup: Lookup, numeric: Numeric) -> sympy.Expr:
    func = MATH_FUNCS.get(node.func)
    if func is None:
        hint = did_you_mean(node.func, MATH_FUNCS) or f"functions: {', '.join(MATH_FUNCS)}"
        raise fail(node.func_span, f"'{node.func}' is not a function usable in a number", hint)
    if any(not isinstance(a, ast.PosArg) for a in node.args) or not node.args:
        raise fail(node.span, f"{node.func}() takes plain positional arguments")
    if node.func in _ARITY and len(node.args) != _ARITY[node.func]:
        raise fail(node.span, f"{node.func}() takes {_ARITY[node.func]} argument")
    values = [to_sympy(a.value, lookup, numeric) for a in node.args]  # type: ignore[union-attr]
    _check_size(node, *values)
    result = func(*values)
    _check_finite(node, result, numeric)
    return result


def contains_op_call(node: ast.Expr) -> bool:
    """True if the expression calls anything other than a math function (i.e. an op)."""
    if isinstance(node, ast.Call):
        if node.func not in MATH_FUNCS:
            return True
        return any(contains_op_call(_arg_value(a)) for a in node.args)
    if isinstance(node, ast.BinOp):
        return contains_op_call(node.left) or contains_op_call(node.right)
    if isinstance(node, ast.Neg):
        return contains_op_call(node.operand)
    return False


def _arg_value(arg: ast.Arg) -> ast.Expr:
    return arg.d_in if isinstance(arg, ast.DimsArg) else arg.value


def names_in(node: ast.Expr) -> list[ast.Name]:
    """Every Name referenced in an expression, in order."""
    if isinstance(node, ast.Name):
        return [node]
    if isinstance(node, ast.BinOp):
        return names_in(node.left) + names_in(node.right)
    if isinstance(node, ast.Neg):
        return names_in(node.operand)
    if isinstance(node, ast.Call):
        out: list[ast.Name] = []
        for a in node.args:
            parts = [a.d_in, a.d_out] if isinstance(a, ast.DimsArg) else [a.value]
            for p in parts:
                out += names_in(p)
        return out
    return []

