"""Calibration: fit the efficiencies (eff_mem, eff_flops, eff_link) to measured step times.

MEASUREMENTS.csv has a header row and one row per measurement:

    spec       a shipped model name (llama3_1_8b) or a .arch path (relative to the CSV)
    hardware   the hardware it was measured on (only rows of the --hw hardware are fitted)
    tp, ep, pp, dp   the layout (empty: 1)
    policy     a sharding policy the spec declares (empty: its default)
    engine     an engine profile: eager, graphs, vllm, sglang, trtllm, ... (empty: eager)
    phase      decode or prefill (empty: decode)
    B, N, T    global batch, cached context (prefill: prompt length), new tokens per
               sequence (empty: 1; empty in prefill, where T is the prompt)
    step_s     the measured time of one step, in seconds
    quantity   what `measured` is (empty: step_s): step_s, tpot_s (a decode row: TPOT of
               every user decoding at B = concurrency, the decode step) or ttft_s (a
               prefill row: the prefill step plus the per-request overhead)
    measured   the measured quantity in seconds (empty: step_s)
    isl, osl, concurrency   a serving run's request (optional): with all three, a tpot_s
               or ttft_s row is costed as `infest serve` costs that request (continuous
               batching, a closed loop of `concurrency` clients: other requests' prompts
               ride the decode steps; compiler/analyses/served_rows.py); B and N then only
               place the step whose floor and bound the row reports
    chunk      that run's token budget per step (empty: serve's default, DEFAULT_CHUNK)
    comm_overlap   the run's share of collectives hidden behind compute, 0 to 1 (empty:
               0; 1: two-batch overlap, compiler/core/estimate_rule.py step_estimate)
    poll_interval  a serving run's decode steps between the scheduler's looks for new
               requests, 1 or more (empty: 1; SGLang --scheduler-recv-interval k: k,
               compiler/analyses/arrivals.py)
    prompts    a ttft_s serving row's prompts in all, when its clients started at once
               (empty: the steady state): TTFT is then the mean a benchmark of that many
               prompts reports, its first wave included (serve --prompts,
               compiler/analyses/startup.py)

Other columns (source, notes) are kept for people and not read. The estimate of a row is
the sum over ops of count x each op's estimate (compiler/core/estimate_rule.py, the rule
compiler/forms/estimate.py compiles), the row's comm_overlap hidden, plus the step
overhead, so once each row's per-op pieces are evaluated (one call of the generated code
per row) the estimate at any parameters is a few numpy operations. The fit minimises the sum over rows of
(ln estimate - ln measured)^2 with each efficiency in [EFF_MIN, 1]: a coordinate search
on a log grid whose window halves every round. An efficiency no row's estimate depends
on (eff_link without collectives) keeps its starting value and is reported as unfitted.
"""
from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from infest.compiler.analyses.served_rows import (SERVED_QUANTITIES, SERVING_COLUMNS, Served,
                                                 served)
from infest.compiler.core.estimate_rule import (ESTIMATE_OP_KEYS, HARDWARE_PARAMS, NUMERIC, Kind,
                                                op_estimate, step_estimate)
from infest.compiler.core.keys import PARALLEL
from infest.compiler.core.terms import TIME_TERMS
from infest.compiler.load.fields import ESTIMATE_DEFAULTS
from infest.compiler.load.hardware import CompiledHardware, efficiencies
from infest.dsl.errors import Span, fail, printable, source_lines

MAX_CSV_BYTES = 1 << 20      # a measurements file; thousands of rows fit in far less
MAX_ROWS = 2000              # measurements per file (each row is one evaluation)
MAX_CELL_CHARS = 1000        # one cell (a spec path is the longest real one)
MAX_POLL_STEPS = 10_000      # a row's poll_interval (decode steps between looks)
MAX_LINE_CHARS = 8000        # one line (bench/measurements.csv's longest, with notes: 517)
# A measured step: a kernel launch is ~1 us, no step takes days; outside these a value is
# a unit slip, and 1e-320 (a subnormal) would make every relative error infinite.
MIN_STEP_S, MAX_STEP_S = 1e-7, 1e5
_DECIMAL = re.compile(r"^[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]{1,3})?$")
EFF_MIN = 0.02               # the lowest efficiency the search tries (50x below datasheet)
GRID = 41                    # candidates per coefficient per round
ROUNDS = 14                  # window halvings: the last step is ~1e-5 in ln(eff)
FITTED = tuple(t.eff for t in TIME_TERMS if t.eff)
# Every parameter the estimate reads (compiler/load/fields.py ESTIMATE_DEFAULTS) and the
# hardware's own fields it reads (the row's GPU's, never fitted).
ESTIMATE_PARAMS = tuple(ESTIMATE_DEFAULTS) + HARDWARE_PARAMS
REQUIRED = ("spec", "hardware", "B", "N")
QUANTITIES = {"step_s": None, "tpot_s": "decode", "ttft_s": "prefill"}  # and the phase each needs
LAYOUT = PARALLEL
STEP_POINT = ("B", "N", "T") + tuple(PARALLEL)   # what a row's step is evaluated at


