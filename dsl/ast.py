"""The .arch abstract syntax tree: frozen dataclasses, each with the Span it came from."""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Union

from infest.dsl.errors import Span


@dataclass(frozen=True)
class Num:
    """A numeric literal in base units (`80 GiB` -> 85899345920, dimension 'bytes')."""

    value: Fraction
    dimension: str | None
    text: str
    span: Span


@dataclass(frozen=True)
class Name:
    """A reference to a param, tensor, dtype or built-in symbol."""

    id: str
    span: Span


@dataclass(frozen=True)
class BinOp:
    """An arithmetic operation: one of + - * / % ^."""

    op: str
    left: "Expr"
    right: "Expr"
    span: Span


@dataclass(frozen=True)
class Neg:
    """Unary minus."""

    operand: "Expr"
    span: Span


@dataclass(frozen=True)
class PosArg:
    """A positional call argument."""

    value: "Expr"
    span: Span


@dataclass(frozen=True)
class DimsArg:
    """A `d_in -> d_out` call argument."""

    d_in: "Expr"
    d_out: "Expr"
    span: Span


@dataclass(frozen=True)
class KwArg:
    """A `name = value` call argument."""

    name: str
    value: "Expr"
    span: Span


Arg = Union[PosArg, DimsArg, KwArg]


@dataclass(frozen=True)
class Call:
    """`func(args...)`: an op (embed, linear, ...) or a math function (min, ceil, ...)."""

    func: str
    args: tuple[Arg, ...]
    span: Span
    func_span: Span


Expr = Union[Num, Name, BinOp, Neg, Call]


@dataclass(frozen=True)
class Assign:
    """`name = expr [group g] [{ body }]`: a param, or an op bound to a name."""

    target: str
    value: Expr
    group: str | None
    body: tuple["Stmt", ...] | None
    span: Span
    target_span: Span


@dataclass(frozen=True)
class DtypeDecl:
    """`weights: bf16`, `kv: fp8`, `act: bf16`, `math: bf16`, or `weights: bits = 4.25`."""

    role: str
    dtype: str
    bits: Num | None
    span: Span
    dtype_span: Span


@dataclass(frozen=True)
class Repeat:
    """`repeat COUNT [group g] { body }`: the body's costs multiplied, never unrolled."""

    count: Expr
    group: str | None
    body: tuple["Stmt", ...]
    span: Span


@dataclass(frozen=True)
class GroupStmt:
    """A bare `group g` line: later ops in this block belong to g."""

    name: str
    span: Span


@dataclass(frozen=True)
class LayerDef:
    """`layer name(a, b) { body }`: a block of ops used like an op, `y = name(x, ...)`."""

    name: str
    params: tuple[str, ...]
    body: tuple["Stmt", ...]
    span: Span
    name_span: Span


@dataclass(frozen=True)
class Split:
    """`split g1, g2 over tp [by all_to_all]`: ops of these groups are sharded over an axis."""

    groups: tuple[str, ...]
    axis: str
    by: str | None
    span: Span


@dataclass(frozen=True)
class PolicyDef:
    """`policy name { split ... }`: a named way to spread the model over several GPUs."""

    name: str
    splits: tuple[Split, ...]
    span: Span
    name_span: Span


@dataclass(frozen=True)
class FuseRef:
    """One member of a fusion: a binding of the block, or `binding.kind` for an op
    nested in that binding's call (`d.silu_mul`)."""

    binding: str
    kind: str | None
    span: Span

    def __str__(self) -> str:
        return self.binding if self.kind is None else f"{self.binding}.{self.kind}"


@dataclass(frozen=True)
class FuseDef:
    """`fuse name { a, b.kind, c }`: ops that a fusing engine runs as one kernel."""

    name: str
    members: tuple[FuseRef, ...]
    span: Span
    name_span: Span


Stmt = Union[Assign, DtypeDecl, Repeat, GroupStmt, LayerDef, PolicyDef, FuseDef]


@dataclass(frozen=True)
class Model:
    """`model name "title" { ... }`."""

    name: str
    title: str
    body: tuple[Stmt, ...]
    span: Span
    name_span: Span


@dataclass(frozen=True)
class HwField:
    """One `field = value` line of a hardware block."""

    name: str
    value: Expr
    span: Span


@dataclass(frozen=True)
class Hardware:
    """`hardware name "title" { field = value ... }`."""

    name: str
    title: str
    fields: tuple[HwField, ...]
    span: Span
    name_span: Span


@dataclass(frozen=True)
class Import:
    """`import "other.arch"`: path relative to the importing file."""

    path: str
    span: Span


@dataclass(frozen=True)
class SpecFile:
    """One parsed .arch file."""

    path: str
    items: tuple[Union[Import, Model, Hardware], ...]
