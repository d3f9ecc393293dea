"""Read Nsight Systems' per-kernel summary and map its kernels to a model's ops.

The input is what `nsys stats --report cuda_gpu_kern_sum --format csv` prints: possibly
some preamble lines, then a header row with `Time (%)`, `Total Time (ns)`, `Instances`,
`Avg (ns)`, `Med (ns)`, `Min (ns)`, `Max (ns)`, `StdDev (ns)`, `Name` (some versions add
`GridXYZ` and `BlockXYZ`), then one row per kernel; names are quoted and may hold commas
and doubled quotes. Columns are found by header text, never by position. Every malformed
input is a located error (`file:line:col: error: ...`).

Kernel names map to targets by glob patterns (fnmatch: `*` and `?`, case-insensitive),
never by user regexes, so a pattern cannot backtrack catastrophically. A mapping file has
one `pattern = target` per line (`#` comments); a target is an op name of the spec, an op
kind (`linear`, `attention`, ...), `norm`, `elementwise`, `comm` (collectives) or
`ignore`. The file's patterns are tried first, in order, then the built-in ones.
"""
from __future__ import annotations

import csv
import fnmatch
import io
import re
from dataclasses import dataclass
from pathlib import Path

from infest.compiler.load.files import read_text
from infest.dsl.errors import Span, fail, register_source, source_lines

MAX_CSV_BYTES = 64 * 2**20       # a kern_sum of a long capture is a few MB
MAX_KERNEL_ROWS = 100_000
MAX_NAME_CHARS = 10_000          # C++ template names run long, not this long
MAX_MAPPING_BYTES = 1 * 2**20
MAX_PATTERNS = 1_000
MAX_PATTERN_CHARS = 300
MAX_PREAMBLE_LINES = 200         # lines searched for the header row
# A kernel's total time (ns) or launches: 1e15 ns is 11 days of kernels; sums of larger
# numbers lose every small kernel in floating point (totals of 1e300: "GPU idle 0.0%").
MAX_CELL_VALUE = 1e15
_DECIMAL = re.compile(r"^[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]{1,3})?$")

NAME, TOTAL, INSTANCES = "Name", "Total Time (ns)", "Instances"
WIDTH = " width"  # the header's cell count, kept beside the column indices
REQUIRED_COLUMNS = (TOTAL, INSTANCES, NAME)
OPTIONAL_COLUMNS = {"grid": ("GridXYZ", "Grid"), "block": ("BlockXYZ", "Block")}

# Targets that are not op names or kinds.
GROUP_TARGETS = {"attention": ("attention", "mla", "indexer", "linear_attention"),
                 "norm": ("rmsnorm", "layernorm"),
                 "elementwise": ("add", "mul", "silu_mul", "gelu_mul", "silu", "gelu",
                                 "relu", "sigmoid", "rope", "softmax")}
COMM, IGNORE = "comm", "ignore"

# Built-in patterns, tried after a mapping file's (first match wins). Sources: the kernel
# names cuBLAS/CUTLASS (gemm, cutlass, sm90_xmma, nvjet), FlashAttention/cuDNN (flash,
# fmha), vLLM/TensorRT-LLM/SGLang (rms_norm, act_and_mul, rotary, topk), the recurrent
# and sparse kernels (causal-conv1d's causal_conv1d_fwd/update, flash-linear-attention's
# chunk_ and fused_recurrent_gated_delta_rule, Mamba-2's _chunk_scan_fwd and
# selective_state_update, DeepGEMM's fp8_mqa_logits for the indexer) and NCCL print.
DEFAULT_PATTERNS: tuple[tuple[str, str], ...] = (
    ("*nccl*", COMM), ("*allreduce*", COMM), ("*all_reduce*", COMM), ("*allgather*", COMM),
    ("*causal_conv1d*", "conv1d"), ("*gated_delta_rule*", "linear_attention"),
    ("*chunk_scan*", "linear_attention"), ("*selective_state_update*", "linear_attention"),
    ("*mqa_logits*", "indexer"),
    ("*flash*", "attention"), ("*fmha*", "attention"), ("*attention*", "attention"),
    ("*rms*norm*", "norm"), ("*layernorm*", "norm"), ("*layer_norm*", "norm"),
    ("*fused_moe*", "linear"), ("*gemm*", "linear"), ("*gemv*", "linear"),
    ("*cutlass*", "linear"), ("*xmma*", "linear"), ("*nvjet*", "linear"),
    ("*splitk*", "linear"), ("*matmul*", "linear"),
    ("*rotary*", "rope"), ("*rope*", "rope"), ("*topk*", "router"),
    ("*act_and_mul*", "elementwise"), ("*silu*", "elementwise"), ("*gelu*", "elementwise"),
    ("*elementwise*", "elementwise"), ("*add*", "elementwise"), ("*softmax*", "softmax"),
    ("*embedding*", "embed"),
)


