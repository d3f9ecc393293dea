"""One canonical sympy Symbol per name, so every stage builds the same expressions.

B (batch), N (cached context tokens) and T (new tokens per sequence) are positive
integers; model params and hardware quantities are positive reals.
"""
from __future__ import annotations

from functools import lru_cache

import sympy

BUILTINS = ("B", "N", "T")
BUILTIN_DOC = {
    "B": "sequences in the batch",
    "N": "context: tokens already in each sequence's KV cache",
    "T": "new tokens per sequence in this step (decode: 1)",
}


@lru_cache(maxsize=None)
def sym(name: str) -> sympy.Symbol:
    """The Symbol for `name` (B, N, T are positive integers; the rest positive)."""
    if name in BUILTINS:
        return sympy.Symbol(name, positive=True, integer=True)
    return sympy.Symbol(name, positive=True)


B, N, T = sym("B"), sym("N"), sym("T")
