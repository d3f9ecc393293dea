"""A Max and a Min that stay cheap: sympy's own prove orderings between their arguments
on every construction and rebuild (xreplace), which costs ~10 ms a call on symbolic
arguments and seconds on a model's time form.

`Max` and `Min` here keep their arguments as given unless they are all numbers. They
subclass sympy's and keep the names, so every printer's `_print_Max`/`_print_Min`
handles them.
"""
from __future__ import annotations

import sympy


def _lazy(cls: type, evaluated: type, args: tuple) -> sympy.Expr:
    """Evaluated (sympy's own class) when every argument is a number, else left as given."""
    args = tuple(sympy.Integer(a) if isinstance(a, int) else a for a in args)
    if all(a.is_number for a in args):
        return evaluated(*args)
    return evaluated.__new__(cls, *args, evaluate=False)


class Max(sympy.Max):  # type: ignore[misc]
    """max(a, b, ...) left unevaluated unless every argument is a number."""

    def __new__(cls, *args: sympy.Expr, **options: object) -> sympy.Expr:
        return _lazy(cls, sympy.Max, args)


class Min(sympy.Min):  # type: ignore[misc]
    """min(a, b, ...) left unevaluated unless every argument is a number."""

    def __new__(cls, *args: sympy.Expr, **options: object) -> sympy.Expr:
        return _lazy(cls, sympy.Min, args)


def floor(x: sympy.Expr) -> sympy.Expr:
    """floor(x), evaluated only when x is a number: sympy's own floor of a symbolic
    capacity form tries to prove integrality first (~10 ms a call)."""
    return sympy.floor(x) if x.is_number else sympy.floor(x, evaluate=False)
