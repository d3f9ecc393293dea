"""Tests for the sympy -> Excel formula printer.

Two kinds: formula strings derived by hand for Excel's pitfalls, and a
differential test that recalculates several hundred printed formulas in one
real LibreOffice run and compares every value with sympy's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import openpyxl
import pytest
import sympy
from openpyxl.workbook.defined_name import DefinedName
from sympy import Rational as R

from infest.exports.workbook.excel_printer import (
    MAX_FORMULA_CHARS,
    MAX_NESTING,
    ExcelPrintError,
    excel_formula,
    excel_formula_split,
    nesting_depth,
)
from libreoffice import LibreOfficeError, recalculate, to_pdf
from random_exprs import (INPUTS, MAX_INPUTS, MAX_SYMS, _draw_expressions, _exact,
                          _well_conditioned)

from random_exprs import x, y, z
flag = sympy.Symbol("flag")
NAMES = {x: "in_x", y: "in_y", z: "in_z", flag: "in_flag"}


def fx(expr: sympy.Basic) -> str:
    """Print with the standard names."""
    return excel_formula(expr, NAMES)


# ---------------------------------------------------------------------------
# (a) Hand-derived formula strings
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("expr, expected", [
    # Excel reads -x^2 as (-x)^2: the power must be grouped after the sign.
    (-x**2, "-(in_x^2)"),
    # Here the sign belongs to the literal 3 and ^ still binds before *.
    (-3 * x**2, "-3*in_x^2"),
    # Binary minus is below ^ in Excel too: no parentheses needed.
    (x - y**2, "in_x-in_y^2"),
    (sympy.Integer(-2)**x, "(-2)^in_x"),
    (x**(-y), "in_x^(-in_y)"),
    # A difference to a symbolic power (MoE's distinct experts): EXP and LN where the
    # base is positive, so a power that underflows is 0 as in numpy, not LibreOffice's #NUM!.
    ((1 - x)**y, "IF(1-in_x>0,EXP(in_y*LN(1-in_x)),(1-in_x)^in_y)"),
    ((1 - x)**(y + 1), "IF(1-in_x>0,EXP((1+in_y)*LN(1-in_x)),(1-in_x)^(1+in_y))"),
])
def test_unary_minus_and_power(expr, expected):
    assert fx(expr) == expected


@pytest.mark.parametrize("expr, expected", [
    # ^ is left-associative in Excel: 2^3^2 would be (2^3)^2 = 64, not 512.
    (sympy.Pow(2, sympy.Pow(3, 2, evaluate=False), evaluate=False), "2^(3^2)"),
    (2**(3**x), "2^(3^in_x)"),
    (sympy.Pow(x**y, z, evaluate=False), "(in_x^in_y)^in_z"),
    ((x + y)**2, "(in_x+in_y)^2"),
])
def test_power_associativity(expr, expected):
    assert fx(expr) == expected


@pytest.mark.parametrize("expr, expected", [
    (x**R(1, 3), "in_x^(1/3)"),
    (x**-2, "1/in_x^2"),
    (x**R(-1, 3), "1/in_x^(1/3)"),
    (sympy.sqrt(x), "SQRT(in_x)"),
    (1 / sympy.sqrt(x), "1/SQRT(in_x)"),
    (R(3, 7) * x, "3*in_x/7"),
    (R(-3, 7), "-3/7"),
    (-1 / x, "-1/in_x"),
])
def test_rationals_and_negative_exponents(expr, expected):
    assert fx(expr) == expected


def test_subtraction_and_division_chains():
    a_minus_b_minus_c = sympy.Add(
        x, sympy.Mul(-1, sympy.Add(y, -z, evaluate=False), evaluate=False),
        evaluate=False)
    x_over_y_over_z = sympy.Mul(
        x, sympy.Pow(sympy.Mul(y, 1 / z), -1, evaluate=False), evaluate=False)
    assert fx(a_minus_b_minus_c) == "in_x-(in_y-in_z)"
    assert fx(x_over_y_over_z) == "in_x/(in_y/in_z)"
    assert fx(x / (y * z)) == "in_x/(in_y*in_z)"
    assert fx(x / (y - z)) == "in_x/(in_y-in_z)"
    assert fx(-x / (y * z)) == "-in_x/(in_y*in_z)"
    assert fx(x * (y - z)) == "in_x*(in_y-in_z)"


def test_max_min_split_past_255_arguments():
    syms = [sympy.Symbol(f"s{i:03d}", positive=True) for i in range(300)]
    names = {s: f"in_{s.name}" for s in syms}
    refs = [f"in_s{i:03d}" for i in range(300)]
    # 300 arguments: one MAX of the first 255, one of the remaining 45.
    expected = f"MAX(MAX({','.join(refs[:255])}),MAX({','.join(refs[255:])}))"
    # evaluate=False: sympy's pairwise simplification of 300 arguments is slow.
    assert excel_formula(sympy.Max(*syms, evaluate=False), names) == expected
    assert excel_formula(sympy.Min(*syms, evaluate=False), names) == \
        expected.replace("MAX", "MIN")


@pytest.mark.parametrize("expr, expected", [
    (sympy.floor(x), "INT(in_x)"),
    # ceiling(x) = -floor(-x)
    (sympy.ceiling(x), "-INT(-in_x)"),
    (sympy.ceiling(x / 2), "-INT(-(in_x/2))"),
    # The leading sign of -INT(...) must not capture ^.
    (sympy.ceiling(x)**2, "(-INT(-in_x))^2"),
    (y - sympy.ceiling(x), "in_y-(-INT(-in_x))"),
])
def test_floor_ceiling_via_int(expr, expected):
    assert fx(expr) == expected


def test_piecewise_to_if():
    assert fx(sympy.Piecewise((x, x < y), (y, True))) == "IF(in_x<in_y,in_x,in_y)"
    # No True fallback: an unmatched value is #N/A, still a valid formula.
    assert fx(sympy.Piecewise((x, x < 1))) == "IF(in_x<1,in_x,NA())"
    three = sympy.Piecewise((x, x <= 1), (y, sympy.And(x >= 2, sympy.Ne(y, z))),
                            (z, sympy.Or(x > y, sympy.Eq(y, 3))))
    assert fx(three) == ("IF(in_x<=1,in_x,IF(AND(in_x>=2,in_y<>in_z),in_y,"
                         "IF(OR(in_y=3,in_x>in_y),in_z,NA())))")
    assert fx(sympy.Piecewise((1, sympy.Not(flag)), (2, True))) == "IF(NOT(in_flag),1,2)"


def test_other_boolean_operators():
    b, c = sympy.symbols("b c")
    names = {**NAMES, b: "in_b", c: "in_c"}
    assert excel_formula(sympy.ITE(flag, x < 1, y < 1), names) == \
        "IF(in_flag,in_x<1,in_y<1)"
    # Parity of three booleans: (a<>b)<>c.
    assert excel_formula(sympy.Xor(flag, b, c, evaluate=False), names) == \
        "(in_b<>in_c)<>in_flag"
    assert excel_formula(sympy.Xor(flag, x < 1), names) == "in_flag<>(in_x<1)"
    assert excel_formula(sympy.Implies(flag, b), names) == "OR(NOT(in_flag),in_b)"
    assert excel_formula(sympy.Equivalent(flag, b, c), names) == \
        "AND(in_b=in_c,in_c=in_flag)"
    assert excel_formula(sympy.Nand(flag, b), names) == "NOT(AND(in_b,in_flag))"
    assert excel_formula(sympy.Nor(flag, b), names) == "NOT(OR(in_b,in_flag))"


@pytest.mark.parametrize("expr, expected", [
    (sympy.log(x), "LN(in_x)"),
    (sympy.log(x, 2), "LN(in_x)/LN(2)"),
    (sympy.exp(-x), "EXP(-in_x)"),
    (sympy.Abs(x - y), "ABS(in_x-in_y)"),
    (sympy.Mod(x, y), "MOD(in_x,in_y)"),
    (sympy.pi * x, "PI()*in_x"),
    (sympy.true, "TRUE"),
    (sympy.false, "FALSE"),
    (sympy.Le(x, y), "in_x<=in_y"),
    (sympy.Eq(x, y), "in_x=in_y"),
    (sympy.Ne(x, y), "in_x<>in_y"),
])
def test_functions_and_logic(expr, expected):
    assert fx(expr) == expected


@pytest.mark.parametrize("expr, expected", [
    (sympy.Integer(2**53), "9007199254740992"),
    # Past 2**53: the nearest double (2**53 itself), 17 significant digits.
    (sympy.Integer(2**53 + 1), "9.0071992547409920E+15"),
    (sympy.Integer(-2**60), "-1.1529215046068470E+18"),
    (sympy.Float(1.5e20), "1.5E+20"),
    (sympy.Float(0.1), "0.1"),
    (sympy.Float(2.0), "2"),
    (sympy.Float(3.25e-7), "3.25E-07"),
    (sympy.Float(1 / 3), "0.3333333333333333"),
])
def test_number_literals(expr, expected):
    assert fx(expr) == expected


@pytest.mark.parametrize("expr", [
    sympy.oo, -sympy.oo, sympy.nan, sympy.zoo, x + sympy.oo, sympy.I * x,
    sympy.Function("f")(x), sympy.gamma(x), sympy.Integral(x, x),
    sympy.Symbol("unmapped"), sympy.Integer(10**400), sympy.Matrix([x]),
    sympy.Contains(x, sympy.Interval(0, 1)), sympy.Eq(sympy.Matrix([x]), sympy.Matrix([y])),
])
def test_unprintable_raises(expr):
    with pytest.raises(ExcelPrintError):
        fx(expr)


def test_nesting_depth_ignores_quoted_parentheses():
    assert nesting_depth("MAX(1,(2+3))") == 2
    assert nesting_depth("'Sheet (2)'!A1+1") == 0
    assert nesting_depth("1+2") == 0


def test_excel_formula_enforces_limits():
    deep = x
    for _ in range(MAX_NESTING + 1):
        deep = sympy.exp(deep)
    with pytest.raises(ExcelPrintError, match="nests"):
        fx(deep)
    wide = sympy.Add(*[sympy.Symbol(f"v{i}") * x for i in range(1000)])
    names = {**NAMES, **{s: f"in_{s.name}" for s in wide.free_symbols}}
    with pytest.raises(ExcelPrintError, match="characters"):
        excel_formula(wide, names)


def test_split_leaves_small_formulas_alone():
    def allocate(expr):
        raise AssertionError(f"nothing should be hoisted, got {expr}")
    expr = sympy.Max(x * y, z) / (x + 1)
    assert excel_formula_split(expr, NAMES, allocate) == fx(expr)


# ---------------------------------------------------------------------------
# (b) Differential test against real LibreOffice
# ---------------------------------------------------------------------------

def _unprintable(expr: sympy.Basic) -> bool:
    """Infinities, nan and I have no Excel form: such expressions must raise."""
    return expr.has(sympy.oo, -sympy.oo, sympy.zoo, sympy.nan, sympy.I)


@dataclass
class Case:
    """One formula cell of the shared workbook and what it must evaluate to."""

    label: str
    expr: sympy.Basic
    formula: str
    cell: str
    expected: float | str | None = None


class _Book:
    """The one workbook every LibreOffice-backed test writes into."""

    def __init__(self) -> None:
        self.wb = openpyxl.Workbook()
        self.inputs = self.wb.active
        self.inputs.title = "Inputs"
        self.calc = self.wb.create_sheet("Calc")
        self.helpers = self.wb.create_sheet("Helpers")
        self.names: dict[sympy.Symbol, str] = {}
        self.hoisted: dict[sympy.Basic, str] = {}
        self.pending: list[sympy.Basic] = []

    def add_input(self, sym: sympy.Symbol, value: Fraction) -> None:
        """An input cell on Inputs with the workbook-scoped name ``in_<symbol>``."""
        row = len(self.names) + 2
        self.inputs.cell(row, 1, sym.name)
        self.inputs.cell(row, 2, float(value))
        name = f"in_{sym.name}"
        self.wb.defined_names[name] = DefinedName(name, attr_text=f"Inputs!$B${row}")
        self.names[sym] = name

    def add_formula(self, label: str, expr: sympy.Basic, formula: str) -> Case:
        """A labelled formula cell on Calc."""
        row = self.calc.max_row + 1
        self.calc.cell(row, 1, label)
        self.calc.cell(row, 2, "=" + formula)
        return Case(label, expr, formula, f"B{row}")

    def allocate(self, expr: sympy.Basic) -> str:
        """excel_formula_split's callback: a helper cell, filled by fill_helpers."""
        if expr not in self.hoisted:
            self.hoisted[expr] = f"Helpers!$A${len(self.hoisted) + 1}"
            self.pending.append(expr)
        return self.hoisted[expr]

    def fill_helpers(self) -> list[str]:
        """Write every hoisted subexpression (which may hoist more); return formulas."""
        formulas = []
        while self.pending:
            expr = self.pending.pop()
            formula = excel_formula_split(expr, self.names, self.allocate)
            row = int(self.hoisted[expr].rsplit("$", 1)[1])
            self.helpers.cell(row, 1, "=" + formula)
            formulas.append(formula)
        return formulas


