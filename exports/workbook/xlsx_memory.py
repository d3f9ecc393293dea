"""Weights by parameter group: the named quantities the memory forms are sums of.

A model's weight forms (memory.weights_bytes, memory.weights_bytes_per_gpu,
step.weights_floor_s) are sums over every op of its stored bytes; printed whole, an MoE's
run to thousands of characters. compiler/forms/model.py `weight_groups` gives the same
sums split by parameter group (attention, experts, ...), term for term, so the Summary
writes one named cell per group and part (`weights_group_<g>`, `weights_gpu_group_<g>`,
`weights_touched_group_<g>`) and the three forms as sums of those names; the Plan sheet
does the same for one GPU of its own layout (`plan_weights_gpu_group_<g>`), so its fits
reads `plan_weights_bytes_per_gpu + plan_kv_bytes_per_gpu <= capacity`. Each sum is
checked to be the form it stands for (sympy equality) before it is written; a form that
is not is printed whole, as before.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import sympy
from openpyxl.utils import get_column_letter

from infest.compiler.core.symbols import sym
from infest.compiler.forms.model import WEIGHT_PARTS, weight_groups
from infest.exports.workbook.book import (HEADER_FONT, KEY_FONT, READABLE_CHARS, Builder,
                                          set_formula)
from infest.exports.workbook.xlsx_names import Namer

if TYPE_CHECKING:
    from infest.compiler.api import Analysis

# Part -> (the cell name's prefix, the table's column title).
PARTS = {"held": ("weights_group_", "held, all GPUs (bytes)"),
         "per_gpu": ("weights_gpu_group_", "per GPU, before / pp"),
         "touched": ("weights_touched_group_", "touched per step, one GPU (bytes)")}
# The Summary's columns wide enough for a byte count: value, shown as, also.
COLUMNS = {"held": 2, "per_gpu": 4, "touched": 6}
# Summary row -> (part summed, divided by this symbol's cell or None).
SUMMED = {("memory", "weights_bytes"): ("held", None),
          ("memory", "weights_bytes_per_gpu"): ("per_gpu", "pp"),
          ("step", "weights_floor_s"): ("touched", "mem_bw")}


def groups_of(analysis: "Analysis") -> dict[str, dict[str, sympy.Expr]]:
    """The weight groups that hold bytes (collective-only groups left out)."""
    from infest.compiler.api import links_of
    every = weight_groups(analysis.forms, links_of(analysis.hardware))
    return {g: parts for g, parts in every.items() if any(v != 0 for v in parts.values())}


def summary_sums(b: Builder, groups: dict[str, dict[str, sympy.Expr]], first_row: int
                 ) -> dict[tuple[str, str], str]:
    """(section, key) -> its formula as a sum of the group cells, for each summed form
    that equals that sum (the group table's rows start at `first_row`)."""
    forms = {"memory": b.analysis.forms.memory, "step": b.analysis.forms.step}
    out = {}
    for (section, key), (part, over) in SUMMED.items():
        total = sympy.Add(*(p[part] for p in groups.values()))
        divisor = sym(over) if over else sympy.Integer(1)
        if not groups or total / divisor != forms[section][key]:
            continue
        terms = "+".join(PARTS[part][0] + g for g in groups)
        if len(terms) > READABLE_CHARS - 20:
            col = get_column_letter(COLUMNS[part])
            terms = f"SUM(Summary!${col}${first_row}:${col}${first_row + len(groups) - 1})"
        out[(section, key)] = f"=({terms})/{b.names[divisor]}" if over else f"={terms}"
    return out


def summary_table(b: Builder, ws, top: int, groups: dict[str, dict[str, sympy.Expr]],
                  params: Namer) -> None:
    """The group table: a header at `top`, a row per group from `top + 1`; each cell
    printed with the params_group_ names (`params`: a namer over those only)."""
    ws.cell(top, 1, "weights by parameter group").font = HEADER_FONT
    for part in WEIGHT_PARTS:
        ws.cell(top, COLUMNS[part], PARTS[part][1]).font = HEADER_FONT
    for row, (group, parts) in enumerate(groups.items(), start=top + 1):
        ws.cell(row, 1, f"weights, group {group}")
        ws.cell(row, 7, f"weights_group_{group}").font = KEY_FONT
        for part in WEIGHT_PARTS:
            cell = ws.cell(row, COLUMNS[part])
            readable = params.rewrite(sympy.factor_terms(parts[part]))
            b.names.update(params.symbols)
            set_formula(cell, b.formula(readable), parts[part])
            cell.number_format = "#,##0"
            b.define(PARTS[part][0] + group, ws.title, cell.coordinate)


def plan_fits_rows(b: Builder, decode: "Analysis", live: Callable, last: dict[str, str]
                   ) -> list[tuple] | None:
    """The Plan's memory rows (weights per GPU as a sum of its group cells, KV per GPU,
    fits), or None where the decode forms' fits is not that sum (then it stays whole)."""
    memory = decode.forms.memory
    weights, kv = memory["weights_bytes_per_gpu"], memory["kv_bytes_per_gpu"]
    groups = groups_of(decode)
    capacity = sym("mem_capacity")
    if not groups or sympy.Add(*(p["per_gpu"] for p in groups.values())) / sym("pp") != weights \
            or memory["fits"] != sympy.Le(weights + kv, capacity):
        return None
    names = "+".join(f"plan_weights_gpu_group_{g}" for g in groups)
    return [
        ("weights_bytes_per_gpu", f"=({names})/plan_pp", "bytes", "weights held per GPU",
         "the groups' shards (beside the chunk table) / pp"),
        ("kv_bytes_per_gpu", lambda c: live(b, c, kv, last), "bytes",
         "KV cache per GPU at the last decode step", "c x dp sequences at ISL + OSL - 2"),
        ("fits", f"=plan_weights_bytes_per_gpu+plan_kv_bytes_per_gpu<={b.names[capacity]}", "",
         "fits in memory at the last decode step", "weights + KV cache <= capacity, per GPU"),
    ]


def plan_group_table(b: Builder, ws, top: int, col: int, decode: "Analysis",
                     live: Callable) -> None:
    """One GPU's weight shard per group under the Plan's layout, named
    plan_weights_gpu_group_<g>: the group's name in `col`, its bytes 5 columns right."""
    ws.cell(top, col, "weights per GPU by group, before / pp (bytes)").font = HEADER_FONT
    for row, (group, parts) in enumerate(groups_of(decode).items(), start=top + 1):
        ws.cell(row, col, group)
        cell = ws.cell(row, col + 5)
        live(b, cell, sympy.factor_terms(parts["per_gpu"]), {})
        cell.number_format = "#,##0"
        b.define(f"plan_weights_gpu_group_{group}", ws.title, cell.coordinate)
