"""Number formats: storage bits per element and which peak FLOP/s their math runs at.

Block-scaled formats carry their scale overhead: mxfp4 is 4-bit values plus one 8-bit
scale per 32 (4.25 bits), nvfp4 one 8-bit scale per 16 (4.5 bits). `bits=X` makes an
ad-hoc format (mixed schemes, ~1.7 bits/param) whose math is upcast.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from infest.dsl import ast
from infest.dsl.errors import Span, did_you_mean, fail


@dataclass(frozen=True)
class DType:
    """A storage format: name, bits per element, and the peak its math uses if native."""

    name: str
    bits: Fraction
    peak: str | None  # hardware field suffix flops_<peak>; None = math is upcast

    @property
    def bytes(self) -> Fraction:
        """Bytes per element (exact: mxfp4 is 17/32)."""
        return self.bits / 8


_TABLE = [
    DType("fp32", Fraction(32), "fp32"), DType("tf32", Fraction(32), "tf32"),
    DType("bf16", Fraction(16), "bf16"), DType("fp16", Fraction(16), "fp16"),
    DType("fp8", Fraction(8), "fp8"), DType("fp8_e4m3", Fraction(8), "fp8"),
    DType("fp8_e5m2", Fraction(8), "fp8"), DType("int8", Fraction(8), "int8"),
    DType("int4", Fraction(4), None), DType("fp4", Fraction(4), "fp4"),
    DType("mxfp4", Fraction(17, 4), "fp4"), DType("nvfp4", Fraction(9, 2), "fp4"),
]
DTYPES: dict[str, DType] = {d.name: d for d in _TABLE}
ROLES = ("weights", "kv", "act", "math", "residual", "biases")


def custom_bits(bits: Fraction) -> DType:
    """An ad-hoc format of `bits` per element whose math runs upcast."""
    return DType(f"bits({float(bits):g})", bits, None)


def math_peak(math: DType, act: DType) -> str:
    """The flops_<suffix> an op's math runs at: the math dtype's own, else the act dtype's."""
    return math.peak or act.peak or "bf16"


# Bits of the operands each peak multiplies: a fallback only ever widens.
PEAK_BITS = {"fp4": 4, "fp8": 8, "int8": 8, "fp16": 16, "bf16": 16, "tf32": 32, "fp32": 32}
# The peak every fallback ends at: the one field no GPU may set to 0.
FALLBACK_PEAK = "bf16"


def peak_chain(math: DType, act: DType) -> tuple[str, ...]:
    """The peaks an op's math may run at, by preference: its own (math_peak); where the
    hardware computes nothing in that format (peak 0), the activation dtype's if wider
    (a narrower format the checkpoint allows: W4A8), then bf16 (weight-only: W4A16,
    W8A16, weights upcast as they stream). Never narrower than the first choice: fp32
    math does not fall back to bf16."""
    first = math_peak(math, act)
    chain = [first]
    for peak in (act.peak, FALLBACK_PEAK):
        if peak and peak not in chain and PEAK_BITS[peak] > PEAK_BITS[chain[-1]]:
            chain.append(peak)
    return tuple(chain)


def declared_dtype(stmt: "ast.DtypeDecl") -> DType:
    """The format a `weights: fp8` / `kv: bits = 4.25` line declares (role checked)."""
    if stmt.role not in ROLES:
        raise fail(stmt.span, f"unknown dtype role '{stmt.role}'",
                   did_you_mean(stmt.role, ROLES) or f"roles: {', '.join(ROLES)}")
    if stmt.bits is not None:
        if stmt.dtype != "bits":
            raise fail(stmt.dtype_span, f"'{stmt.dtype} = ...' is not a dtype", "write `bits = 4.25`")
        return bits_dtype(stmt.bits.value, stmt.bits.span)
    return dtype_named(stmt.dtype, stmt.dtype_span)


def bits_dtype(value: Fraction, span: "Span") -> DType:
    """An ad-hoc format of `value` bits per element (0 < bits <= 64)."""
    if not 0 < value <= 64:
        raise fail(span, f"bits must be between 0 and 64, not {float(value):g}")
    return custom_bits(value)


def dtype_named(name: str, span: "Span") -> DType:
    """A named format, or a located error with a did-you-mean hint."""
    if name not in DTYPES:
        raise fail(span, f"unknown dtype '{name}'",
                   did_you_mean(name, DTYPES) or f"dtypes: {', '.join(DTYPES)}, bits = X")
    return DTYPES[name]
