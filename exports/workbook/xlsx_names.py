"""Readable workbook formulas: a form refers to the named cells it is built from.

The closed forms of compiler/forms/model.py are built from shared parts: `total_bytes` is
`weights_bytes + kv_bytes`, `max_batch` divides the room the weights leave by the KV of
one sequence. Printed as they are, those parts repeat in full in every formula that uses
them (DeepSeek-V3's `max_batch` would repeat the whole parameter count). `Namer`
replaces each part that equals another named cell's form by that cell's name before
printing: whole subtrees by equality, and parts of a sum or product (sympy flattens
`weights + kv` into one sum) by their terms or factors.

Names are ranked smallest form first (ties: the earlier row first) and a form may only
use names ranked below its own, so no cell refers to itself, directly or through others.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import sympy


@dataclass
class Namer:
    """Named forms, ranked; `rewrite` puts their names into another form."""

    ranked: list[tuple[sympy.Basic, str]] = field(default_factory=list)
    symbols: dict[sympy.Symbol, str] = field(default_factory=dict)
    _rank: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, named: list[tuple[sympy.Basic, str]]) -> "Namer":
        """A namer over (form, name) pairs in row order; atoms and infinities are skipped
        (a symbol already prints as its input cell)."""
        usable = [(i, e, n) for i, (e, n) in enumerate(named)
                  if isinstance(e, sympy.Basic) and not e.is_Atom and e.is_finite is not False]
        usable.sort(key=lambda t: (_size(t[1]), t[0]))
        namer = cls([(e, n) for _, e, n in usable])
        namer._rank = {n: r for r, (_, n) in enumerate(namer.ranked)}
        return namer

    def rewrite(self, expr: sympy.Basic, name: str | None = None,
                free_of: frozenset[sympy.Symbol] = frozenset()) -> sympy.Basic:
        """`expr` with named parts replaced by stand-in symbols (see `symbols`); `name`:
        the cell being written, which may only use names ranked below it; `free_of`:
        symbols the cell binds to other cells (a Sweep cell's B and N), so named parts
        that use them are not this cell's."""
        limit = self._rank.get(name, len(self.ranked)) if name else len(self.ranked)
        allowed = [(e, n) for e, n in self.ranked[:limit] if not e.free_symbols & free_of]
        if not allowed:
            return expr
        return _Rewriter(self, allowed).visit(expr)

    def stand_in(self, name: str) -> sympy.Symbol:
        """The symbol that prints as `name`."""
        symbol = sympy.Dummy(name)
        self.symbols[symbol] = name
        return symbol


class _Rewriter:
    """One rewrite: exact matches first, then the largest parts of sums and products."""

    def __init__(self, namer: Namer, allowed: list[tuple[sympy.Basic, str]]) -> None:
        self.namer = namer
        self.exact = {}
        for expr, name in allowed:
            self.exact.setdefault(expr, name)
        # Largest first: a part that contains smaller named parts is named as a whole.
        self.parts = [(e, n, Counter(e.args)) for e, n in reversed(allowed)
                      if isinstance(e, (sympy.Add, sympy.Mul))]
        self.stand_ins: dict[str, sympy.Symbol] = {}
        self.memo: dict[sympy.Basic, sympy.Basic] = {}

    def visit(self, node: sympy.Basic) -> sympy.Basic:
        if node in self.memo:
            return self.memo[node]
        if node in self.exact:
            out = self._symbol(self.exact[node])
        elif node.is_Atom or not node.args:
            out = node
        elif isinstance(node, (sympy.Add, sympy.Mul)):
            out = self._associative(node)
        else:
            out = node.func(*(self.visit(a) for a in node.args))
        self.memo[node] = out
        return out

    def _associative(self, node: sympy.Basic) -> sympy.Basic:
        """Take out named sums (products) whose terms (factors) are all in this one."""
        left = Counter(node.args)
        taken = []
        for expr, name, need in self.parts:
            if type(expr) is type(node) and len(need) < len(node.args) and \
                    all(left[a] >= c for a, c in need.items()):
                left -= need
                taken.append(self._symbol(name))
        rest = [self.visit(a) for a in left.elements()]
        return node.func(*taken, *rest) if taken else node.func(*rest)

    def _symbol(self, name: str) -> sympy.Symbol:
        if name not in self.stand_ins:
            self.stand_ins[name] = self.namer.stand_in(name)
        return self.stand_ins[name]


def _size(expr: sympy.Basic) -> int:
    """Nodes in the tree (shared subtrees counted once: a cheap, monotone measure)."""
    seen: set[sympy.Basic] = set()
    stack = [expr]
    while stack:
        node = stack.pop()
        if node not in seen:
            seen.add(node)
            stack.extend(node.args)
    return len(seen)