@dataclass(frozen=True)
class Row:
    """One measurement as written: where it is, what ran, how long a step took."""

    span: Span
    spec: str
    hardware: str
    phase: str
    policy: str | None
    engine: str | None
    point: dict[str, int]        # B, N, T (decode), tp, ep, pp, dp
    step_s: float                # the measured quantity, seconds
    text: dict[str, str] = field(default_factory=dict)   # every column as written
    overlap: float = 0.0         # its comm_overlap: 1 where the run overlapped collectives
    poll: float = 1.0            # its poll_interval: decode steps between looks for requests


@dataclass
class Prepared:
    """A row evaluated once: per-op counts and what the estimate reads of each op
    (compiler/core/estimate_rule.py), its serial-kernel bound (roofline), its overlap
    floor (the hard one: no engine beats it) and the inputs it was evaluated at."""

    row: Row
    count: np.ndarray
    ops: dict[str, np.ndarray]       # ESTIMATE_OP_KEYS, per op
    kind: Kind                       # per op (0/1 arrays): attention, collective, GEMM
    bound_s: float
    floor_s: float
    inputs: dict[str, float]
    served: Served | None = None     # a serving run's row: costed as serve costs it

    def estimate(self, params: Mapping[str, Any]) -> Any:
        """The row's estimate (compiler/core/estimate_rule.py) at these parameters
        (scalars or arrays that broadcast; others at the row's inputs), plus the per-step
        overhead, plus the per-request overhead for a TTFT row; a serving run's row: its
        TPOT or TTFT through continuous batching (compiler/analyses/served_rows.py)."""
        v = {**self.inputs, **params}
        if self.served is not None:
            return self.served.estimate(v)
        col = {k: np.asarray(v[k], float)[..., None] for k in ESTIMATE_PARAMS}
        each = self.count * op_estimate(self.ops, col, self.kind, NUMERIC)
        step = step_estimate(np.sum(each, axis=-1), np.sum(each * self.kind.collective, axis=-1),
                             col["comm_overlap"][..., 0], NUMERIC)
        extra = col["step_overhead"][..., 0]
        if quantity(self.row) == "ttft_s":
            extra = extra + col["request_overhead"][..., 0]
        return step + extra


def read_measurements(path: Path) -> list[Row]:
    """Every row of a measurements CSV, checked (a SpecError names the line)."""
    from infest.compiler.load.files import read_text
    text = read_text(path, limit=MAX_CSV_BYTES, limit_name="MAX_CSV_BYTES")
    _check_lines(text, path)
    reader = csv.DictReader(io.StringIO(text))
    header = reader.fieldnames or []
    missing = [c for c in REQUIRED if c not in header]
    missing += [] if {"step_s", "measured"} & set(header) else ["step_s"]
    if missing:
        raise fail(Span(str(path), 1, 1, 1, 2), f"measurements lack the column(s) {', '.join(missing)}",
                   f"the header needs at least: {', '.join(REQUIRED)} and step_s (or measured)")
    rows = []
    try:
        for record in reader:
            span = Span(str(path), reader.line_num, 1, reader.line_num, 2)
            if len(rows) >= MAX_ROWS:
                raise fail(span, f"more than {MAX_ROWS} measurements (MAX_ROWS)", "split the file")
            _check_cells(record, span)
            rows.append(_row(record, span))
    except csv.Error as exc:
        raise fail(Span(str(path), reader.line_num, 1, reader.line_num, 2),
                   f"malformed CSV: {exc}", "a cell with commas or quotes must be quoted") from None
    if not rows:
        raise fail(Span(str(path), 1, 1, 1, 2), "no measurements", "add one row per measured step")
    return rows


