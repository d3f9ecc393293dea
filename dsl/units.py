"""Units on literals: every value is stored in base units (bytes, B/s, FLOP/s, FLOP, s, Hz);
integer-op rates (`TOPS`, `TOP/s`) are stored as FLOP/s, one op each.

Decimal prefixes are powers of 1000 (GB = 1e9 bytes, TB/s = 1e12 bytes/s), binary
ones powers of 1024 (GiB = 2^30 bytes). A bare `k` on a count is 1024, because
context lengths are quoted that way (32k context = 32768 tokens).
"""
from __future__ import annotations

import re
from fractions import Fraction

BYTES, BANDWIDTH, FLOPS_RATE, FLOP_COUNT, TIME, COUNT, FREQUENCY = (
    "bytes", "bytes/s", "FLOP/s", "FLOP", "s", "count", "Hz")

_DECIMAL = {"": 1, "K": 10**3, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15}
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50}


def _build_table() -> dict[str, tuple[Fraction, str]]:
    """Every accepted unit spelling -> (factor to base units, dimension)."""
    table: dict[str, tuple[Fraction, str]] = {}
    for prefix, factor in {**_DECIMAL, **_BINARY}.items():
        f = Fraction(factor)
        table[f"{prefix}B"] = (f, BYTES)
        table[f"{prefix}B/s"] = (f, BANDWIDTH)
    for prefix, factor in _DECIMAL.items():
        f = Fraction(factor)
        # Integer ops a second (`624 TOPS`, datasheets' int8 peaks) count as operations
        # in the same rate as FLOP/s: 1 TOPS = 1e12 ops/s, and flops_int8 takes either.
        for spelling in ("FLOP/s", "FLOPS", "FLOPs/s", "OP/s", "OPS"):
            table[f"{prefix}{spelling}"] = (f, FLOPS_RATE)
        table[f"{prefix}FLOP"] = (f, FLOP_COUNT)
        table[f"{prefix}Hz"] = (f, FREQUENCY)     # a GPU's clock: 1980 MHz
    table.update({"ns": (Fraction(1, 10**9), TIME), "us": (Fraction(1, 10**6), TIME),
                  "ms": (Fraction(1, 10**3), TIME), "s": (Fraction(1), TIME)})
    table.update({"k": (Fraction(1024), COUNT), "K": (Fraction(1024), COUNT),
                  "M": (Fraction(1024**2), COUNT)})
    return table


UNITS: dict[str, tuple[Fraction, str]] = _build_table()


MAX_LITERAL_DIGITS = 100    # digits in one literal's mantissa
MAX_LITERAL_EXPONENT = 100  # |e| in `1e-6`; values above 1e30 are refused later anyway

_LITERAL = re.compile(r"[+-]?(?P<mantissa>[\d.]+)(?:[eE](?P<exp>[+-]?\d+))?")


def parse_number(text: str) -> Fraction:
    """Exact value of a decimal literal such as `3.35`, `1e-6` or `14_336`.

    The digits and the exponent are bounded before any number is built: `Fraction` of
    `1e999999999` would compute a gigantic power, and a 100,000-digit literal passes
    Python's int-from-string limit. Raises ValueError naming the limit.
    """
    plain = text.replace("_", "")
    match = _LITERAL.fullmatch(plain)
    if match is None:
        raise ValueError(f"not a number: {text!r}")
    digits = sum(c.isdigit() for c in match["mantissa"])
    if digits > MAX_LITERAL_DIGITS:
        raise ValueError(f"literal has {digits} digits, more than MAX_LITERAL_DIGITS = "
                         f"{MAX_LITERAL_DIGITS}")
    exp = (match["exp"] or "0").lstrip("+-").lstrip("0")
    if len(exp) > 3 or int(exp or 0) > MAX_LITERAL_EXPONENT:
        raise ValueError(f"exponent of {text[:20]!r} is beyond MAX_LITERAL_EXPONENT = "
                         f"{MAX_LITERAL_EXPONENT}")
    return Fraction(plain)


def unit_factor(unit: str) -> tuple[Fraction, str] | None:
    """(factor, dimension) for a unit spelling, or None if unknown."""
    return UNITS.get(unit)


_VALUE = re.compile(r"^\s*([+-]?(?:\d[\d_]*(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*([A-Za-z/]*)\s*$")


def parse_value(text: str) -> tuple[Fraction, str | None]:
    """A command-line value such as `4TB/s`, `32k` or `0.5` -> (base-unit value, dimension).

    Raises ValueError with a readable message on anything else (nothing is evaluated).
    """
    match = _VALUE.match(text)
    if not match:
        raise ValueError(f"not a number with an optional unit: {text!r}")
    value = parse_number(match.group(1))
    if not match.group(2):
        return value, None
    found = unit_factor(match.group(2))
    if found is None:
        raise ValueError(f"unknown unit {match.group(2)!r} in {text!r}")
    return value * found[0], found[1]
