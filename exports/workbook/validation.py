"""Data validation that matches the CLI's checks: each input cell refuses what `infest
eval` refuses.

The compiled model records every condition its inputs must meet as a Constraint
(compiler/core/constraints.py: whole, positive, nonnegative, le, divides), the same list
`eval` re-checks at the inputs it is given: N + T within the trained context, tp divides
the heads and columns it splits, ep divides the experts and tp x dp, dp divides B, pp at
most the layers, top_k at most the experts. Each constraint whose inputs are all plain
cells (no unit scaling) is written as an Excel condition over the inputs' names and
attached to every input it mentions; a cell's rule is the AND of its own kind check (a
whole number, positive, 0 or more) and those conditions, with an error message that says
each rule. Excel caps a validation formula and its message at 255 characters: the
conditions that do not fit are left out (the CLI still refuses them), in the order the
model records them. Value ceilings (2^53) are left to the CLI: no one types them.
"""
from __future__ import annotations

from typing import Callable, Iterable, Mapping, Sequence

import sympy
from openpyxl.worksheet.datavalidation import DataValidation

from infest.compiler.core.constraints import Constraint
from infest.exports.workbook.excel_printer import excel_formula

RULE_CHARS = 255      # Excel's limit on a validation formula (and on its error message)
_VALUE_CEILING = 2 ** 53

# A cell's own kind check: (condition on the cell's name, its words).
KIND_RULES: dict[str, tuple[Callable[[str], str], str]] = {
    "whole": (lambda n: f"{n}=INT({n})", "a whole number, 1 or more"),
    "positive": (lambda n: f"{n}>0", "a positive number"),
    "zero_ok": (lambda n: f"{n}>=0", "0 or more"),
    "two_or_more": (lambda n: f"{n}=INT({n})", "a whole number, 2 or more"),
}
_KIND_FLOOR = {"whole": ">0", "two_or_more": ">=2"}


def condition(c: Constraint, names: Mapping[sympy.Symbol, str]) -> str | None:
    """An Excel condition for one constraint over `names`, or None where it uses a
    symbol that is not a plain cell or is a value ceiling."""
    sides = [e for e in (c.lhs, c.rhs) if e is not None]
    if any(s not in names for e in sides for s in e.free_symbols):
        return None
    if c.kind == "le" and c.rhs.is_number and c.rhs >= _VALUE_CEILING:
        return None
    lhs = excel_formula(c.lhs, names)
    rhs = excel_formula(c.rhs, names) if c.rhs is not None else ""
    return {"whole": f"{lhs}=INT({lhs})", "positive": f"{lhs}>0", "nonnegative": f"{lhs}>=0",
            "le": f"{lhs}<={rhs}", "divides": f"MOD({rhs},{lhs})=0"}[c.kind]


_SIGN_WORDS = {"whole": "a whole number", "positive": "positive", "nonnegative": "0 or more"}


def _words(c: Constraint) -> str:
    """The rule in words: `le` and `divides` say it themselves ("tp divides the heads of
    'a'"); a sign rule names its quantity ("dimension heads*head_dim: positive")."""
    if c.kind in _SIGN_WORDS and "divide" not in c.what:
        return f"{c.what} {c.lhs}: {_SIGN_WORDS[c.kind]}"
    return c.what


def rules_by_cell(constraints: Iterable[Constraint], names: Mapping[sympy.Symbol, str]
                  ) -> dict[str, list[tuple[str, str]]]:
    """Cell name -> [(condition, what)] of every constraint that mentions its input,
    each distinct condition once per cell, in the model's order."""
    out: dict[str, list[tuple[str, str]]] = {}
    for c in constraints:
        text = condition(c, names)
        if text is None:
            continue
        used = {s for e in (c.lhs, c.rhs) if e is not None for s in e.free_symbols}
        for symbol in sorted(used, key=str):
            rules = out.setdefault(names[symbol], [])
            if all(text != t for t, _ in rules):
                rules.append((text, _words(c)))
    return out


def cell_rule(name: str, kind: str, extra: Sequence[tuple[str, str]]) -> DataValidation:
    """A custom validation for the cell named `name`: its kind check AND the conditions
    of `extra` that fit in RULE_CHARS, the error message saying each rule kept."""
    check, words = KIND_RULES[kind]
    parts = [check(name)] + ([f"{name}{_KIND_FLOOR[kind]}"] if kind in _KIND_FLOOR else [])
    said = [words]
    for text, what in extra:
        if text in parts:   # the cell's own kind check says it already
            continue
        longer = f"AND({','.join(parts + [text])})"
        if len(longer) > RULE_CHARS or len("; ".join(said + [what])) > RULE_CHARS:
            continue
        parts.append(text)
        said.append(what)
    rule = DataValidation(type="custom", formula1=f"AND({','.join(parts)})",
                          error="; ".join(said), allow_blank=False)
    rule.showErrorMessage, rule.errorTitle = True, "infest input"
    return rule