def _pitfall_cases() -> list[tuple[str, sympy.Basic, float | str]]:
    """Hand-picked cases; expected values from sympy or by hand."""
    two_three_two = sympy.Pow(2, sympy.Pow(3, 2, evaluate=False), evaluate=False)
    chain = sympy.Add(x, sympy.Mul(-1, sympy.Add(y, -z, evaluate=False),
                                   evaluate=False), evaluate=False)
    return [
        ("-x^2", -x**2, -(11 / 8)**2),
        ("2^3^2", two_three_two, 512.0),  # 2^(3^2) = 2^9
        ("x-(y-z)", chain, 11 / 8 - (45 / 16 - 13 / 32)),
        ("ceiling(-x)", sympy.ceiling(-x), -1.0),  # ceiling(-1.375)
        ("floor(-x)", sympy.floor(-x), -2.0),
        ("ceiling(x)^2", sympy.ceiling(x)**2, 4.0),
        ("no fallback", sympy.Piecewise((x, x > 2)), "#N/A"),  # x = 1.375
        ("2^53+1", sympy.Integer(2**53 + 1), float(2**53)),
        # x < 2 is true and y < 2 false (x = 1.375, y = 2.8125): exactly one holds.
        ("xor", sympy.Piecewise((1, sympy.Xor(x < 2, y < 2)), (0, True)), 1.0),
        ("implies", sympy.Piecewise((1, sympy.Implies(x < 2, y < 2)), (0, True)), 0.0),
        ("max300", sympy.Max(*MAX_SYMS, evaluate=False), float(max(MAX_INPUTS.values()))),
        ("min300", sympy.Min(*MAX_SYMS, evaluate=False), float(min(MAX_INPUTS.values()))),
    ]


