"""Evaluate closed forms at inputs: one lambdified numpy function for every form.

The same compiled function serves a single `eval` (scalars) and a sweep (arrays that
broadcast), so a sweep cell equals `infest eval` at the same point exactly.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Mapping

import numpy as np
import sympy

from infest.compiler.hardware import MAY_BE_ZERO, CompiledHardware, may_be_zero, sign_rule
from infest.compiler.model import BOUND_TERMS, MEMORY_KEYS, OP_KEYS, STEP_KEYS, Forms
from infest.compiler.terms import TIME_TERMS
from infest.compiler.symbols import BUILTINS, PARALLEL, sym
from infest.dsl.errors import Diagnostic, SpecError, did_you_mean, fail

DEFAULTS = {"B": Fraction(1), "N": Fraction(4096), "T": Fraction(1),
            **{p: Fraction(1) for p in PARALLEL}}


@dataclass(frozen=True)
class Input:
    """One input symbol: where it comes from and its value for this run."""

    name: str
    kind: str          # "builtin", "parallel", "model" or "hardware"
    value: Fraction


def input_names(forms: Forms) -> list[str]:
    """Every symbol the forms use: builtins, parallel degrees, model params, hardware."""
    free = {s.name for e in forms.all_exprs() for s in e.free_symbols}
    builtins = [b for b in BUILTINS if b != "T" or forms.phase == "decode"]  # prefill: T is N
    parallel = [p for p in PARALLEL if p in free]
    model = [p for p, v in forms.model.params.items()
             if v.is_input and p in free and p not in parallel]
    hardware = sorted(free - set(builtins) - set(parallel) - set(model))
    return builtins + parallel + model + hardware


def resolve_inputs(forms: Forms, hw: CompiledHardware | None,
                   overrides: Mapping[str, Fraction]) -> list[Input]:
    """Defaults from the builtins, the model and the hardware, then --set overrides."""
    known = _known_values(forms, hw)
    names = input_names(forms)
    _check_overrides(forms, names, known, overrides)
    missing = [n for n in names if n not in known and n not in overrides]
    if missing:
        raise _missing_error(forms, hw, missing)
    kinds = _kinds(forms)
    return [Input(n, kinds.get(n, "hardware"), Fraction(overrides.get(n, known.get(n))))
            for n in names]


def _known_values(forms: Forms, hw: CompiledHardware | None) -> dict[str, Fraction]:
    known = dict(DEFAULTS)
    known.update({p.name: p.default for p in forms.model.params.values() if p.is_input})
    if hw is not None:
        known.update({k: v.value for k, v in hw.fields.items()})
    return known  # type: ignore[return-value]


def _kinds(forms: Forms) -> dict[str, str]:
    kinds = {b: "builtin" for b in BUILTINS}
    kinds.update({p: "model" for p in forms.model.params})
    kinds.update({p: "parallel" for p in PARALLEL})
    return kinds


def _check_overrides(forms, names, known, overrides) -> None:
    for name, value in overrides.items():
        if name == "T" and forms.phase == "prefill":
            raise fail(None, "T cannot be set in prefill", "prefill processes T = N prompt tokens")
        if name in forms.model.params and not forms.model.params[name].is_input:
            raise fail(None, f"'{name}' is derived from other params and cannot be set")
        if name not in names and name not in known:
            raise fail(None, f"--set {name}: no such input",
                       did_you_mean(name, set(names) | set(known)) or "see `infest eval --json` inputs")
        if value < 0 or (value == 0 and not may_be_zero(name)):
            raise fail(None, f"--set {name}: the value must be {sign_rule(name)}",
                       f"only {', '.join(sorted(MAY_BE_ZERO))} may be 0")
        if value > 10**30:
            raise fail(None, f"--set {name}: absurdly large value", "values must stay below 1e30")


def _missing_error(forms: Forms, hw: CompiledHardware | None, missing: list[str]) -> SpecError:
    if hw is None:
        return fail(None, f"no hardware given: {', '.join(missing)} need values",
                    "pass --hw h100_sxm (or another hardware) or --set them")
    diags = []
    for name in missing:
        users = [op.name for op in forms.model.ops if f"flops_{op.peak}" == name]
        why = f", needed by op '{users[0]}' (math in {name[6:]})" if users else ""
        diags.append(Diagnostic(hw.span, f"hardware '{hw.name}' has no {name}{why}",
                                f"add `{name} = ...` to the hardware, or --set {name}=..."))
    return SpecError(diags)


class CompiledForms:
    """Every form of a Forms lambdified once into one numpy function of the inputs."""

    def __init__(self, forms: Forms, names: list[str]) -> None:
        self.forms, self.names = forms, names
        self.layout = form_layout(forms)
        exprs = [e for _, e in self.layout]
        symbols, exprs = _safe_symbols([sym(n) for n in names], exprs)
        self._fn = sympy.lambdify(symbols, exprs, modules=[_numpy_namespace()],
                                  printer=_numpy_printer(), dummify=False, cse=True)

    def __call__(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """Evaluate at inputs (scalars or broadcastable arrays): key -> value."""
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            args = [np.asarray(values[n], dtype=float) for n in self.names]
            results = self._fn(*args)
        return {key: results[i] for i, (key, _) in enumerate(self.layout)}


def _numpy_namespace() -> dict[str, Any]:
    """numpy's already-loaded names: `modules="numpy"` would run `from numpy import *`,
    which imports numpy's lazy submodules (f2py, testing, ...) for ~0.2 s per process."""
    import functools
    namespace = dict(vars(np))
    namespace["reduce"] = functools.reduce
    return namespace