@dataclass(frozen=True)
class Kernel:
    """One row of cuda_gpu_kern_sum: a kernel name, its total time and launches."""

    name: str
    total_s: float
    instances: int
    line: int
    grid: str | None = None
    block: str | None = None


def _error(path: str, line: int, message: str, hint: str | None = None):
    """A SpecError at a whole line of the CSV (the line is quoted and underlined)."""
    return fail(Span(path, line, 1, line + 1, 1), message, hint)


def read_kern_sum(path: str | Path) -> list[Kernel]:
    """Parse a cuda_gpu_kern_sum CSV into kernels (checked: size, header, every cell)."""
    name = str(path)
    text = read_text(path, limit=MAX_CSV_BYTES, limit_name="MAX_CSV_BYTES",
                     encoding="utf-8-sig")
    register_source(name, text)
    if not text.strip():
        raise _error(name, 1, "empty file: no cuda_gpu_kern_sum header or rows",
                     "write it with `nsys stats --report cuda_gpu_kern_sum --format csv`")
    rows = _rows(text, name)
    header_at, columns = _header(rows, name)
    kernels = [_kernel(cells, line, columns, name) for line, cells in rows[header_at + 1:]
               if any(c.strip() for c in cells)]
    if not kernels:
        raise _error(name, rows[header_at][0], "the header is followed by no kernel rows")
    return kernels


def _rows(text: str, name: str) -> list[tuple[int, list[str]]]:
    """(line where the row starts, cells) for every row; a broken quote is located."""
    reader = csv.reader(io.StringIO(text), strict=True)
    rows: list[tuple[int, list[str]]] = []
    start = 1
    try:
        for cells in reader:
            rows.append((start, cells))
            start = reader.line_num + 1
            if len(rows) > MAX_KERNEL_ROWS + MAX_PREAMBLE_LINES:
                raise _error(name, start, f"more than MAX_KERNEL_ROWS ({MAX_KERNEL_ROWS}) rows")
    except csv.Error as exc:
        raise _error(name, start, f"malformed CSV: {exc}",
                     "a name with commas or quotes must be quoted, quotes doubled") from None
    return rows


def _header(rows: list[tuple[int, list[str]]], name: str) -> tuple[int, dict[str, int]]:
    """Index of the header row and the column of each field we read."""
    for i, (line, cells) in enumerate(rows[:MAX_PREAMBLE_LINES]):
        found = {c.strip(): j for j, c in enumerate(cells)}
        if NAME in found and (TOTAL in found or INSTANCES in found):
            missing = [c for c in REQUIRED_COLUMNS if c not in found]
            if missing:
                raise _error(name, line, f"the header lacks column(s) {', '.join(map(repr, missing))}",
                             f"cuda_gpu_kern_sum has {', '.join(REQUIRED_COLUMNS)}")
            columns = {c: found[c] for c in REQUIRED_COLUMNS}
            columns[WIDTH] = len(cells)
            for key, spellings in OPTIONAL_COLUMNS.items():
                columns.update({key: found[s] for s in spellings if s in found})
            return i, columns
    raise _error(name, rows[0][0], f"no header row with {', '.join(map(repr, REQUIRED_COLUMNS))} "
                 f"in the first {MAX_PREAMBLE_LINES} lines (MAX_PREAMBLE_LINES)",
                 "is this `nsys stats --report cuda_gpu_kern_sum --format csv` output?")