def _big_expressions() -> dict[str, sympy.Basic]:
    """Expressions too long or too deep for one Excel formula."""
    wide = sympy.Add(*[sympy.Max(k * x, y + R(k, 7), evaluate=False) / (z + k)
                       for k in range(1, 301)])
    deep = x
    for k in range(1, 81):  # 80 nested ABS() calls: past Excel's 64 levels
        # Unevaluated: deciding the sign of each level symbolically is slow.
        deep = sympy.Abs(sympy.Add(sympy.Mul(deep, y, evaluate=False), -k,
                                   evaluate=False), evaluate=False)
    pieces = [(k * x + y, x < R(k, 100)) for k in range(1, 121)] + [(z, True)]
    chain = sympy.Piecewise(*pieces) + sympy.Piecewise(*pieces[::-1][1:], (x, True))
    ks = range(1, 301)
    # Unevaluated: sympy's simplification of 300 arguments is slow.
    big_max = sympy.Max(*[k * x - y / k for k in ks], evaluate=False)
    big_min = sympy.Min(*[x / k + z for k in ks], evaluate=False)
    big_and = sympy.And(*[sympy.Lt(k * x, y + k**2, evaluate=False) for k in ks],
                        evaluate=False)
    max_and = sympy.Piecewise((big_max, big_and), (big_min, True), evaluate=False)
    return {"wide": wide, "deep": deep, "if-chain": chain, "mixed": wide * deep + chain,
            "max-and": max_and}