def _check_lines(text: str, path: Path) -> None:
    """No line longer than MAX_LINE_CHARS, located, before the CSV reader sees it (its own
    field limit would fail without a line)."""
    for number, line in enumerate(source_lines(text), start=1):
        if len(line) > MAX_LINE_CHARS:
            raise fail(Span(str(path), number, 1, number, 2),
                       f"a line longer than MAX_LINE_CHARS = {MAX_LINE_CHARS}",
                       f"cells hold at most MAX_CELL_CHARS = {MAX_CELL_CHARS} characters")


def _check_cells(record: Mapping[str | None, Any], span: Span) -> None:
    """No cell longer than MAX_CELL_CHARS (before any is parsed)."""
    for value in record.values():
        cells = value if isinstance(value, list) else [value]  # extra cells: a list
        if any(isinstance(c, str) and len(c) > MAX_CELL_CHARS for c in cells):
            raise fail(span, f"a cell is longer than MAX_CELL_CHARS = {MAX_CELL_CHARS}")


def _row(record: Mapping[str, str | None], span: Span) -> Row:
    text = {k: (v or "").strip() for k, v in record.items() if k is not None}
    phase = text.get("phase") or "decode"
    if phase not in ("decode", "prefill"):
        raise fail(span, f"phase {phase!r}: use decode or prefill")
    point = {k: _whole(text, k, span, 1) for k in LAYOUT}
    point.update(B=_whole(text, "B", span, None), N=_whole(text, "N", span, None))
    if phase == "decode":
        point["T"] = _whole(text, "T", span, 1)
    elif text.get("T"):
        raise fail(span, "T is empty in prefill", "prefill processes T = N prompt tokens")
    step = _number(text, "measured" if text.get("measured") else "step_s", span)
    _check_quantity(text, phase, span)
    point.update(_request(text, span))
    for name in ("spec", "hardware"):
        if not text.get(name):
            raise fail(span, f"the row has no {name}")
    return Row(span, text["spec"], text["hardware"], phase, text.get("policy") or None,
               text.get("engine") or None, point, step, text, _share(text, "comm_overlap", span),
               _interval(text, "poll_interval", span))


def _check_quantity(text: Mapping[str, str], phase: str, span: Span) -> None:
    quantity = text.get("quantity") or "step_s"
    if quantity not in QUANTITIES:
        raise fail(span, f"quantity {quantity!r}: use {', '.join(QUANTITIES)}")
    if QUANTITIES[quantity] not in (None, phase):
        raise fail(span, f"quantity {quantity} is measured on a {QUANTITIES[quantity]} row, not {phase}")


def _request(text: Mapping[str, str], span: Span) -> dict[str, int]:
    """A serving run's request (isl, osl, concurrency and the token budget chunk, empty:
    serve's DEFAULT_CHUNK) when the row measures TPOT or TTFT and gives all three; else none."""
    if (text.get("quantity") or "step_s") not in SERVED_QUANTITIES \
            or not all(text.get(k) for k in SERVING_COLUMNS):
        return {}
    from infest.compiler.analyses.serve import DEFAULT_CHUNK
    from infest.compiler.analyses.startup import check_prompts
    out = {k: _whole(text, k, span, None) for k in SERVING_COLUMNS}
    out["chunk"] = _whole(text, "chunk", span, DEFAULT_CHUNK)
    if out["osl"] < 2:
        raise fail(span, f"osl {out['osl']}: TPOT needs at least 2 output tokens")
    if text.get("prompts"):
        if text.get("quantity") != "ttft_s":
            raise fail(span, "prompts shapes TTFT only (the start-up wave's prompts)",
                       "leave prompts empty on a tpot_s row")
        out["prompts"] = _whole(text, "prompts", span, None)
        check_prompts(out["prompts"], out["concurrency"], "prompts", span)
    return out


def request_of(row: Row) -> dict[str, int] | None:
    """A serving row's request (isl, osl, concurrency, chunk and, where given, prompts),
    None for a step row."""
    return {k: row.point[k] for k in (*SERVING_COLUMNS, "chunk", "prompts") if k in row.point} \
        if "isl" in row.point else None