def _kernel(cells: list[str], line: int, columns: dict[str, int], name: str) -> Kernel:
    """One kernel row, every cell checked."""
    if len(cells) != columns[WIDTH]:
        raise _error(name, line, f"{len(cells)} cells where the header has {columns[WIDTH]}",
                     "a kernel name with commas must be quoted")
    kname = cells[columns[NAME]].strip()
    if not kname:
        raise _error(name, line, "empty kernel name")
    if any(ord(ch) < 32 for ch in kname):
        raise _error(name, line, "a control character (NUL, newline, ...) in the kernel name")
    if len(kname) > MAX_NAME_CHARS:
        raise _error(name, line, f"kernel name over MAX_NAME_CHARS ({MAX_NAME_CHARS})")
    total = _number(cells[columns[TOTAL]], TOTAL, line, name)
    instances = _number(cells[columns[INSTANCES]], INSTANCES, line, name)
    if not instances.is_integer() or instances < 1:
        raise _error(name, line, f"'{INSTANCES}' must be a whole number of at least 1, "
                     f"got {cells[columns[INSTANCES]].strip()!r}")
    extra = {k: cells[columns[k]].strip() or None for k in OPTIONAL_COLUMNS if k in columns}
    return Kernel(kname, total * 1e-9, int(instances), line, **extra)


def _number(cell: str, column: str, line: int, name: str) -> float:
    """A decimal number from 0 to MAX_CELL_VALUE (ASCII digits: float() would also take
    '1_0', 'nan' or Arabic-Indic digits)."""
    text = cell.strip()
    if not _DECIMAL.match(text):
        raise _error(name, line, f"'{column}' is not a number: {text[:40]!r}")
    value = float(text)
    if not 0 <= value <= MAX_CELL_VALUE:
        raise _error(name, line, f"'{column}' must be a number from 0 to MAX_CELL_VALUE = "
                     f"{MAX_CELL_VALUE:g}, got {text!r}")
    return value


# ---- mapping kernels to targets -----------------------------------------------------

@dataclass(frozen=True)
class Pattern:
    """`glob = target`, from a mapping file (with its line) or built in (line 0)."""

    glob: str
    target: str
    line: int = 0


def default_patterns() -> list[Pattern]:
    """The built-in kernel-name patterns."""
    return [Pattern(g, t) for g, t in DEFAULT_PATTERNS]


def read_mapping(path: str | Path, targets: set[str]) -> list[Pattern]:
    """A mapping file's patterns; an unknown target or malformed line is located."""
    name = str(path)
    text = read_text(path, limit=MAX_MAPPING_BYTES, limit_name="MAX_MAPPING_BYTES",
                     encoding="utf-8-sig")
    register_source(name, text)
    patterns = []
    for number, raw in enumerate(source_lines(text), start=1):
        line = raw.split("#", 1)[0].strip()
        if line:
            patterns.append(_pattern(line, number, name, targets))
        if len(patterns) > MAX_PATTERNS:
            raise _error(name, number, f"more than MAX_PATTERNS ({MAX_PATTERNS}) patterns")
    return patterns


def _pattern(line: str, number: int, name: str, targets: set[str]) -> Pattern:
    glob, sep, target = (s.strip() for s in line.rpartition("="))
    if not sep or not glob or not target:
        raise _error(name, number, "expected `pattern = target`", "e.g. `*gemv* = linear`")
    if len(glob) > MAX_PATTERN_CHARS:
        raise _error(name, number, f"pattern over MAX_PATTERN_CHARS ({MAX_PATTERN_CHARS})")
    if target not in targets:
        from infest.dsl.errors import did_you_mean
        raise _error(name, number, f"unknown target '{target}'",
                     did_you_mean(target, targets) or "an op name or kind of the spec, "
                     "norm, elementwise, comm or ignore")
    return Pattern(glob.lower(), target, number)


def match(kernel: str, patterns: list[Pattern]) -> str | None:
    """The target of the first pattern that matches the kernel name (case-insensitive)."""
    low = kernel.lower()
    for p in patterns:
        if fnmatch.fnmatchcase(low, p.glob):
            return p.target
    return None
