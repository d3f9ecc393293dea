"""Parse .arch text into the AST, turning Lark's exceptions into located diagnostics."""
from __future__ import annotations

import re
from functools import lru_cache
from importlib import resources
from typing import Any

from lark import Lark, Token, Transformer, Tree, v_args
from lark.exceptions import (UnexpectedCharacters, UnexpectedEOF, UnexpectedInput,
                             UnexpectedToken, VisitError)

from infest.dsl import ast
from infest.dsl.errors import Span, SpecError, did_you_mean, fail, register_source
from infest.dsl.units import parse_number, unit_factor, UNITS

_NUMBER_PARTS = re.compile(r"([\d_]*\.?[\d_]+(?:[eE][+-]?\d+)?)[ \t]*(.*)")


@lru_cache(maxsize=1)
def _lark() -> Lark:
    """The LALR parser, built once (cached on disk by lark between runs)."""
    text = resources.files("infest.dsl").joinpath("grammar.lark").read_text()
    return Lark(text, parser="lalr", propagate_positions=True, maybe_placeholders=False,
                cache=True)


def parse(text: str, filename: str = "<spec>") -> ast.SpecFile:
    """Parse one file's text; raise SpecError with file:line:col on bad input."""
    register_source(filename, text)
    try:
        tree = _lark().parse(text)
    except UnexpectedInput as exc:
        raise _syntax_error(exc, text, filename) from None
    try:
        items = _ToAst(filename).transform(tree)
    except VisitError as exc:  # a rule method raised SpecError: surface it unwrapped
        if isinstance(exc.orig_exc, SpecError):
            raise exc.orig_exc from None
        raise
    return ast.SpecFile(filename, tuple(items))


def _span_of(meta_or_tok: Any, filename: str) -> Span:
    """Span of a Lark token or tree meta."""
    m = meta_or_tok
    return Span(filename, m.line, m.column, m.end_line, m.end_column)


class _ToAst(Transformer):
    """Lark tree -> AST dataclasses, one method per grammar rule."""

    def __init__(self, filename: str) -> None:
        super().__init__()
        self.file = filename

    def _span(self, meta: Any) -> Span:
        return _span_of(meta, self.file)

    def start(self, items: list) -> list:
        return items

    @v_args(meta=True)
    def import_stmt(self, meta: Any, children: list) -> ast.Import:
        return ast.Import(str(children[0])[1:-1], self._span(meta))

    @v_args(meta=True)
    def model(self, meta: Any, children: list) -> ast.Model:
        name, title, body = _header(children)
        return ast.Model(str(name), title or str(name), tuple(body), self._span(meta),
                         _span_of(name, self.file))

    @v_args(meta=True)
    def hardware(self, meta: Any, children: list) -> ast.Hardware:
        name, title, fields = _header(children)
        return ast.Hardware(str(name), title or str(name), tuple(fields), self._span(meta),
                            _span_of(name, self.file))

    @v_args(meta=True)
    def hw_field(self, meta: Any, children: list) -> ast.HwField:
        return ast.HwField(str(children[0]), children[1], self._span(meta))

    @v_args(meta=True)
    def assign(self, meta: Any, children: list) -> ast.Assign:
        target, value, *rest = children
        group = next((c for c in rest if isinstance(c, str)), None)
        body = next((c for c in rest if isinstance(c, tuple)), None)
        return ast.Assign(str(target), value, group, body, self._span(meta),
                          _span_of(target, self.file))

    @v_args(meta=True)
    def dtype_decl(self, meta: Any, children: list) -> ast.DtypeDecl:
        role, dtype, *bits = children
        bits_num = self.number([bits[0]]) if bits else None
        return ast.DtypeDecl(str(role), str(dtype), bits_num, self._span(meta),
                             _span_of(dtype, self.file))

    @v_args(meta=True)
    def repeat(self, meta: Any, children: list) -> ast.Repeat:
        count, *rest = children
        group = next((c for c in rest if isinstance(c, str)), None)
        body = next(c for c in rest if isinstance(c, tuple))
        return ast.Repeat(count, group, body, self._span(meta))

    @v_args(meta=True)
    def layer_def(self, meta: Any, children: list) -> ast.LayerDef:
        name, *rest = children
        params = tuple(str(c) for c in rest if isinstance(c, Token))
        body = next(c for c in rest if isinstance(c, tuple))
        return ast.LayerDef(str(name), params, body, self._span(meta), _span_of(name, self.file))

    @v_args(meta=True)
    def policy_def(self, meta: Any, children: list) -> ast.PolicyDef:
        name, *splits = children
        return ast.PolicyDef(str(name), tuple(s for s in splits if isinstance(s, ast.Split)),
                             self._span(meta), _span_of(name, self.file))

    @v_args(meta=True)
    def split(self, meta: Any, children: list) -> ast.Split:
        by = next((str(c) for c in children if isinstance(c, _ByName)), None)
        names = [str(c) for c in children if not isinstance(c, _ByName)]
        return ast.Split(tuple(names[:-1]), names[-1], by, self._span(meta))

    def split_by(self, children: list) -> str:
        return _ByName(children[0])

    @v_args(meta=True)
    def group_stmt(self, meta: Any, children: list) -> ast.GroupStmt:
        return ast.GroupStmt(children[0], self._span(meta))

    def group(self, children: list) -> str:
        return _GroupName(children[0])

    def block(self, children: list) -> tuple:
        return tuple(c for c in children if not isinstance(c, Token))

    def number(self, children: list) -> ast.Num:
        return _number(children[0], self.file)

    def name(self, children: list) -> ast.Name:
        tok = children[0]
        return ast.Name(str(tok), _span_of(tok, self.file))

    @v_args(meta=True)
    def neg(self, meta: Any, children: list) -> ast.Neg:
        return ast.Neg(children[0], self._span(meta))

    def _binop(op: str):  # type: ignore[misc]
        @v_args(meta=True)
        def method(self: "_ToAst", meta: Any, children: list) -> ast.BinOp:
            return ast.BinOp(op, children[0], children[1], self._span(meta))
        return method

    add, sub, mul = _binop("+"), _binop("-"), _binop("*")
    div, mod, pow = _binop("/"), _binop("%"), _binop("^")

    @v_args(meta=True)
    def call(self, meta: Any, children: list) -> ast.Call:
        func, *args = children
        return ast.Call(str(func), tuple(args), self._span(meta), _span_of(func, self.file))

    @v_args(meta=True)
    def pos_arg(self, meta: Any, children: list) -> ast.PosArg:
        return ast.PosArg(children[0], self._span(meta))

    @v_args(meta=True)
    def dims_arg(self, meta: Any, children: list) -> ast.DimsArg:
        return ast.DimsArg(children[0], children[1], self._span(meta))

    @v_args(meta=True)
    def kw_arg(self, meta: Any, children: list) -> ast.KwArg:
        return ast.KwArg(str(children[0]), children[1], self._span(meta))