def quantity(row: Row) -> str:
    """What a row measured: step_s, tpot_s or ttft_s."""
    return row.text.get("quantity") or "step_s"


def _whole(text: Mapping[str, str], key: str, span: Span, default: int | None) -> int:
    raw = text.get(key, "")
    if not raw and default is not None:
        return default
    # ASCII digits only ('²'.isdigit() is True), at most 13 of them, before int() runs
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 13 or not 1 <= int(raw) <= 2**40:
        raise fail(span, f"{key} {raw!r}: expected a whole number from 1 to 2^40")
    return int(raw)


def _share(text: Mapping[str, str], key: str, span: Span) -> float:
    """An optional share in [0, 1] (empty: 0), e.g. comm_overlap: 1 for a run with
    two-batch overlap, whose collectives hide behind the other micro-batch's compute."""
    raw = text.get(key, "")
    if not raw:
        return 0.0
    if not _DECIMAL.match(raw) or not 0 <= float(raw) <= 1:
        raise fail(span, f"{key} {raw[:40]!r}: expected a share from 0 to 1",
                   "1: the run overlapped its collectives with compute (two-batch overlap)")
    return float(raw)


def _interval(text: Mapping[str, str], key: str, span: Span) -> float:
    """An optional number of steps, 1 or more (empty: 1), e.g. poll_interval: 30 for a
    run whose scheduler looked for new requests every 30 decode steps."""
    raw = text.get(key, "")
    if not raw:
        return 1.0
    if not _DECIMAL.match(raw) or not 1 <= float(raw) <= MAX_POLL_STEPS:
        raise fail(span, f"{key} {raw[:40]!r}: expected decode steps from 1 to {MAX_POLL_STEPS:,}",
                   "SGLang --scheduler-recv-interval k or --num-continuous-decode-steps k: k")
    return float(raw)


def _number(text: Mapping[str, str], key: str, span: Span) -> float:
    raw = text.get(key, "")
    if not _DECIMAL.match(raw):  # float() would take '1_0', 'nan', Arabic-Indic digits
        raise fail(span, f"{key} {raw[:40]!r}: expected seconds as a decimal number, e.g. 0.0123")
    value = float(raw)
    if not MIN_STEP_S <= value <= MAX_STEP_S:
        raise fail(span, f"{key} {raw!r}: a step time is a positive number of seconds from "
                   f"MIN_STEP_S = {MIN_STEP_S:g} to MAX_STEP_S = {MAX_STEP_S:g}")
    return value


def comment_text(text: str) -> str:
    """Text for a spec comment: every line break and control character escaped, so a
    file name cannot end the comment and add a line of spec."""
    return printable(text).replace("\n", "\\n").replace("\r", "\\r")


def prepare(rows: list[Row], hw: str, base: Path) -> list[Prepared]:
    """Evaluate each row once on hardware `hw` (a name or path); `base`: the CSV's folder."""
    from infest.compiler.api import analyze
    cache: dict[tuple, Any] = {}

    def runner(spec: Path, row: Row, phase: str):
        key = (str(spec), phase, row.policy, row.engine)
        if key not in cache:
            cache[key] = analyze(spec, hw=hw, phase=phase, policy=row.policy,
                                 engine=row.engine).runner
        return cache[key]
    out = []
    for row in rows:
        spec = base / row.spec if (base / row.spec).exists() else Path(row.spec)
        prepared = _prepared(row, runner(spec, row, row.phase))
        request = request_of(row)
        if request is not None:
            prepared.served = served(runner(spec, row, "decode"), row.point, request, quantity(row))
        out.append(prepared)
    return out


def _prepared(row: Row, runner) -> Prepared:
    from infest.compiler.backend.finite import check_finite
    from infest.dsl.errors import SpecError
    try:
        inputs = runner.inputs({k: v for k, v in row.point.items() if k in STEP_POINT})
        point = {i.name: float(i.value) for i in inputs}
        values = runner(point)
        check_finite(runner, values, point)
    except SpecError as exc:
        raise fail(row.span, f"this measurement cannot be evaluated: {exc.diagnostics[0].message}",
                   exc.diagnostics[0].hint) from None
    n = len(runner.ops)
    ops = {k: np.array([float(values[f"ops.{i}.{k}"]) for i in range(n)])
           for k in ("count",) + ESTIMATE_OP_KEYS}
    kinds = [Kind.of(op.kind, op.collective) for op in runner.ops]
    kind = Kind(*(np.array([getattr(k, f) for k in kinds], float)
                  for f in ("attention", "collective", "gemm")))
    inputs = {k: float(point[k] if k in HARDWARE_PARAMS else point.get(k, ESTIMATE_DEFAULTS[k]))
              for k in ESTIMATE_PARAMS}
    inputs["comm_overlap"], inputs["poll_interval"] = row.overlap, row.poll
    return Prepared(row, ops.pop("count"), ops, kind, float(values["step.roofline_s"]),
                    float(values["step.overlap_floor_s"]), inputs)


