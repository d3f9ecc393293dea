"""Closed forms -> one straight-line numpy function, generated from a fixed vocabulary.

This replaces `sympy.lambdify` on the evaluation path. lambdify prints every form
through sympy's general code printer and runs a full common-subexpression search; a
model's forms are a DAG in which the same sub-expression object recurs (an op's time in
the step total, the step total in tokens/s), so naming each node used more than once is
all the sharing there is to find, and printing from a table of node classes is several
times faster (see bench/).

The generated source is built only from: argument names `a0, a1, ...` (inputs, by
position), temporaries `t0, t1, ...`, float literals printed from exact rationals, and
the numpy functions of `NP_FUNCTIONS` (compiler/backend/generated.py). No name or text from a spec or the command line ever
reaches it, and compiler/backend/generated.py tokenizes the source and refuses any other
identifier before it is compiled.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import sympy

from infest.compiler.backend.generated import NP_FUNCTIONS, load_functions

MAX_INLINE_DEPTH = 24   # deeper sub-expressions get a temporary: Python's parser nests ~200
_RELATIONS = {"GreaterThan": ">=", "StrictGreaterThan": ">", "LessThan": "<=",
              "StrictLessThan": "<", "Equality": "==", "Unequality": "!="}
_CALLS = {"floor": "floor", "ceiling": "ceil", "exp": "exp", "Abs": "abs", "sign": "sign",
          "Mod": "mod", "Not": "logical_not", "log": "log"}
_FOLDS = {"Max": "maximum", "Min": "minimum", "And": "logical_and", "Or": "logical_or"}
# The printer's own calls: the loader's vocabulary must allow every one of them.
assert {*_CALLS.values(), *_FOLDS.values(), "select", "power", "sqrt", "where"} <= NP_FUNCTIONS


@dataclass
class _Text:
    """A printed node: its source, how deep its inline nesting is, whether it is
    atomic (a name, literal or call needs no parentheses) and whether it is a bare name
    or literal (never worth a temporary)."""

    src: str
    depth: int
    atomic: bool
    leaf: bool = False

    def wrapped(self) -> str:
        """Parenthesised unless atomic."""
        return self.src if self.atomic else f"({self.src})"


class _Printer:
    """Prints a DAG of sympy nodes as assignments; shared nodes become temporaries."""

    def __init__(self, args: Sequence[sympy.Symbol], exprs: Sequence[sympy.Basic]) -> None:
        self.names = {s: _Text(f"a{i}", 0, True, True) for i, s in enumerate(args)}
        self.uses = _use_counts(exprs)
        self.lines: list[str] = []
        self.done: dict[sympy.Basic, _Text] = {}

    def print_all(self, exprs: Sequence[sympy.Basic]) -> list[str]:
        """Source of every expression, children printed first (iteratively)."""
        for expr in exprs:
            for node in _postorder(expr, self.done):
                self.done[node] = self._store(node, self._print(node))
        return [self.done[e].src for e in exprs]

    def _store(self, node: sympy.Basic, text: _Text) -> _Text:
        if text.leaf or (self.uses.get(node, 0) < 2 and text.depth < MAX_INLINE_DEPTH):
            return text
        name = f"t{len(self.lines)}"
        self.lines.append(f"    {name} = {text.src}")
        return _Text(name, 0, True, True)

    def _print(self, node: sympy.Basic) -> _Text:
        if node in self.names:
            return self.names[node]
        if node.is_Number or node in (sympy.S.true, sympy.S.false) or node.is_NumberSymbol:
            return _Text(_number(node), 0, True, True)
        method = getattr(self, "_print_" + type(node).__name__, None)
        for cls in type(node).__mro__ if method is None else ():
            method = getattr(self, "_print_" + cls.__name__, None)
            if method is not None:
                break
        if method is None:
            raise TypeError(f"codegen: no rule for {type(node).__name__}")
        return method(node)

    def _kids(self, node: sympy.Basic) -> list[_Text]:
        return [self.done[a] for a in node.args]

    def _op(self, parts: list[_Text], sep: str) -> _Text:
        depth = 1 + max(p.depth for p in parts)
        return _Text(sep.join(p.wrapped() for p in parts), depth, False)

    def _call(self, fn: str, parts: list[_Text]) -> _Text:
        depth = 1 + max((p.depth for p in parts), default=0)
        return _Text(f"np.{fn}({', '.join(p.src for p in parts)})", depth, True)

    def _print_Add(self, node: sympy.Add) -> _Text:
        return self._op(self._kids(node), " + ")

    def _print_Mul(self, node: sympy.Mul) -> _Text:
        num = [self.done[a] for a in node.args if not _is_reciprocal(a)]
        den = [self.done[a.base] if a.exp == -1 else self._power(a.base, -a.exp)
               for a in node.args if _is_reciprocal(a)]
        top = self._op(num, "*") if num else _Text("1.0", 0, True)
        return self._op([top, self._op(den, "*")], "/") if den else top

    def _print_Pow(self, node: sympy.Pow) -> _Text:
        return self._power(node.base, node.exp)

    def _power(self, base: sympy.Basic, exp: sympy.Basic) -> _Text:
        if base not in self.done:  # 1/x**k in a Mul: the base is printed, x**k is not
            self.done[base] = self._store(base, self._print(base))
        b = self.done[base]
        if exp == sympy.Rational(1, 2):
            return self._call("sqrt", [b])
        if exp.is_Integer:
            return _Text(f"{b.wrapped()}**{int(exp)}", b.depth + 1, False)
        e = self.done.get(exp) or _Text(_number(exp), 0, True, True)
        return self._call("power", [b, e])

    def _print_Function(self, node: sympy.Function) -> _Text:
        name = type(node).__name__
        if name in _CALLS:
            return self._call(_CALLS[name], self._kids(node))
        if name in _FOLDS:
            return self._fold(_FOLDS[name], self._kids(node))
        raise TypeError(f"codegen: no rule for function {name}")

    _print_Boolean = _print_Function   # And, Or, Not
    _print_MinMaxBase = _print_Function  # Max, Min (and compiler.functions.Max)

    def _fold(self, fn: str, parts: list[_Text]) -> _Text:
        acc = parts[0]
        for part in parts[1:]:
            acc = self._call(fn, [acc, part])
        return acc

    def _print_Relational(self, node: sympy.Basic) -> _Text:
        op = _RELATIONS[type(node).__name__]
        return self._op(self._kids(node), f" {op} ")

    def _print_Piecewise(self, node: sympy.Piecewise) -> _Text:
        values = [self.done[v] for v, _ in node.args]
        conds = [self.done[c] for _, c in node.args]
        depth = 2 + max(p.depth for p in values + conds)
        text = (f"np.select([{', '.join(c.src for c in conds)}], "
                f"[{', '.join(v.src for v in values)}], default=nan)")
        return _Text(text, depth, True)

    def _print_ITE(self, node: sympy.ITE) -> _Text:
        return self._call("where", self._kids(node))

    def _print_ExprCondPair(self, node: sympy.Basic) -> _Text:
        return _Text("None", 0, True, True)  # printed through its Piecewise


def _is_reciprocal(node: sympy.Basic) -> bool:
    return node.is_Pow and node.exp.is_Integer and node.exp < 0


def _number(node: sympy.Basic) -> str:
    """A literal: exact integers as ints (as Python would), everything else as the
    correctly rounded float; booleans and constants by name."""
    if node is sympy.S.true or node is sympy.S.false:
        return repr(bool(node))
    if node.is_Integer and abs(int(node)) < 2**53:
        return repr(int(node)) if node >= 0 else f"({int(node)})"
    value = float(node)
    if value != value:
        return "nan"
    if value in (float("inf"), float("-inf")):
        return "inf" if value > 0 else "(-inf)"
    return repr(value) if value >= 0 else f"({value!r})"


def _postorder(root: sympy.Basic, done: dict) -> list[sympy.Basic]:
    """Nodes under root not yet printed, children before parents, without recursion."""
    order: list[sympy.Basic] = []
    seen: set = set()
    stack: list[tuple[sympy.Basic, bool]] = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        if node in done or (node in seen and not expanded):
            continue
        if expanded:
            order.append(node)
            continue
        seen.add(node)
        stack.append((node, True))
        stack.extend((a, False) for a in node.args)
    return order


def _use_counts(exprs: Sequence[sympy.Basic]) -> dict[sympy.Basic, int]:
    """How many parents (and roots) refer to each node of the DAG."""
    counts: dict[sympy.Basic, int] = {}
    stack = list(exprs)
    while stack:
        node = stack.pop()
        counts[node] = counts.get(node, 0) + 1
        if counts[node] == 1:
            stack.extend(node.args)
    return counts


def numpy_source(args: Sequence[sympy.Symbol], exprs: Sequence[sympy.Basic],
                 name: str = "forms") -> str:
    """The source of `def <name>(a0, a1, ...)` returning a tuple of every expression."""
    printer = _Printer(args, exprs)
    results = printer.print_all(exprs)
    params = ", ".join(f"a{i}" for i in range(len(args)))
    body = printer.lines + [f"    return ({', '.join(results)},)"]
    return f"def {name}({params}):\n" + "\n".join(body) + "\n"


def compile_forms(args: Sequence[sympy.Symbol],
                  exprs: Sequence[sympy.Basic]) -> Callable[..., tuple[Any, ...]]:
    """A numpy function of the args (scalars or broadcastable arrays) returning every
    expression's value, in order."""
    return load_functions(numpy_source(args, exprs))["forms"]
