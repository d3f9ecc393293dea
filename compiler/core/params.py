"""Model params: literals become input symbols with defaults; expressions are inlined.

Params are declarative (order-free): they are resolved in dependency order and a cycle
is an error naming every param on it.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import graphlib

import sympy

from infest.dsl import ast
from infest.dsl.errors import Collector, SpecError, Span, did_you_mean, fail
from infest.compiler.core.exprs import LIMIT, names_in, to_sympy
from infest.compiler.core.symbols import BUILTINS, sym

# A workbook names each input `in_<name>`; Excel's defined names are at most 255 characters.
MAX_NAME_CHARS = 255 - len("in_")


@dataclass(frozen=True)
class Param:
    """A model param: an input (literal default) or derived (an expression of others)."""

    name: str
    expr: sympy.Expr            # the symbol itself for inputs, the inlined form if derived
    default: Fraction | None    # inputs only
    dimension: str | None
    span: Span

    @property
    def is_input(self) -> bool:
        return self.default is not None


def resolve_params(stmts: list[ast.Assign], reserved: set[str]) -> dict[str, Param]:
    """Resolve every param assignment; report all problems together."""
    by_name: dict[str, ast.Assign] = {}
    errors = Collector()
    for stmt in stmts:
        _check_name(stmt, by_name, reserved, errors)
        by_name.setdefault(stmt.target, stmt)
    order = _dependency_order(by_name, errors)
    errors.raise_if_any()
    params: dict[str, Param] = {}
    for name in order:
        try:
            params[name] = _resolve_one(by_name[name], params)
        except SpecError as exc:
            errors.add(exc)
    errors.raise_if_any()
    return params


def _check_name(stmt: ast.Assign, seen: dict, reserved: set[str], errors: Collector) -> None:
    if stmt.target in seen:
        first = seen[stmt.target].target_span
        errors.add(fail(stmt.target_span, f"param '{stmt.target}' is defined twice",
                        f"first defined at {first}"))
    if stmt.target in BUILTINS or stmt.target in reserved:
        errors.add(fail(stmt.target_span, f"'{stmt.target}' is a reserved name",
                        "B, N, T and hardware field names cannot be model params"))
    elif (other := _same_but_case(stmt.target, seen, reserved)) is not None:
        errors.add(fail(stmt.target_span, f"param '{stmt.target}' differs from '{other}' only "
                        "in case", f"workbook names ignore case: in_{stmt.target} and "
                        f"in_{other} would be one name; rename one"))
    if len(stmt.target) > MAX_NAME_CHARS:
        errors.add(fail(stmt.target_span, f"param name of {len(stmt.target)} characters is "
                        f"longer than {MAX_NAME_CHARS} (MAX_NAME_CHARS)",
                        "a workbook names it in_<name>, and Excel allows 255 characters"))


def _same_but_case(name: str, seen: dict, reserved: set[str]) -> str | None:
    """An earlier param, builtin or hardware field equal to `name` ignoring case."""
    for other in list(seen) + list(BUILTINS) + sorted(reserved):
        if other != name and other.lower() == name.lower():
            return other
    return None


def _dependency_order(by_name: dict[str, ast.Assign], errors: Collector) -> list[str]:
    """Params sorted so each comes after those it uses; cycles reported."""
    uses = {name: [r.id for r in names_in(stmt.value) if r.id in by_name]
            for name, stmt in by_name.items()}
    try:  # graphlib, not networkx: this runs on every `infest eval`
        return list(graphlib.TopologicalSorter(uses).static_order())
    except graphlib.CycleError as exc:
        cycle = exc.args[1][:-1]  # [a, b, ..., a] -> [a, b, ...], each using the next
        position = {n: i for i, n in enumerate(by_name)}
        start = min(range(len(cycle)), key=lambda i: position[cycle[i]])
        cycle = cycle[start:] + cycle[:start]  # begin at the first-written param
        chain = " -> ".join(cycle + [cycle[0]])
        errors.add(fail(by_name[cycle[0]].target_span,
                        f"params depend on each other in a cycle: {chain}"))
        return []


def _resolve_one(stmt: ast.Assign, params: dict[str, Param]) -> Param:
    value = stmt.value
    if isinstance(value, ast.Num) or (isinstance(value, ast.Neg) and isinstance(value.operand, ast.Num)):
        number = value if isinstance(value, ast.Num) else value.operand
        if number.value > LIMIT:
            raise fail(number.span, f"absurdly large value {number.text}", "values must stay below 1e30")
        if number is not value or number.value <= 0:
            raise fail(value.span, f"param '{stmt.target}' must be positive",
                       "dimensions, counts and sizes are positive numbers")
        return Param(stmt.target, sym(stmt.target), number.value, number.dimension, stmt.span)
    expr = to_sympy(value, lambda n: _lookup(n, params), lambda e: numeric_default(e, params))
    return Param(stmt.target, expr, None, None, stmt.span)


def _lookup(name: ast.Name, params: dict[str, Param]) -> sympy.Expr:
    if name.id in params:
        return params[name.id].expr
    if name.id in BUILTINS:
        return sym(name.id)
    raise fail(name.span, f"unknown name '{name.id}'", did_you_mean(name.id, params))


def defaults_of(params: dict[str, Param]) -> dict[sympy.Symbol, sympy.Expr]:
    """Input symbol -> default value, for numeric checks at compile time."""
    return {sym(p.name): sympy.Rational(p.default.numerator, p.default.denominator)
            for p in params.values() if p.default is not None}


def numeric_default(expr: sympy.Expr, params: dict[str, Param]) -> sympy.Expr:
    """An expression's value with every param at its default (B, N, T left free)."""
    return expr.xreplace(defaults_of(params))