@dataclass
class Recalculated:
    """All cases of the shared workbook with their LibreOffice values."""

    random_cases: list[Case]
    pitfalls: list[Case]
    split_cases: list[Case]
    helper_formulas: list[str]
    values: dict[str, object]
    unprintable: list[sympy.Basic]


@pytest.fixture(scope="module")
def recalculated(soffice: str, tmp_path_factory) -> Recalculated:
    """Build one workbook with every case, recalculate it once in LibreOffice."""
    book = _Book()
    for sym, value in {**INPUTS, **MAX_INPUTS}.items():
        book.add_input(sym, value)
    randoms, unprintable = _random_cases(book)
    pitfalls = [_case(book, label, expr, expected)
                for label, expr, expected in _pitfall_cases()]
    splits = [_case(book, label, expr, _exact(expr, INPUTS), split=True)
              for label, expr in _big_expressions().items()]
    helper_formulas = book.fill_helpers()
    folder = tmp_path_factory.mktemp("xlsx")
    book.wb.save(folder / "cases.xlsx")
    out = recalculate(folder / "cases.xlsx", folder / "out", soffice=soffice)
    sheet = openpyxl.load_workbook(out, data_only=True)["Calc"]
    values = {case.cell: sheet[case.cell].value for case in randoms + pitfalls + splits}
    return Recalculated(randoms, pitfalls, splits, helper_formulas, values, unprintable)