def loss(rows: list[Prepared], effs: Mapping[str, Any]) -> Any:
    """Sum over rows of (ln estimate - ln measured)^2 (vectorised over array effs)."""
    return sum((np.log(p.estimate(effs)) - math.log(p.row.step_s)) ** 2 for p in rows)


def fit(rows: list[Prepared], start: Mapping[str, float]) -> dict[str, float]:
    """The efficiencies minimising `loss`, each in [EFF_MIN, 1], from `start`."""
    effs = {k: float(start[k]) for k in FITTED}
    width = -math.log(EFF_MIN)
    for _ in range(ROUNDS):
        for name in FITTED:
            centre = math.log(effs[name])
            grid = np.exp(np.linspace(max(math.log(EFF_MIN), centre - width),
                                      min(0.0, centre + width), GRID))
            values = loss(rows, {**effs, name: grid})
            best = int(np.argmin(values))
            if values[best] < float(loss(rows, effs)) * (1 - 1e-12):
                effs[name] = float(grid[best])
        width /= 2
    return effs


def constrained(rows: list[Prepared], effs: Mapping[str, float]) -> dict[str, bool]:
    """Whether the loss moves at all when each efficiency sweeps [EFF_MIN, 1]."""
    grid = np.exp(np.linspace(math.log(EFF_MIN), 0.0, GRID))
    out = {}
    for name in FITTED:
        values = np.broadcast_to(loss(rows, {**effs, name: grid}), grid.shape)
        out[name] = bool(np.ptp(values) > 1e-12 * max(1.0, float(np.max(values))))
    return out


def start_values(hw: CompiledHardware) -> dict[str, float]:
    """The hardware's efficiencies as evaluation uses them (compiler/load/hardware.py)."""
    effs = efficiencies(hw.fields)
    return {k: float(effs[k]) for k in FITTED}


def errors(rows: list[Prepared], effs: Mapping[str, float]) -> list[float]:
    """Relative error of each row's estimate: estimate / measured - 1."""
    return [float(p.estimate(effs)) / p.row.step_s - 1 for p in rows]


def leave_one_out(rows: list[Prepared], start: Mapping[str, float]) -> list[float]:
    """Each row's error under a fit to all the other rows (none with a single row)."""
    if len(rows) < 2:
        return []
    out = []
    for i, held in enumerate(rows):
        effs = fit(rows[:i] + rows[i + 1:], start)
        out.append(float(held.estimate(effs)) / held.row.step_s - 1)
    return out


def summary(errs: list[float]) -> dict[str, float | None]:
    """Median and worst of |error| (None for no rows)."""
    size = [abs(e) for e in errs]
    return {"median": float(np.median(size)) if size else None, "worst": max(size, default=None)}


def calibrated_text(hw: CompiledHardware, effs: Mapping[str, float], note: str) -> str:
    """The hardware file's text with the fitted efficiencies: fields it has are rewritten
    in place, others added before the block's closing brace with `note` as a comment."""
    from infest.compiler.load.files import read_text
    lines = read_text(Path(hw.file)).split("\n")
    for name, value in effs.items():
        if name in hw.fields:
            s = hw.fields[name].span
            line = lines[s.line - 1]
            lines[s.line - 1] = line[:s.col - 1] + f"{name} = {value:.4g}" + line[s.end_col - 1:]
    added = {k: v for k, v in effs.items() if k not in hw.fields}
    if added:
        end = hw.span.line - 1 + next(i for i, l in enumerate(lines[hw.span.line - 1:])
                                      if "}" in l.split("#")[0])
        fields = ";  ".join(f"{k} = {v:.4g}" for k, v in added.items())
        lines.insert(end, f"  {fields}   # {comment_text(note)}")
    return "\n".join(lines)

