"""A Max that stays cheap: sympy's own Max proves orderings between its arguments on
every rebuild (xreplace, lambdify), which costs seconds on a model's time form.

`Max` here keeps its arguments as given unless they are all numbers. It subclasses
sympy.Max and keeps the name, so every printer's `_print_Max` handles it.
"""
from __future__ import annotations

import sympy


class Max(sympy.Max):  # type: ignore[misc]
    """max(a, b, ...) left unevaluated unless every argument is a number."""

    def __new__(cls, *args: sympy.Expr, **options: object) -> sympy.Expr:
        args = tuple(sympy.Integer(a) if isinstance(a, int) else a for a in args)
        if all(a.is_number for a in args):
            return sympy.Max(*args)
        return super().__new__(cls, *args, evaluate=False)
