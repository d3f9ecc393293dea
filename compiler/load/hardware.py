"""Hardware blocks: fields in base units, checked against the unit each field expects."""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Mapping

from infest.compiler.core.keys import BUILTINS, PARALLEL
from infest.compiler.load.fields import (AT_LEAST, ESTIMATE_DEFAULTS, FIELD_TABLE, FIELDS,
                                         HARDWARE_FIELDS, MAY_BE_ZERO, MEASURED, REQUIRED,
                                         SHARES)
from infest.dsl.errors import Collector, Span, SpecError, did_you_mean, fail
from infest.dsl.units import BANDWIDTH, BYTES, COUNT, FLOPS_RATE, FREQUENCY, TIME

# The fields, their units, defaults and rules live in one table (compiler/load/fields.py);
# the names below are re-exported for the modules that check values against it.
FIELD_DIMENSIONS = {f.name: f.dimension for f in FIELD_TABLE}
_COUNT_PREFIX_HINT = ("a bare k or M is a count (1024, 1024^2); "
                      "with a unit, K/M/G are decimal (80 MB = 80e6) and Ki/Mi/Gi binary (80 MiB)")
if TYPE_CHECKING:  # the evaluator reads the field rules without the language's AST
    from infest.dsl import ast
_EXAMPLE = {BYTES: "80 GiB", BANDWIDTH: "3.35 TB/s", TIME: "4 us", FLOPS_RATE: "989 TFLOP/s",
            FREQUENCY: "1980 MHz"}


@dataclass(frozen=True)
class HwValue:
    """One hardware field in base units."""

    value: Fraction
    dimension: str | None
    span: Span


@dataclass
class CompiledHardware:
    """A checked hardware block."""

    name: str
    title: str
    file: str
    fields: dict[str, HwValue]
    span: Span


def efficiencies(fields: Mapping[str, HwValue]) -> dict[str, Fraction]:
    """A hardware's efficiencies and the estimate's other parameters: its own fields, else
    measured / datasheet ceilings where it carries both and the measured one is not blank
    (0), else the documented defaults (compiler/load/fields.py ESTIMATE_DEFAULTS)."""
    out = dict(ESTIMATE_DEFAULTS)
    for eff, (measured, peak) in MEASURED.items():
        if measured in fields and peak in fields and fields[measured].value > 0:
            out[eff] = min(Fraction(1), fields[measured].value / fields[peak].value)
    out.update({k: fields[k].value for k in out if k in fields})
    return out


def expected_dimension(name: str) -> str | None:
    """The unit dimension a field must have."""
    return FIELD_DIMENSIONS.get(name)


def may_be_zero(name: str) -> bool:
    """Whether a hardware field (or a --set of it) may be 0: a latency, a peak the GPU
    lacks, a measured ceiling not measured, an absent network (fields.py `zero`)."""
    return name in MAY_BE_ZERO


def field_doc(name: str) -> tuple[str, str]:
    """(description, base unit) of a hardware field."""
    f = FIELDS.get(name)
    return (f.doc, f.unit) if f else (name.replace("_", " "), "")


def sign_rule(name: str) -> str:
    """What a field's value must be, for messages: "positive", "0 or more", "in (0, 1]" or
    "at least 1"."""
    if name in AT_LEAST:
        return f"at least {AT_LEAST[name]}"
    if name in SHARES:
        return "in [0, 1]" if may_be_zero(name) else "in (0, 1]"
    return "0 or more" if may_be_zero(name) else "positive"


def in_range(name: str, value: Fraction) -> bool:
    """Whether a hardware field (or a --set of it) may take this value."""
    if name in AT_LEAST:
        return value >= AT_LEAST[name]
    if name in SHARES:
        return (0 <= value if may_be_zero(name) else 0 < value) and value <= 1
    return value > 0 or (value == 0 and may_be_zero(name))


def share_hint(name: str) -> str:
    """What a share is, for a value outside its range (a hardware block or a --set)."""
    if may_be_zero(name):
        return "a share: 0 (none) to 1 (all)"
    if FIELDS[name].role == "efficiency":
        return "an efficiency is achievable / datasheet speed"
    return FIELDS[name].doc


def _block_share_hint(name: str) -> str:
    example = ", e.g. eff_mem = 0.85" if FIELDS[name].role == "efficiency" else ""
    return share_hint(name) + example


def compile_hardware(hw: ast.Hardware, file: str) -> CompiledHardware:
    """Check every field: a positive literal in the unit its name implies."""
    errors = Collector()
    fields: dict[str, HwValue] = {}
    for f in hw.fields:
        try:
            fields[f.name] = _field(f, fields)
        except SpecError as exc:
            errors.add(exc)
    written = {f.name for f in hw.fields}
    for name in REQUIRED:
        if name not in written:
            errors.add(fail(hw.name_span, f"hardware '{hw.name}' lacks the field '{name}'",
                            f"add e.g. `{name} = {_EXAMPLE[FIELD_DIMENSIONS[name]]}`"))
    if fields.get("clock") and "sms" not in written:
        # sms' default (1) would put the whole GPU's loads through one SM
        errors.add(fail(fields["clock"].span, "'clock' needs 'sms': the per-SM ceiling is "
                        "sms x clock x sm_bytes_per_cycle",
                        "add e.g. `sms = 132`, or leave the clock out"))
    errors.raise_if_any()
    return CompiledHardware(hw.name, hw.title, file, fields, hw.name_span)


def _foreign(f: ast.HwField) -> SpecError:
    """A name a hardware block may not set: an input of the model or the run (B, tp,
    hit_rate, ...) or a typo. Hardware blocks set hardware fields only."""
    if f.name in FIELDS or f.name in BUILTINS + PARALLEL:
        return fail(f.span, f"'{f.name}' is not a hardware field",
                    f"it is an input of the run: --set {f.name}=...")
    return fail(f.span, f"unknown hardware field '{f.name}'",
                did_you_mean(f.name, HARDWARE_FIELDS)
                or "hardware blocks set hardware fields only (see `infest list`); "
                "set inputs such as B or tp with --set")


def _field(f: ast.HwField, seen: dict[str, HwValue]) -> HwValue:
    if f.name in seen:
        raise fail(f.span, f"hardware field '{f.name}' is set twice")
    if f.name not in HARDWARE_FIELDS:
        raise _foreign(f)
    from infest.dsl.ast import Num
    if not isinstance(f.value, Num):
        raise fail(f.value.span, "hardware fields take a literal with a unit",
                   f"e.g. {_EXAMPLE.get(expected_dimension(f.name) or '', '3.35 TB/s')}")
    want = expected_dimension(f.name)
    got = f.value.dimension
    if want and got and got != want and not (want == COUNT and got is None):
        raise fail(f.value.span, f"'{f.name}' is a {want} quantity, not {got}",
                   _COUNT_PREFIX_HINT if got == COUNT else f"e.g. {f.name} = {_EXAMPLE.get(want, '1')}")
    if not in_range(f.name, f.value.value):
        raise fail(f.value.span, f"'{f.name}' must be {sign_rule(f.name)}",
                   _block_share_hint(f.name) if f.name in SHARES else None)
    return HwValue(f.value.value, got or want, f.span)