class _GroupName(str):
    """A group label (a str subclass so `assign` can tell it from the target name)."""


class _ByName(str):
    """The collective named by `split ... by NAME` (told apart from the group names)."""


def _header(children: list) -> tuple[Token, str | None, list]:
    """Split `NAME STRING? body...` children of a model or hardware block."""
    name, rest = children[0], children[1:]
    if rest and isinstance(rest[0], Token) and rest[0].type == "STRING":
        return name, str(rest[0])[1:-1], [c for c in rest[1:] if not isinstance(c, Token)]
    return name, None, [c for c in rest if not isinstance(c, Token)]


def _number(tok: Token, filename: str) -> ast.Num:
    """A NUMBER token (maybe with a unit) -> Num in base units; unknown unit is an error."""
    span = _span_of(tok, filename)
    match = _NUMBER_PARTS.match(str(tok))
    assert match is not None  # the grammar's NUMBER regex guarantees this shape
    digits, unit = match.group(1), match.group(2)
    text = str(tok)
    value = parse_number(digits)
    if not unit:
        return ast.Num(value, None, text, span)
    found = unit_factor(unit)
    if found is None:
        hint = did_you_mean(unit, UNITS) or "units: B, KiB..TiB, KB..TB, TB/s, TFLOP/s, ns, us, ms, s, k"
        raise fail(span, f"unknown unit '{unit}'", hint)
    factor, dim = found
    return ast.Num(value * factor, dim, text, span)


# Example snippets for friendlier messages, matched against the parser state.
_EXAMPLES = {
    "missing '=' or ':' after a name (a statement is `name = value` or `role: dtype`)":
        ["model m { x 1 }", "model m { x }", "model m { x = 1 y }"],
    "an expression is incomplete": ["model m { x = }", "model m { x = 1 + }",
                                    "model m { x = (1 }", "model m { x = f(1, }"],
    "a block is not closed with '}'": ["model m {", "model m { repeat 2 {"],
    "expected a model, hardware or import at the top level": ["x = 1", "foo"],
}


def _syntax_error(exc: UnexpectedInput, text: str, filename: str) -> SpecError:
    """Turn a Lark exception into a located SpecError with a hint."""
    line, col = getattr(exc, "line", 1), getattr(exc, "column", 1)
    if isinstance(exc, UnexpectedEOF) or line is None or line < 1:
        line, col = _end_position(text)
    span = Span(filename, line, col, line, col + _token_width(exc))
    what = _describe(exc)
    hint = None
    try:
        hint = exc.match_examples(_lark().parse, _EXAMPLES, use_accepts=True)
    except Exception:  # match_examples is best effort only
        hint = None
    return fail(span, f"syntax error: {what}", hint or _expected_hint(exc))


def _describe(exc: UnexpectedInput) -> str:
    """What was found where something else was expected."""
    if isinstance(exc, UnexpectedCharacters):
        return f"unexpected character '{exc.char}'"
    if isinstance(exc, UnexpectedToken):
        if exc.token.type == "$END":
            return "unexpected end of file"
        return f"unexpected '{exc.token}'"
    return "unexpected end of file"


def _token_width(exc: UnexpectedInput) -> int:
    tok = getattr(exc, "token", None)
    return max(1, len(str(tok))) if tok is not None and tok.type != "$END" else 1


def _end_position(text: str) -> tuple[int, int]:
    lines = text.splitlines() or [""]
    return len(lines), len(lines[-1]) + 1


_TERMINAL_WORDS = {"EQUAL": "'='", "COLON": "':'", "RBRACE": "'}'", "LBRACE": "'{'",
                   "RPAR": "')'", "LPAR": "'('", "NAME": "a name", "NUMBER": "a number",
                   "STRING": "a string", "COMMA": "','", "MINUS": "'-'"}


def _expected_hint(exc: UnexpectedInput) -> str | None:
    """'expected one of ...' in words, from the parser's acceptable terminals."""
    expected = getattr(exc, "expected", None) or getattr(exc, "allowed", None)
    if not expected:
        return None
    words = sorted({_TERMINAL_WORDS.get(t, t.lower().strip("_")) for t in expected})
    return "expected " + ", ".join(words[:6])
