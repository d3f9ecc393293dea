"""Print sympy expressions as Excel formulas.

The printer follows the shape of sympy's own code printers: one ``_print_<Class>``
method per node class, a table of known functions, and precedence-aware
parenthesising.  It differs from them in the rules it must respect, which are
Excel's and not Python's:

* unary minus binds tighter than ``^`` (``-2^2`` is 4), so a power is never
  printed right after a unary minus: ``-x**2`` prints as ``-(x^2)``;
* ``^`` is left-associative (``2^3^2`` is 64), so a power used as a base or as
  an exponent is always parenthesised: ``2**(3**x)`` prints as ``2^(3^x)``;
* MAX/MIN/AND/OR take at most 255 arguments (longer lists nest);
* floor and ceiling use INT, which every engine knows (no ``_xlfn.`` prefix);
* a formula has at most 8,192 characters and 64 nesting levels.

Piecewise becomes nested IF(); when no piece has a True condition the final
else is NA(), Excel's #N/A for sympy's undefined value.  Sums and products
print in sympy's canonical argument order (deterministic, and cheap for sums
of thousands of terms).

Every printed node records the precedence of its outermost operator (see
``_Fragment``) so that parenthesising depends on what was actually printed.
Anything without an exact Excel counterpart raises ``ExcelPrintError``: the
printer never returns a formula that would compute something else.

Integer policy: integers with ``|n| <= 2**53`` print exactly; larger ones print
as the nearest double (the value every spreadsheet engine would store anyway),
with 17 significant digits in E form, e.g. ``9.0071992547409920E+15`` for
``2**53 + 1``.
Integers beyond the double range raise ``ExcelPrintError``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

import sympy
from sympy.core.function import AppliedUndef
from sympy.printing.str import StrPrinter

__all__ = [
    "ExcelPrintError",
    "ExcelPrinter",
    "MAX_FORMULA_CHARS",
    "MAX_NESTING",
    "excel_formula",
    "excel_formula_split",
    "nesting_depth",
]

# Excel's hard limits on one formula.
MAX_FORMULA_CHARS = 8192
MAX_NESTING = 64
# What excel_formula_split aims for: a margin below the hard limits.
SPLIT_CHARS = 8000
SPLIT_NESTING = 60
# Excel functions accept at most 255 arguments.
MAX_ARGS = 255
# Integers up to 2**53 are exact doubles.
EXACT_INT_LIMIT = 2**53

# Precedence of what a fragment's outermost operator is, highest binds tightest.
# Excel: reference/call > unary minus > ^ > * / > + - > comparisons.
PREC_ATOM = 100
PREC_NEG = 90
PREC_POW = 80
PREC_MUL = 70
PREC_ADD = 60
PREC_CMP = 50

# sympy function class name -> Excel function with the same meaning.  (MOD is
# computed as n-d*INT(n/d) by spreadsheets: Excel gives #NUM! once n/d reaches
# 2**27 and LibreOffice loses digits, so keep Mod's quotients moderate.)
_FUNCTIONS = {
    "exp": "EXP",
    "Abs": "ABS",
    "sign": "SIGN",
    "Mod": "MOD",
    "sin": "SIN",
    "cos": "COS",
    "tan": "TAN",
    "asin": "ASIN",
    "acos": "ACOS",
    "atan": "ATAN",
    "sinh": "SINH",
    "cosh": "COSH",
    "tanh": "TANH",
}

_RELATIONS = {"<": "<", "<=": "<=", ">": ">", ">=": ">=", "==": "=", "!=": "<>"}

# Associative operators whose argument lists the splitter may cut into groups.
_ASSOCIATIVE = {sympy.Add: "+", sympy.Mul: "*", sympy.Max: "MAX", sympy.Min: "MIN",
                sympy.And: "AND", sympy.Or: "OR"}


class ExcelPrintError(ValueError):
    """An expression has no faithful Excel formula (or breaks Excel's limits)."""


class _Fragment(str):
    """Printed text that remembers the precedence of its outermost operator."""

    prec: int

    def __new__(cls, text: str, prec: int) -> _Fragment:
        obj = super().__new__(cls, text)
        obj.prec = prec
        return obj


@dataclass(frozen=True)
class _Regrouped:
    """``func(a, b, c, d)`` to be printed as ``func(g1, g2)``, each ``g`` a helper cell.

    Not a sympy node: ``And``/``Or`` flatten nested arguments even when
    unevaluated, which would undo the grouping.
    """

    func: type
    args: tuple


def _prec_of(text: str) -> int:
    """Precedence of a printed fragment; plain strings are atoms (calls, names)."""
    return getattr(text, "prec", PREC_ATOM)


def _wrap(text: str, level: int, strict: bool = False) -> str:
    """Parenthesise ``text`` if it would not bind as an operand at ``level``.

    A leading unary minus is always wrapped: in Excel it would capture only the
    first operand of a following ``^`` (``-x^2`` is ``(-x)^2``).
    """
    prec = _prec_of(text)
    if prec < level or (strict and prec == level) or text.startswith("-"):
        return f"({text})"
    return text


def _float_literal(value: float) -> str:
    """Shortest round-tripping literal (<= 17 significant digits) Excel parses."""
    if not math.isfinite(value):
        raise ExcelPrintError(f"non-finite number {value!r} has no Excel literal")
    text = repr(value)
    if "e" in text:
        mantissa, exponent = text.split("e")
        return f"{mantissa}E{exponent}"
    return text[:-2] if text.endswith(".0") else text


def _int_literal(value: int) -> str:
    """Exact digits up to 2**53, else the nearest double (see module docstring)."""
    if abs(value) <= EXACT_INT_LIMIT:
        return str(value)
    try:
        # Always 17 significant digits in E form, so the rounding is visible.
        return f"{float(value):.16E}"
    except OverflowError:
        raise ExcelPrintError(
            f"integer of {len(str(abs(value)))} digits exceeds the double range") from None


def _call(name: str, texts: list[str]) -> str:
    """``NAME(a,b,...)``, nesting calls of the same function past 255 arguments."""
    while len(texts) > MAX_ARGS:
        chunks = [texts[i:i + MAX_ARGS] for i in range(0, len(texts), MAX_ARGS)]
        texts = [f"{name}({','.join(chunk)})" for chunk in chunks]
    return f"{name}({','.join(texts)})"


def nesting_depth(formula: str) -> int:
    """Deepest parenthesis nesting in ``formula``, ignoring quoted text.

    Counts grouping parentheses as well as calls: a conservative measure of
    Excel's 64-level nesting limit.
    """
    depth = deepest = 0
    quote = ""
    for char in formula:
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "(":
            depth += 1
            deepest = max(deepest, depth)
        elif char == ")":
            depth -= 1
    return deepest


def _as_basic(expr: object) -> sympy.Basic:
    """Accept Python numbers and booleans as well as sympy objects (no parsing)."""
    if isinstance(expr, sympy.Basic):
        return expr
    if isinstance(expr, bool):
        return sympy.true if expr else sympy.false
    if isinstance(expr, int):
        return sympy.Integer(expr)
    if isinstance(expr, float):
        return sympy.Float(expr)
    raise ExcelPrintError(f"cannot print {type(expr).__name__} object {expr!r}")


class ExcelPrinter(StrPrinter):
    """sympy -> Excel formula text (without the leading ``=``).

    ``refs`` maps symbols (and, during splitting, hoisted subexpressions) to the
    cell reference or defined name that holds their value.  Only the
    ``_print_*`` methods defined on this class are used: anything else raises
    ``ExcelPrintError`` instead of falling back to sympy's Python-like syntax.
    """

    def __init__(self, refs: Mapping[sympy.Basic, str]) -> None:
        super().__init__()
        self._refs: dict[sympy.Basic, str] = dict(refs)
        self._replace: dict[sympy.Basic | _Regrouped, sympy.Basic | _Regrouped] = {}
        # Text of every node printed so far: repeated subtrees (common in cost
        # models) and the splitter's repeated measuring print once.
        self._cache: dict[sympy.Basic, str] = {}

    # -- references and restructuring (used by excel_formula_split) ---------

    def add_ref(self, expr: sympy.Basic, ref: str) -> None:
        """Print ``expr`` as ``ref`` from now on."""
        self._refs[expr] = ref
        self._cache.clear()

    def add_replacement(self, expr: sympy.Basic | _Regrouped,
                        new: sympy.Basic | _Regrouped) -> None:
        """Print ``new`` (an equal, restructured expression) wherever ``expr`` occurs."""
        self._replace[expr] = new
        self._cache.clear()

    def lookup(self, expr: sympy.Basic) -> tuple[str | None, sympy.Basic | _Regrouped]:
        """The reference for ``expr`` if any, and the node that prints for it."""
        while True:
            ref = self._refs.get(expr)
            if ref is not None or expr not in self._replace:
                return ref, expr
            expr = self._replace[expr]

    def _peek(self, expr: sympy.Basic) -> sympy.Basic | None:
        """The sympy node printed for ``expr``, or None if it prints opaquely
        (a helper cell, a regrouped list): its structure must not be inspected."""
        ref, node = self.lookup(expr)
        return node if ref is None and isinstance(node, sympy.Basic) else None

    def is_leaf(self, expr: sympy.Basic) -> bool:
        """Whether ``expr`` prints as a reference or a literal (nothing to hoist)."""
        ref, node = self.lookup(expr)
        return ref is not None or not node.args

    # -- dispatch ---------------------------------------------------------------

    def _print(self, expr, **kwargs) -> str:
        """Print ``expr`` (memoised until the references change)."""
        expr = _as_basic(expr)
        text = self._cache.get(expr)
        if text is None:
            text = self._cache[expr] = self._print_uncached(expr)
        return text

    def _print_uncached(self, expr: sympy.Basic) -> str:
        """Print a reference if one is known, else dispatch on this class only."""
        ref, node = self.lookup(expr)
        if ref is not None:
            return ref
        if isinstance(node, _Regrouped):
            return self._print_regrouped(node)
        for cls in type(node).__mro__:
            method = _OWN_METHODS.get("_print_" + cls.__name__)
            if method is not None:
                return method(self, node)
        raise ExcelPrintError(
            f"cannot print {type(node).__name__} as an Excel formula: {node}")

    def parenthesize(self, item, level, strict=False) -> str:
        """Print ``item``, parenthesised if it would not bind at ``level``."""
        return _wrap(self._print(item), level, strict)

    def _print_regrouped(self, expr: _Regrouped) -> str:
        """``g1+g2``, ``MAX(g1,g2)``...: the parts are helper cells or literals."""
        op = _ASSOCIATIVE[expr.func]
        texts = [self._print(part) for part in expr.args]
        if op == "+":
            return _Fragment("+".join(_wrap(t, PREC_ADD) for t in texts), PREC_ADD)
        if op == "*":
            return _Fragment("*".join(_wrap(t, PREC_MUL) for t in texts), PREC_MUL)
        return _call(op, texts)

    # -- atoms --------------------------------------------------------------------

    def _print_Symbol(self, expr: sympy.Symbol) -> str:
        raise ExcelPrintError(f"no cell reference given for symbol {expr.name!r}")

    def _print_Integer(self, expr: sympy.Integer) -> str:
        return _int_literal(int(expr))

    def _print_Rational(self, expr: sympy.Rational) -> str:
        power = len(str(expr.q)) - 1
        if expr.p == 1 and expr.q == 10 ** power:   # 1/10^k, a guard such as MIN_ROWS: 1E-k
            return f"1E-{power}"
        text = f"{_int_literal(expr.p)}/{_int_literal(expr.q)}"
        return _Fragment(text, PREC_MUL)

    def _print_Float(self, expr: sympy.Float) -> str:
        return _float_literal(float(expr))

    def _print_Pi(self, expr: sympy.Basic) -> str:
        return "PI()"

    def _print_Exp1(self, expr: sympy.Basic) -> str:
        return "EXP(1)"

    def _print_BooleanTrue(self, expr: sympy.Basic) -> str:
        return "TRUE"

    def _print_BooleanFalse(self, expr: sympy.Basic) -> str:
        return "FALSE"

    # -- arithmetic ---------------------------------------------------------------

    def _print_Add(self, expr: sympy.Add) -> str:
        # args order (sympy's canonical sort) is deterministic and, unlike
        # as_ordered_terms, cheap for sums of thousands of terms.
        terms = list(expr.args)
        parts = [self._print(terms[0])]
        for term in terms[1:]:
            negative, body = self._unsigned(term)
            if negative:
                # Binary minus: a-(b-c), a-(b+c); a-b*c and a-b^2 need nothing.
                parts.append("-" + _wrap(body, PREC_ADD, strict=True))
            else:
                parts.append("+" + _wrap(body, PREC_ADD))
        return _Fragment("".join(parts), PREC_ADD)

    def _unsigned(self, term: sympy.Basic) -> tuple[bool, str]:
        """Split a sum's term into its sign and the text of its magnitude."""
        node = self._peek(term)
        if node is None:
            return False, self._print(term)
        if node.is_Number and node.is_negative:
            return True, self._print(-node)
        if node.is_Mul:
            negative, numer, denom = self._mul_factors(node)
            return negative, self._mul_text(False, numer, denom)
        return False, self._print(node)

    def _print_Mul(self, expr: sympy.Mul) -> str:
        return self._mul_text(*self._mul_factors(expr))

    def _mul_factors(self, expr: sympy.Mul) -> tuple[bool, list[str], list[str]]:
        """Sign, numerator texts and denominator texts of a product."""
        negative, numer, denom = False, [], []
        for factor in expr.args:
            node = self._peek(factor)
            if node is None:
                numer.append(self._print(factor))
            elif node.is_Number:
                negative ^= bool(node.is_negative)
                self._coefficient(abs(node), numer, denom)
            elif node.is_Pow and node.exp.is_Number and node.exp.is_negative:
                denom.append(self._pow_text(node.base, -node.exp))
            else:
                numer.append(self._print(node))
        return negative, numer, denom

    def _coefficient(self, number: sympy.Number, numer: list[str],
                     denom: list[str]) -> None:
        """Put a positive numeric factor's numerator and denominator in place."""
        if number.is_Rational and not number.is_Integer:
            if number.p != 1:
                numer.append(_int_literal(number.p))
            denom.append(_int_literal(number.q))
        elif number != 1:
            numer.append(self._print(number))

    def _mul_text(self, negative: bool, numer: list[str], denom: list[str]) -> str:
        """Join factors as ``a*b/(c*d)``; the sign never captures a power's base."""
        if len(numer) == 1 and not denom and not negative:
            return numer[0]
        parts = [_wrap(text, PREC_MUL) for text in numer] or ["1"]
        if negative and numer:
            # -x^2 is (-x)^2 in Excel: a power right after the sign needs parentheses.
            parts[0] = _wrap(numer[0], PREC_NEG)
        text = "*".join(parts)
        if len(denom) == 1:
            text += "/" + _wrap(denom[0], PREC_MUL, strict=True)
        elif denom:
            text += "/(" + "*".join(_wrap(d, PREC_MUL) for d in denom) + ")"
        return _Fragment(("-" if negative else "") + text, PREC_MUL)

    def _print_Pow(self, expr: sympy.Pow) -> str:
        return self._pow_text(expr.base, expr.exp)

    def _pow_text(self, base: sympy.Basic, exp: sympy.Basic) -> str:
        """``base^exp`` with Excel's left-associative ``^`` made explicit."""
        node = self._peek(exp)
        if node is not None and node.is_Number:
            if node == sympy.S.Half:
                return f"SQRT({self._print(base)})"
            if node == 1:
                return self._print(base)
            if node.is_negative:
                inner = self._pow_text(base, -node)
                return _Fragment("1/" + _wrap(inner, PREC_MUL, strict=True), PREC_MUL)
        # Both sides strict: (a^b)^c and a^(b^c) must keep their parentheses.
        b = self._print(base)
        text = _wrap(b, PREC_POW, strict=True) + "^" + self.parenthesize(exp, PREC_POW, strict=True)
        if (node is not None and node.is_Number) or not isinstance(self._peek(base), sympy.Add):
            return _Fragment(text, PREC_POW)
        # A fraction to a symbolic power (MoE's (1 - k/E)^(B*T) at a prefill's B*T) can
        # underflow: numpy gives 0 there, LibreOffice's ^ #NUM!, EXP of a large negative 0.
        log = _wrap(self._print(exp), PREC_MUL) + "*" + _call("LN", [b])
        return _call("IF", [f"{_wrap(b, PREC_CMP + 1)}>0", _call("EXP", [log]), text])

    # -- functions ----------------------------------------------------------------

    def _print_Function(self, expr: sympy.Function) -> str:
        name = _FUNCTIONS.get(type(expr).__name__)
        if name is None or isinstance(expr, AppliedUndef):
            raise ExcelPrintError(f"no Excel function for {type(expr).__name__}: {expr}")
        return _call(name, [self._print(arg) for arg in expr.args])

    def _print_log(self, expr: sympy.log) -> str:
        args = [self._print(arg) for arg in expr.args]
        return _call("LN" if len(args) == 1 else "LOG", args)

    def _print_floor(self, expr: sympy.floor) -> str:
        # INT rounds towards minus infinity, exactly like floor.
        return _call("INT", [self._print(expr.args[0])])

    def _print_ceiling(self, expr: sympy.ceiling) -> str:
        # ceiling(x) = -floor(-x); CEILING.MATH would need an _xlfn. prefix.
        inner = "-" + self.parenthesize(expr.args[0], PREC_NEG)
        return _Fragment("-" + _call("INT", [inner]), PREC_NEG)

    def _print_Max(self, expr: sympy.Max) -> str:
        return _call("MAX", [self._print(arg) for arg in expr.args])

    def _print_Min(self, expr: sympy.Min) -> str:
        return _call("MIN", [self._print(arg) for arg in expr.args])

    # -- logic ----------------------------------------------------------------------

    def _print_Relational(self, expr: sympy.core.relational.Relational) -> str:
        op = _RELATIONS.get(expr.rel_op)
        if op is None:
            raise ExcelPrintError(f"no Excel comparison for {expr.rel_op!r}")
        lhs = self.parenthesize(expr.lhs, PREC_CMP, strict=True)
        rhs = self.parenthesize(expr.rhs, PREC_CMP, strict=True)
        return _Fragment(lhs + op + rhs, PREC_CMP)

    def _print_And(self, expr: sympy.And) -> str:
        return _call("AND", [self._print(arg) for arg in expr.args])

    def _print_Or(self, expr: sympy.Or) -> str:
        return _call("OR", [self._print(arg) for arg in expr.args])

    def _print_Not(self, expr: sympy.Not) -> str:
        return _call("NOT", [self._print(expr.args[0])])

    def _print_ITE(self, expr: sympy.ITE) -> str:
        return _call("IF", [self._print(arg) for arg in expr.args])

    def _print_Implies(self, expr: sympy.Implies) -> str:
        premise, conclusion = (self._print(arg) for arg in expr.args)
        return _call("OR", [_call("NOT", [premise]), conclusion])

    def _print_Nand(self, expr: sympy.Nand) -> str:
        return _call("NOT", [_call("AND", [self._print(arg) for arg in expr.args])])

    def _print_Nor(self, expr: sympy.Nor) -> str:
        return _call("NOT", [_call("OR", [self._print(arg) for arg in expr.args])])

    def _print_Xor(self, expr: sympy.Xor) -> str:
        # Parity as a chain of boolean comparisons: (a<>b)<>c; XOR() needs _xlfn.
        return self._chain(expr.args, "<>")

    def _print_Equivalent(self, expr: sympy.Equivalent) -> str:
        texts = [self.parenthesize(arg, PREC_CMP, strict=True) for arg in expr.args]
        return _call("AND", [f"{a}={b}" for a, b in zip(texts, texts[1:])])

    def _chain(self, args: Iterable[sympy.Basic], op: str) -> str:
        """Left-nested ``((a op b) op c)`` of boolean comparisons."""
        texts = [self.parenthesize(arg, PREC_CMP, strict=True) for arg in args]
        text = texts[0]
        for other in texts[1:]:
            text = _Fragment(f"{_wrap(text, PREC_CMP, strict=True)}{op}{other}", PREC_CMP)
        return text

    def _print_Piecewise(self, expr: sympy.Piecewise) -> str:
        # No matching piece is undefined in sympy; #N/A says so in the sheet.
        text: str = "NA()"
        for value, cond in reversed(expr.args):
            if cond == sympy.true:
                text = self._print(value)
            else:
                text = f"IF({self._print(cond)},{self._print(value)},{text})"
        return text


# Only methods written for Excel dispatch; StrPrinter's would print Python syntax.
_OWN_METHODS: dict[str, Callable[..., str]] = {
    name: method for name, method in vars(ExcelPrinter).items()
    if name.startswith("_print_")
}


def _check_limits(text: str) -> str:
    """Return ``text`` if Excel accepts a formula this long and deep, else raise."""
    if len(text) > MAX_FORMULA_CHARS:
        raise ExcelPrintError(
            f"formula has {len(text)} characters (Excel allows {MAX_FORMULA_CHARS}); "
            "use excel_formula_split")
    if nesting_depth(text) > MAX_NESTING:
        raise ExcelPrintError(
            f"formula nests {nesting_depth(text)} levels (Excel allows {MAX_NESTING}); "
            "use excel_formula_split")
    return text


def excel_formula(expr: sympy.Basic, names: Mapping[sympy.Symbol, str], *,
                  check_limits: bool = True) -> str:
    """Excel formula text (no leading ``=``) computing ``expr``.

    ``names`` maps every free symbol to a cell reference or defined name, e.g.
    ``{B: "in_B"}``.  Raises ``ExcelPrintError`` for a symbol missing from
    ``names``, for anything without an exact Excel counterpart (``oo``, ``nan``,
    ``I``, unknown functions, ...), and, unless ``check_limits`` is false, for
    a formula past Excel's 8,192 characters or 64 nesting levels.
    """
    with _recursion_guard():
        text = ExcelPrinter(names).doprint(_as_basic(expr))
    return _check_limits(text) if check_limits else text


def excel_formula_split(expr: sympy.Basic, names: Mapping[sympy.Symbol, str],
                        allocate: Callable[[sympy.Basic], str],
                        chars: int = SPLIT_CHARS) -> str:
    """Like ``excel_formula``, hoisting subexpressions so the result fits Excel.

    While the formula is longer than ``chars`` (~8,000 by default) or nests deeper than 60
    levels, a subexpression is moved out: ``allocate(subexpr)`` must return the
    reference of a helper cell, which the caller then fills with
    ``excel_formula_split(subexpr, names, allocate)``.  Each hoisted
    subexpression is a proper part of ``expr`` (or a regrouping of a sum's,
    product's, MAX's... arguments, or the tail of a Piecewise), so that
    recursion ends.  ``allocate`` may see equal subexpressions more than once
    across calls; memoise it to share helper cells.
    """
    with _recursion_guard():
        return _Splitter(ExcelPrinter(names), allocate, chars).run(_as_basic(expr))


@contextmanager
def _recursion_guard() -> Iterator[None]:
    """Report trees too deep for Python's recursion limit as ExcelPrintError."""
    try:
        yield
    except RecursionError:
        raise ExcelPrintError("expression nests too deeply to print") from None


def _associative(node: sympy.Basic | _Regrouped) -> bool:
    """Whether the splitter may cut the node's argument list into groups."""
    return isinstance(node, _Regrouped) or type(node) in _ASSOCIATIVE


def _fits(text: str, chars: int = SPLIT_CHARS) -> bool:
    """Whether a formula is within the splitter's targets."""
    return len(text) <= chars and nesting_depth(text) <= SPLIT_NESTING


class _Splitter:
    """Hoists subexpressions of one expression until its formula fits."""

    def __init__(self, printer: ExcelPrinter,
                 allocate: Callable[[sympy.Basic], str], chars: int = SPLIT_CHARS) -> None:
        self.printer = printer
        self.allocate = allocate
        self.chars = chars

    def run(self, expr: sympy.Basic) -> str:
        """Print ``expr``, hoisting one subtree (or one regrouping) per round."""
        previous = None
        while True:
            text = self.printer.doprint(expr)
            if _fits(text, self.chars):
                return text
            if text == previous:
                # A round that changes nothing would repeat forever.
                raise ExcelPrintError("cannot split the formula to fit Excel's limits")
            previous = text
            self._reduce(expr, by_depth=nesting_depth(text) > SPLIT_NESTING)

    def _size(self, expr: sympy.Basic, by_depth: bool) -> int:
        """The measure being reduced: nesting depth or length of the print."""
        text = self.printer.doprint(expr)
        return nesting_depth(text) if by_depth else len(text)

    def _small(self, size: int, by_depth: bool) -> bool:
        """Small enough to be a helper cell's whole formula with room to spare."""
        return size <= (SPLIT_NESTING if by_depth else self.chars) // 2

    def _kids(self, node: sympy.Basic) -> list[sympy.Basic]:
        """Printable children of a node that are worth hoisting."""
        if isinstance(node, sympy.Piecewise):
            kids = [part for pair in node.args for part in pair.args]
        else:
            kids = list(node.args)
        return [kid for kid in kids if not self.printer.is_leaf(kid)]

    def _reduce(self, root: sympy.Basic, by_depth: bool) -> None:
        """Walk down the biggest branch to the largest small subtree; move it out."""
        node = root
        while True:
            node = self.printer.lookup(node)[1]
            sized = [(self._size(kid, by_depth), kid) for kid in self._kids(node)]
            if sized:
                size, kid = max(sized, key=lambda pair: pair[0])
                if not self._small(size, by_depth):
                    node = kid
                    continue
            self._reduce_at(node, [kid for _, kid in sized], by_depth)
            return

    def _reduce_at(self, node: sympy.Basic, kids: list[sympy.Basic],
                   by_depth: bool) -> None:
        """Shrink a node whose children are each small (or leaves)."""
        if isinstance(node, sympy.Piecewise) and len(node.args) > 2:
            self._peel(node)
        elif _associative(node) and len(node.args) > 2 and not by_depth:
            self._regroup(node)
        elif kids:
            self._hoist(max(kids, key=lambda kid: self._size(kid, by_depth)))
        else:
            raise ExcelPrintError(f"cannot split {type(node).__name__} to fit Excel")

    def _hoist(self, expr: sympy.Basic) -> None:
        """Move ``expr`` into a helper cell (once)."""
        if not self.printer.is_leaf(expr):
            self.printer.add_ref(expr, self.allocate(expr))

    def _regroup(self, node: sympy.Basic | _Regrouped) -> None:
        """Print ``f(a, b, c, ...)`` as ``f(f(a, b), f(c, ...))`` with helper cells."""
        new_args = []
        for group in self._groups(node.args):
            # Unevaluated: re-simplifying hundreds of MAX arguments is quadratic.
            part = group[0] if len(group) == 1 else node.func(*group, evaluate=False)
            self._hoist(part)
            new_args.append(part)
        self.printer.add_replacement(node, _Regrouped(node.func, tuple(new_args)))

    def _groups(self, args: Iterable[sympy.Basic]) -> list[list[sympy.Basic]]:
        """Consecutive runs of arguments whose prints fit half a formula."""
        groups: list[list[sympy.Basic]] = [[]]
        used = 0
        for arg in args:
            size = len(self.printer.doprint(arg)) + 1
            if groups[-1] and used + size > self.chars // 2:
                groups.append([])
                used = 0
            groups[-1].append(arg)
            used += size
        return groups

    def _peel(self, node: sympy.Piecewise) -> None:
        """Keep the first pieces of a long IF chain; its tail goes to a helper cell."""
        keep, used = 0, 0
        while keep < min(len(node.args) - 1, SPLIT_NESTING // 3):
            pair = node.args[keep]
            size = len(self.printer.doprint(pair.expr)) + \
                len(self.printer.doprint(pair.cond))
            if keep and used + size > self.chars // 2:
                break
            keep, used = keep + 1, used + size
        tail = sympy.Piecewise(*node.args[keep:], evaluate=False)
        self._hoist(tail)
        new = sympy.Piecewise(*node.args[:keep], (tail, True), evaluate=False)
        self.printer.add_replacement(node, new)