def _numpy_printer():
    """The printer lambdify itself picks for modules="numpy"."""
    from sympy.printing.numpy import NumPyPrinter
    return NumPyPrinter({"fully_qualified_modules": False, "inline": True,
                         "allow_unknown_functions": True, "user_functions": {}})


def _safe_symbols(symbols: list[sympy.Symbol], exprs: list[sympy.Expr]):
    """Rename inputs whose names could clash with the generated code's namespace.

    lambdify's own dummify=True rebuilds every expression (seconds on a big model), so
    only names that are not plain identifiers, or shadow numpy or Python names, are
    replaced; the common case rebuilds nothing.
    """
    unsafe = [s for s in symbols if not _plain_identifier(s.name)]
    if not unsafe:
        return symbols, exprs
    swap = {s: sympy.Symbol(f"_in{i}", **s.assumptions0) for i, s in enumerate(unsafe)}
    return [swap.get(s, s) for s in symbols], [e.xreplace(swap) for e in exprs]


def _plain_identifier(name: str) -> bool:
    import builtins
    import keyword
    return (name.isidentifier() and not keyword.iskeyword(name) and not name.startswith("_")
            and not hasattr(np, name) and not hasattr(builtins, name)
            and name not in {"reduce", "select", "numpy", "math", "mpmath", "scipy"})


def form_layout(forms: Forms) -> list[tuple[str, sympy.Expr]]:
    """(flat key, expr) for every form: params.*, memory.*, step.*, bound.*, ops.i.*."""
    items = [(f"params.{k}", v) for k, v in forms.params.items()]
    items += [(f"groups.{k}", v) for k, v in forms.groups.items()]
    items += [(f"memory.{k}", forms.memory[k]) for k in MEMORY_KEYS]
    items += [(f"step.{k}", forms.step[k]) for k in STEP_KEYS]
    items += [(f"bound.{k}", forms.bound_terms[k]) for k in BOUND_TERMS]
    items += [(f"parallel.{k}", v) for k, v in forms.parallel.items()]
    for i, op in enumerate(forms.ops):
        items += [(f"ops.{i}.{k}", op[k]) for k in OP_KEYS]
    return items


def step_bound(values: Mapping[str, Any]) -> Any:
    """Name of the largest ceiling (compute, weights, kv, launch), elementwise."""
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
