"""Assemble evaluated values into the `eval --json` contract (base units throughout)."""
from __future__ import annotations

import math
from typing import Any, Mapping, TYPE_CHECKING

import numpy as np

from infest.compiler.core.keys import MEMORY_KEYS, OP_KEYS, PARALLEL_KEYS, STEP_KEYS, key_info
from infest.compiler.core.terms import BOUND_TERMS, TIME_TERMS

if TYPE_CHECKING:
    from infest.compiler.backend.runner import Input, Runner



def _number(key: str, value: Any) -> Any:
    """A JSON-ready scalar: bool for fits, int for counts, float otherwise (None if inf)."""
    v = value.item() if hasattr(value, "item") else value
    if isinstance(v, (bool,)) or key == "fits":
        return bool(v)
    v = float(v)
    if not math.isfinite(v):
        return None
    if key_info(key).integer and v.is_integer():
        return int(v)
    return v


def result_json(runner: "Runner", inputs: list["Input"], values: dict[str, Any]) -> dict:
    """The contract object: model, hardware, phase, inputs, params, memory, step, ops."""
    step = {k: _number(k, values[f"step.{k}"]) for k in STEP_KEYS}
    step["bound"] = str(step_bound(values))
    return {
        "model": runner.model,
        "hardware": runner.hardware,
        "phase": runner.phase,
        "engine": runner.engine,
        "inputs": {i.name: _input_value(i) for i in inputs},
        "params": {"total": _number("total", values["params.total"]),
                   "active": _number("active", values["params.active"]),
                   "groups": {g: _number("total", values[f"groups.{g}"]) for g in runner.groups}},
        "parallel": {**{k: _number(k, values[f"parallel.{k}"]) for k in PARALLEL_KEYS},
                     "policy": runner.policy, "policy_derived": runner.policy_derived},
        "memory": {k: _number(k, values[f"memory.{k}"]) for k in MEMORY_KEYS},
        "step": step,
        "math_fallback": math_fallback(runner, {i.name: i.value for i in inputs}),
        "ops": [_op_json(runner, i, values) for i in range(len(runner.ops))
                if _runs(runner, i, values)],
    }


def _runs(runner: "Runner", i: int, values: dict[str, Any]) -> bool:
    """Collectives that this layout does not need (count 0, e.g. tp = 1) are left out."""
    return not runner.ops[i].collective or float(values[f"ops.{i}.count"]) > 0


def _input_value(i: "Input") -> int | float:
    return int(i.value) if i.value.denominator == 1 else float(i.value)


def _op_json(runner: "Runner", i: int, values: dict[str, Any]) -> dict:
    op = runner.ops[i]
    p = f"ops.{i}."
    out = {"name": op.name, "kind": op.kind, "group": op.group,
           "count": _number("count", values[p + "count"])}
    for key in OP_KEYS[1:]:
        out[key] = _number(key, values[p + key])
    if op.collective:  # a collective's bytes: its payload per call, over links
        out["bytes"] = out["comm_bytes"]
    out["bound"] = op_bound(values, i)
    return out


def step_bound(values: Mapping[str, Any]) -> Any:
    """Name of the largest ceiling (compute, weights, kv, launch, ...), elementwise."""
    stacked = np.stack([np.broadcast_to(values[f"bound.{k}"], np.shape(values["step.time_s"]))
                        for k in BOUND_TERMS])
    return np.asarray(BOUND_TERMS)[np.argmax(stacked, axis=0)]


def op_bound(values: Mapping[str, Any], i: int) -> str:
    """Which term sets an op's time; memory time is named by its largest byte kind."""
    p = f"ops.{i}."
    term = TIME_TERMS[int(np.argmax([float(values[p + t.key]) for t in TIME_TERMS]))]
    if term.name != "memory":
        return term.name
    kinds = {"weights": values[p + "weight_bytes"], "kv": values[p + "kv_bytes"],
             "activations": values[p + "act_bytes"]}
    return max(kinds, key=lambda k: float(kinds[k]))


def running_peak(peaks: tuple[str, ...], values: Mapping[str, Any]) -> str:
    """The peak an op's math runs at on this hardware: the first of its chain with a
    non-zero value (the forms choose the same way: compiler/forms/model.py peak_form)."""
    return next((p for p in peaks if float(values.get(f"flops_{p}", 0)) > 0), peaks[-1])


def math_fallback(runner: "Runner", values: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Each format the hardware cannot compute in that some ops want, and what they run
    at instead: [{math, runs_at, ops, note}] (empty when every op runs at its own)."""
    found: dict[tuple[str, str], int] = {}
    for op in runner.ops:
        if op.peaks and (runs := running_peak(op.peaks, values)) != op.peaks[0]:
            found[(op.peaks[0], runs)] = found.get((op.peaks[0], runs), 0) + 1
    hw = runner.hardware or "this hardware"
    return [{"math": want, "runs_at": runs, "ops": n,
             "note": f"{hw} has no {want} math (flops_{want} = 0): weights stream at their "
                     f"stored size and are upcast to {runs} for the math"
                     + (" (weight-only)" if runs == "bf16" else "")}
            for (want, runs), n in found.items()]
