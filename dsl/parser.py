"""Parse .arch text into the AST, turning Lark's exceptions into located diagnostics.

The parse tree's nesting is measured (iteratively) and bounded before it is transformed,
so no later stage that walks the AST recursively (elaboration, sympy) can run out of
stack: a located error names the limit instead.
"""
from __future__ import annotations

import re
from functools import lru_cache
from typing import Any, Iterator

from lark import Lark, Token, Transformer_NonRecursive, Tree, v_args
from lark.exceptions import (UnexpectedCharacters, UnexpectedEOF, UnexpectedInput,
                             UnexpectedToken, VisitError)

from infest.dsl import ast
from infest.dsl.errors import (Span, SpecError, did_you_mean, fail, printable, register_source,
                               source_lines)
from infest.dsl.tables import grammar_text, load_parser
from infest.dsl.units import parse_number, unit_factor, UNITS

_NUMBER_PARTS = re.compile(r"([\d_]*\.?[\d_]+(?:[eE][+-]?\d+)?)([ \t]*)(.*)")

MAX_BLOCK_DEPTH = 64   # nested model / repeat / layer / moe blocks
MAX_EXPR_DEPTH = 100   # nested operators and calls in one expression (a+b+c is 2 deep)
_BLOCKS = {"model", "hardware", "block"}
_EXPRS = {"add", "sub", "mul", "div", "mod", "pow", "neg", "call"}


class _Newlines:
    """Postlexer: inside parentheses a newline is whitespace, so calls and wrapped
    expressions continue across lines; a closing '}' ends its statement as a newline
    would (`repeat 2 { ... } x = add(x, x)`)."""

    always_accept = ("_NL",)

    def process(self, stream: Iterator[Token]) -> Iterator[Token]:
        """Drop _NL tokens while a '(' is open; add one after each '}'."""
        depth = 0
        for tok in stream:
            depth = max(0, depth + (tok.type == "LPAR") - (tok.type == "RPAR"))
            if tok.type == "_NL" and depth:
                continue
            yield tok
            if tok.type == "RBRACE":
                yield Token.new_borrow_pos("_NL", "", tok)


@lru_cache(maxsize=1)
def _lark() -> Lark:
    """The LALR parser, built once per process from tables shipped in the package (plain
    JSON, see dsl/tables.py). Deliberately not Lark's own cache: it unpickles a
    predictably named file in the shared temp folder (code execution for anyone who can
    write there)."""
    return load_parser(grammar_text(), _Newlines())


def parse(text: str, filename: str = "<spec>") -> ast.SpecFile:
    """Parse one file's text; raise SpecError with file:line:col on bad input."""
    register_source(filename, text)
    try:
        tree = _lark().parse(text)
    except UnexpectedInput as exc:
        raise _syntax_error(exc, text, filename) from None
    _check_depth(tree, filename)
    try:
        items = _ToAst(filename).transform(tree)
    except VisitError as exc:  # a rule method raised SpecError: surface it unwrapped
        if isinstance(exc.orig_exc, SpecError):
            raise exc.orig_exc from None
        raise
    return ast.SpecFile(filename, tuple(items))


def _check_depth(tree: Tree, filename: str) -> None:
    """Refuse blocks nested past MAX_BLOCK_DEPTH and expressions past MAX_EXPR_DEPTH,
    walking the tree with an explicit stack (a recursive walk would itself overflow)."""
    stack: list[tuple[Tree, int, int]] = [(tree, 0, 0)]
    while stack:
        node, blocks, exprs = stack.pop()
        blocks += node.data in _BLOCKS
        exprs += node.data in _EXPRS
        if blocks > MAX_BLOCK_DEPTH:
            raise fail(_span_of(node.meta, filename), f"blocks nested deeper than "
                       f"MAX_BLOCK_DEPTH = {MAX_BLOCK_DEPTH}", "flatten the nested repeats")
        if exprs > MAX_EXPR_DEPTH:
            raise fail(_span_of(node.meta, filename), f"expression nested deeper than "
                       f"MAX_EXPR_DEPTH = {MAX_EXPR_DEPTH}",
                       "split it into named params (a long sum counts one level per term)")
        stack.extend((c, blocks, exprs) for c in node.children if isinstance(c, Tree))


def _span_of(meta_or_tok: Any, filename: str) -> Span:
    """Span of a Lark token or tree meta."""
    m = meta_or_tok
    return Span(filename, m.line, m.column, m.end_line, m.end_column)


class _ToAst(Transformer_NonRecursive):
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

    @v_args(meta=True)
    def fuse_def(self, meta: Any, children: list) -> ast.FuseDef:
        name, *refs = children
        return ast.FuseDef(str(name), tuple(r for r in refs if isinstance(r, ast.FuseRef)),
                           self._span(meta), _span_of(name, self.file))

    @v_args(meta=True)
    def fuse_ref(self, meta: Any, children: list) -> ast.FuseRef:
        kind = str(children[1]) if len(children) > 1 else None
        return ast.FuseRef(str(children[0]), kind, self._span(meta))

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
        return name, printable(str(rest[0])[1:-1]), [c for c in rest[1:] if not isinstance(c, Token)]
    return name, None, [c for c in rest if not isinstance(c, Token)]


