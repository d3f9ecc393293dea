"""Hardware blocks: fields in base units, checked against the unit each field expects."""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Mapping

from infest.dsl.errors import Collector, Span, SpecError, fail
from infest.dsl.units import BANDWIDTH, BYTES, COUNT, FLOPS_RATE, TIME
from infest.compiler.load.estimate_fields import ESTIMATE_DEFAULTS, ESTIMATE_FIELDS

# Known fields and the dimension of their unit; others may carry any unit.
FIELD_DOC = {
    "mem_capacity": ("device memory capacity", BYTES),
    "mem_bw": ("device memory (HBM) bandwidth", BANDWIDTH),
    "launch_overhead": ("smallest time any kernel takes", TIME),
    "sms": ("streaming multiprocessors", COUNT),
    "link_bw": ("GPU-to-GPU link inside a node, one GPU, one direction", BANDWIDTH),
    "link_latency": ("time per collective call inside a node", TIME),
    "gpus_per_node": ("GPUs joined by the link", COUNT),
    "net_bw": ("network between nodes, one GPU, one direction", BANDWIDTH),
    "net_latency": ("time per collective call between nodes", TIME),
    "host_bw": ("GPU-to-host (CPU memory) link, one direction", BANDWIDTH),
    "host_capacity": ("host (CPU) memory for offload", BYTES),
    "eff_mem": ("achievable share of mem_bw (estimate)", COUNT),
    "eff_flops": ("achievable share of every flops_* peak (estimate)", COUNT),
    "eff_link": ("achievable share of link and network speed (estimate)", COUNT),
    **{f.name: (f.doc + " (estimate)", f.dimension) for f in ESTIMATE_FIELDS},
}
# Efficiencies: achievable ceiling / datasheet ceiling, in (0, 1]. The estimate divides
# each bound term by its efficiency (compiler/core/terms.py), so it never beats the bound. A
# hardware spec or --set may give measured values; without them these defaults apply:
# - eff_mem 0.8: the HBM derate performance tools in use apply; a pure device-to-device
#   copy reaches more (~4.3 of 4.8 TB/s = 0.9 measured on one H200 through PyTorch), a
#   decode step's many smaller reads less. 0.8 is an assumption between the two.
# - eff_flops 0.7: an 8192^3 bf16 matmul reaches ~790 of 989 TFLOP/s (0.8, measured on one
#   H200, random data); inference GEMMs are smaller and skinnier. 0.7 is an assumption.
# - eff_link 0.8: an assumption: NCCL ring all-reduce bus bandwidth on NVLink reaches
#   roughly 0.8 of the link's datasheet speed at large messages; it also derates the
#   per-call latency (the whole collective time is divided by it).
# A spec that carries a measured ceiling beside the datasheet one (mem_bw_measured,
# flops_bf16_measured) gets measured / datasheet instead; an eff_* field wins over both.
# `infest calibrate` fits all three to measured step times.
EFFICIENCIES = {"eff_mem": Fraction(4, 5), "eff_flops": Fraction(7, 10),
                "eff_link": Fraction(4, 5)}
MEASURED = {"eff_mem": ("mem_bw_measured", "mem_bw"),
            "eff_flops": ("flops_bf16_measured", "flops_bf16")}
# Fields a what-if may set to 0 (one source of truth for hardware files and --set): fixed
# per-kernel and per-message costs, and the offload inputs (no expert resident, no measured
# hits: compiler/passes/offload.py). Bandwidths, peaks and capacities divide or bound, so they
# stay positive.
MAY_BE_ZERO = frozenset({"launch_overhead", "link_latency", "net_latency", "gpu_experts",
                         "hit_rate"} | {f.name for f in ESTIMATE_FIELDS if f.may_be_zero})
# Shares in (0, 1]: the efficiencies above and the estimate's own (eff_attn).
SHARES = frozenset(EFFICIENCIES) | {f.name for f in ESTIMATE_FIELDS if f.share}
FIELD_DIMENSIONS = {name: dim for name, (_, dim) in FIELD_DOC.items()}
REQUIRED = ("mem_capacity", "mem_bw", "launch_overhead")
_COUNT_PREFIX_HINT = ("a bare k or M is a count (1024, 1024^2); "
                      "with a unit, K/M/G are decimal (80 MB = 80e6) and Ki/Mi/Gi binary (80 MiB)")
if TYPE_CHECKING:  # the evaluator reads the field rules without the language's AST
    from infest.dsl import ast
_EXAMPLE = {BYTES: "80 GiB", BANDWIDTH: "3.35 TB/s", TIME: "4 us", FLOPS_RATE: "989 TFLOP/s"}


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
    measured / datasheet ceilings where it carries both (MEASURED), else the documented
    defaults (EFFICIENCIES, compiler/load/estimate_fields.py)."""
    out = {**EFFICIENCIES, **ESTIMATE_DEFAULTS}
    for eff, (measured, peak) in MEASURED.items():
        if measured in fields and peak in fields:
            out[eff] = min(Fraction(1), fields[measured].value / fields[peak].value)
    out.update({k: fields[k].value for k in out if k in fields})
    return out


def expected_dimension(name: str) -> str | None:
    """The unit dimension a field must have (flops_* are FLOP/s)."""
    return FLOPS_RATE if name.startswith("flops_") else FIELD_DIMENSIONS.get(name)


def may_be_zero(name: str) -> bool:
    """Whether a hardware field (or a --set of it) may be 0: a latency, not a rate."""
    return name in MAY_BE_ZERO


def field_doc(name: str) -> tuple[str, str]:
    """(description, base unit) of a hardware field."""
    if name.startswith("flops_"):
        return f"peak {name[6:]} math", "FLOP/s"
    return FIELD_DOC.get(name, (name.replace("_", " "), ""))  # dimensions are base units


def sign_rule(name: str) -> str:
    """What a field's value must be, for messages: "positive", "0 or more" or "in (0, 1]"."""
    if name in SHARES:
        return "in (0, 1]"
    return "0 or more" if may_be_zero(name) else "positive"


def in_range(name: str, value: Fraction) -> bool:
    """Whether a hardware field (or a --set of it) may take this value."""
    if name in SHARES:
        return 0 < value <= 1
    return value > 0 or (value == 0 and may_be_zero(name))


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
    errors.raise_if_any()
    return CompiledHardware(hw.name, hw.title, file, fields, hw.name_span)


def _field(f: ast.HwField, seen: dict[str, HwValue]) -> HwValue:
    if f.name in seen:
        raise fail(f.span, f"hardware field '{f.name}' is set twice")
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
                   "an efficiency is achievable / datasheet speed, e.g. eff_mem = 0.85"
                   if f.name in SHARES else None)
    return HwValue(f.value.value, got or want, f.span)
