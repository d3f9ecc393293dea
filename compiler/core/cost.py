"""The cost record of one op instance: FLOPs, bytes by kind, kernel launches (sympy)."""
from __future__ import annotations

from dataclasses import dataclass, fields

import sympy

ZERO = sympy.Integer(0)


@dataclass(frozen=True)
class Cost:
    """What one op instance does in one step. Bytes are split by what they are."""

    flops: sympy.Expr = ZERO
    weight_bytes: sympy.Expr = ZERO
    act_bytes: sympy.Expr = ZERO
    kv_bytes: sympy.Expr = ZERO
    kernels: sympy.Expr = sympy.Integer(1)
    comm_bytes: sympy.Expr = ZERO   # a collective's payload per call (over links, not HBM)

    @property
    def bytes(self) -> sympy.Expr:
        """All HBM bytes moved: weights + activations + KV cache."""
        return self.weight_bytes + self.act_bytes + self.kv_bytes

    def __add__(self, other: "Cost") -> "Cost":
        return Cost(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    def scale(self, **factors: sympy.Expr) -> "Cost":
        """A copy with named fields multiplied (e.g. flops=k for routed experts)."""
        return Cost(*(getattr(self, f.name) * factors.get(f.name, 1) for f in fields(self)))

    def replace(self, **values: sympy.Expr) -> "Cost":
        """A copy with named fields replaced."""
        return Cost(*(values.get(f.name, getattr(self, f.name)) for f in fields(self)))