def _number(tok: Token, filename: str) -> ast.Num:
    """A NUMBER token (maybe with a unit) -> Num in base units; unknown unit is an error."""
    span = _span_of(tok, filename)
    match = _NUMBER_PARTS.match(str(tok))
    assert match is not None  # the grammar's NUMBER regex guarantees this shape
    digits, space, unit = match.groups()
    text = str(tok)
    try:
        value = parse_number(digits)
    except ValueError as exc:
        raise fail(span, str(exc), "write large values with a unit or a smaller exponent") from None
    if space and unit == "B":  # `2 B` looks like `2 * B`, the batch
        raise fail(span, f"'{text}' is ambiguous: {digits} bytes, or {digits} times the batch B?",
                   f"write {digits}B for bytes or {digits} * B for the batch")
    if not unit:
        return ast.Num(value, None, text, span)
    found = unit_factor(unit)
    if found is None:
        hint = did_you_mean(unit, UNITS) or "units: B, KiB..TiB, KB..TB, TB/s, TFLOP/s, ns, us, ms, s, k"
        raise fail(span, f"unknown unit '{unit}'", hint)
    factor, dim = found
    return ast.Num(value * factor, dim, text, span)


# Example snippets for friendlier messages, matched against the parser's current state
# (not its whole stack, which grows with every statement before the error).
_EXAMPLES = {
    "missing '=' or ':' after a name (a statement is `name = value` or `role: dtype`)":
        ["model m { x 1 }", "model m { x }", "model m { x = 1 y }"],
    "an expression is incomplete": ["model m { x = }", "model m { x = 1 + }",
                                    "model m { x = (1 }", "model m { x = f(1, }"],
    "a block is not closed with '}'": ["model m {", "model m { repeat 2 {"],
    "expected a model, hardware or import at the top level": ["x = 1", "foo"],
    "a statement ends at the end of its line: wrap a long expression in parentheses "
    "to continue it": ["model m {\n x = 1\n + 2 }", "model m {\n x = 1\n * 2 }",
                       "model m {\n x = 1\n / 2 }"],
}
_SAME_LINE = "two statements on one line need a ';' between them"


def _syntax_error(exc: UnexpectedInput, text: str, filename: str) -> SpecError:
    """Turn a Lark exception into a located SpecError with a hint."""
    line, col = getattr(exc, "line", 1), getattr(exc, "column", 1)
    if isinstance(exc, UnexpectedEOF) or line is None or line < 1:
        line, col = _end_position(text)
    span = Span(filename, line, col, line, col + _token_width(exc))
    what = _describe(exc)
    return fail(span, f"syntax error: {what}", _example_hint(exc) or _expected_hint(exc))


def _example_hint(exc: UnexpectedInput) -> str | None:
    """The label of the example that fails in the same parser state, preferring one that
    fails on the same kind of token."""
    here = _failure(exc)
    if here[1] == "NAME" and "_NL" in getattr(exc, "expected", ()):
        return _SAME_LINE  # a statement could have ended here, and a name follows
    fallback = None
    for label, texts in _EXAMPLES.items():
        for text in texts:
            try:
                _lark().parse(text)
            except UnexpectedInput as other:
                there = _failure(other)
                if here[0] is not None and there == here:
                    return label
                fallback = fallback or (label if there[0] == here[0] else None)
    return fallback if here[0] is not None else None


def _failure(exc: UnexpectedInput) -> tuple[int | None, str | None]:
    """(LR state, token type) where a parse failed; state None for lexer errors."""
    state = getattr(exc, "state", None)
    token = getattr(exc, "token", None)
    position = state.position if hasattr(state, "position") else None
    return position, token.type if token is not None else None


def _describe(exc: UnexpectedInput) -> str:
    """What was found where something else was expected."""
    if isinstance(exc, UnexpectedCharacters):
        return f"unexpected character '{exc.char}'"
    if isinstance(exc, UnexpectedToken):
        if exc.token.type == "$END":
            return "unexpected end of file"
        if exc.token.type == "_NL":
            return "unexpected end of line"
        return f"unexpected '{exc.token}'"
    return "unexpected end of file"


def _token_width(exc: UnexpectedInput) -> int:
    tok = getattr(exc, "token", None)
    return max(1, len(str(tok))) if tok is not None and tok.type not in ("$END", "_NL") else 1


def _end_position(text: str) -> tuple[int, int]:
    lines = source_lines(text.removesuffix("\n")) if text else [""]
    return len(lines), len(lines[-1]) + 1


_TERMINAL_WORDS = {"EQUAL": "'='", "COLON": "':'", "RBRACE": "'}'", "LBRACE": "'{'",
                   "RPAR": "')'", "LPAR": "'('", "NAME": "a name", "NUMBER": "a number",
                   "STRING": "a string", "COMMA": "','", "MINUS": "'-'",
                   "_NL": "a new line", "SEMICOLON": "';'"}


def _expected_hint(exc: UnexpectedInput) -> str | None:
    """'expected one of ...' in words, from the parser's acceptable terminals."""
    expected = getattr(exc, "expected", None) or getattr(exc, "allowed", None)
    if not expected:
        return None
    words = sorted({_TERMINAL_WORDS.get(t, t.lower().strip("_")) for t in expected})
    return "expected " + ", ".join(words[:6])