def _case(book: _Book, label: str, expr: sympy.Basic, expected, split=False) -> Case:
    """Print ``expr`` into a new formula cell that must evaluate to ``expected``."""
    if split:
        formula = excel_formula_split(expr, book.names, book.allocate)
    else:
        formula = excel_formula(expr, book.names)
    case = book.add_formula(label, expr, formula)
    case.expected = expected
    return case


def _random_cases(book: _Book) -> tuple[list[Case], list[sympy.Basic]]:
    """Print every drawn expression with a finite, well-conditioned value."""
    cases, unprintable = [], []
    for i, expr in enumerate(_draw_expressions(1000)):
        if _unprintable(expr):
            unprintable.append(expr)
            continue
        exact = _exact(expr, INPUTS)
        if exact is None or not _well_conditioned(expr, exact):
            continue
        cases.append(_case(book, f"random {i}", expr, exact))
    return cases, unprintable


def _matches(actual: object, expected: float | str) -> bool:
    """LibreOffice's cell value equals sympy's (relative 1e-9) or the error text."""
    if isinstance(expected, str):
        return actual == expected
    if isinstance(actual, bool) or not isinstance(actual, (int, float)):
        return False
    return math.isclose(actual, expected, rel_tol=1e-9, abs_tol=1e-12 if expected == 0 else 0)


def _mismatches(cases: list[Case], values: dict[str, object]) -> list[str]:
    """A readable line per case whose LibreOffice value is wrong."""
    return [f"{case.label}: {case.expr}\n  ={case.formula}\n  LibreOffice "
            f"{values[case.cell]!r}, sympy {case.expected!r}"
            for case in cases if not _matches(values[case.cell], case.expected)]


def test_random_expressions_match_libreoffice(recalculated):
    # Enough survive the finiteness and conditioning filters to mean something.
    assert len(recalculated.random_cases) >= 200
    assert _mismatches(recalculated.random_cases, recalculated.values) == []


def test_nonfinite_expressions_refuse_to_print(recalculated):
    for expr in recalculated.unprintable:
        with pytest.raises(ExcelPrintError):
            excel_formula(expr, NAMES)


def test_pitfalls_match_libreoffice(recalculated):
    assert _mismatches(recalculated.pitfalls, recalculated.values) == []


def test_split_formulas_fit_and_match_libreoffice(recalculated):
    for case in recalculated.split_cases:
        plain = excel_formula(case.expr, NAMES, check_limits=False)
        assert len(plain) > MAX_FORMULA_CHARS or nesting_depth(plain) > MAX_NESTING
    for formula in [c.formula for c in recalculated.split_cases] + \
            recalculated.helper_formulas:
        assert len(formula) <= MAX_FORMULA_CHARS
        assert nesting_depth(formula) <= MAX_NESTING
    assert all(case.expected is not None for case in recalculated.split_cases)
    assert _mismatches(recalculated.split_cases, recalculated.values) == []


# ---------------------------------------------------------------------------
# LibreOffice helpers
# ---------------------------------------------------------------------------

def test_recalculate_reports_bad_input(tmp_path):
    with pytest.raises(LibreOfficeError, match="no such workbook"):
        recalculate(tmp_path / "missing.xlsx", tmp_path / "out", soffice="soffice")
    book = tmp_path / "book.xlsx"
    openpyxl.Workbook().save(book)
    with pytest.raises(LibreOfficeError, match="overwrite"):
        recalculate(book, tmp_path, soffice="soffice")
    with pytest.raises(LibreOfficeError, match="cannot start"):
        recalculate(book, tmp_path / "out", soffice=str(tmp_path / "no-soffice"))


def test_to_pdf_renders_a_workbook(soffice, tmp_path):
    book = tmp_path / "book.xlsx"
    wb = openpyxl.Workbook()
    wb.active["A1"] = "=1+1"
    wb.save(book)
    pdf = to_pdf(book, tmp_path / "out", soffice=soffice)
    assert pdf == tmp_path / "out" / "book.pdf"
    assert pdf.read_bytes().startswith(b"%PDF")
