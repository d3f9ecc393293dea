"""From closed forms to a Runner: the inputs they take, the flat key of every form, and
one generated numpy function for all of them (plus one for the model's constraints).

The same function serves a single `eval` (scalars) and a sweep (arrays that broadcast),
so a sweep cell equals `infest eval` at the same point exactly. The Runner itself
(compiler/backend/runner.py) evaluates without sympy.
"""
from __future__ import annotations

from fractions import Fraction

import sympy

from infest.compiler.backend.codegen import numpy_source
from infest.compiler.core.constraints import check_infos, constraints_source
from infest.compiler.load.fields import ESTIMATE_DEFAULTS, HARDWARE_DEFAULTS
from infest.compiler.load.hardware import CompiledHardware, efficiencies
from infest.compiler.core.dtypes import peak_chain
from infest.compiler.core.keys import PROBE_KEYS
from infest.compiler.core.keys import MEMORY_KEYS, OP_KEYS, STEP_KEYS
from infest.compiler.core.estimate_rule import ALWAYS_INPUTS, PART_KEYS
from infest.compiler.forms.model import Forms
from infest.compiler.core.terms import BOUND_TERMS
from infest.compiler.passes.offload import OFFLOAD_INPUTS, default_gpu_experts
from infest.compiler.backend.runner import DEFAULTS, Missing, OpInfo, Runner, builtin_kinds
from infest.compiler.core.symbols import BUILTINS, PARALLEL, sym



def input_names(forms: Forms) -> list[str]:
    """Every symbol the forms use: builtins, parallel degrees, model params, hardware."""
    free = {s.name for e in forms.all_exprs() for s in e.free_symbols} | set(ALWAYS_INPUTS)
    builtins = [b for b in BUILTINS if b != "T" or forms.phase == "decode"]  # prefill: T is N
    parallel = [p for p in PARALLEL if p in free]
    model = [p for p, v in forms.model.params.items()
             if v.is_input and p in free and p not in parallel]
    hardware = sorted(free - set(builtins) - set(parallel) - set(model))
    return builtins + parallel + model + hardware


def build_runner(forms: Forms, hw: CompiledHardware | None) -> Runner:
    """The sympy-free evaluator of these forms: inputs, generated code, names, spans."""
    names = input_names(forms)
    layout = form_layout(forms)
    index = {n: i for i, n in enumerate(names)}
    check_names = _check_names(forms, hw, names)
    model = forms.model
    return Runner(
        model=model.name, hardware=hw.name if hw else None, phase=forms.phase,
        policy=forms.layout.policy, engine=forms.engine.name,
        groups=tuple(forms.groups), names=tuple(names), kinds=_kinds(forms, names),
        defaults=_known_values(forms, hw),
        derived=tuple(p for p, v in model.params.items() if not v.is_input),
        check_names=check_names, keys=tuple(k for k, _ in layout),
        uses=tuple(tuple(sorted(index[s.name] for s in e.free_symbols if s.name in index))
                   for _, e in layout),
        ops=tuple(OpInfo(op.name, op.kind, op.group, op.comm is not None, op.span,
                         op_peaks(op)) for op in model.ops),
        checks=check_infos(model.constraints),
        missing=_missing(forms, hw, names),
        source=(numpy_source([sym(n) for n in names], [e for _, e in layout])
                + constraints_source(model.constraints, check_names)
                + numpy_source([sym(n) for n in names], _probe_forms(layout),
                               name="probe")),
        policies=tuple(model.policies), policy_derived=forms.layout.derived,
        spans={p.name: p.span for p in model.params.values() if p.span is not None})


def _probe_forms(layout: list[tuple[str, sympy.Expr]]) -> list[sympy.Expr]:
    """The forms of PROBE_KEYS, in order (the runner's cheaper function for capacity)."""
    forms = dict(layout)
    return [forms[k] for k in PROBE_KEYS]


def _check_names(forms: Forms, hw: CompiledHardware | None,
                 inputs: list[str]) -> tuple[str, ...]:
    """The constraints' inputs: the forms' own inputs, every input param (the forms may
    drop some) and the hardware's fields (gpus_per_node for a layout)."""
    names = dict.fromkeys(inputs)
    names.update(dict.fromkeys(p.name for p in forms.model.params.values() if p.is_input))
    names.update(dict.fromkeys(hw.fields if hw else ()))
    names.update(dict.fromkeys(sorted(n for c in check_infos(forms.model.constraints)
                                      for n in c.uses if n in DEFAULTS)))  # B, N, T, tp...
    return tuple(names)


def _known_values(forms: Forms, hw: CompiledHardware | None) -> dict[str, Fraction]:
    known = {**DEFAULTS, **(efficiencies(hw.fields) if hw is not None else ESTIMATE_DEFAULTS)}
    known.update({p.name: p.default for p in forms.model.params.values() if p.is_input})
    if hw is not None:  # peaks and measured ceilings a block leaves out: 0 (fields.py)
        known.update(HARDWARE_DEFAULTS)
        known.update({k: v.value for k, v in hw.fields.items()})
    experts = default_gpu_experts(forms.model, known)
    if experts is not None:  # offload inputs: all experts resident, no measured hit rate
        known.update({"gpu_experts": Fraction(experts), "hit_rate": Fraction(0)})
    return known  # type: ignore[return-value]


def _kinds(forms: Forms, names: list[str]) -> dict[str, str]:
    kinds = builtin_kinds()
    kinds.update({p: "model" for p, v in forms.model.params.items() if v.is_input})
    kinds.update({n: "offload" for n in OFFLOAD_INPUTS if n in names})
    return kinds


def _missing(forms: Forms, hw: CompiledHardware | None, names: list[str]) -> tuple[Missing, ...]:
    """Inputs with no default: each an error unless --set gives it a value."""
    known = _known_values(forms, hw)
    absent = [n for n in names if n not in known]
    if hw is None:
        return tuple(Missing(n, None, f"no hardware given: {', '.join(absent)} need values",
                             "pass --hw h100_sxm (or another hardware) or --set them")
                     for n in absent[:1])
    out = [_missing_field(hw, name, f", needed by op '{op}' (math in {name[6:]})" if op else "")
           for name in absent for op in [_first_user(forms, name)]]
    for op in forms.model.ops:  # a peak chain the hardware computes in nowhere
        chain = [f"flops_{p}" for p in op_peaks(op)]
        if chain and chain[0] not in absent and all(known.get(n, 0) == 0 for n in chain):
            out.append(_missing_field(hw, chain[0], f", needed by op '{op.name}' (math in "
                                      f"{op.peak}; no wider format to fall back to)"))
            absent.append(chain[0])
    return tuple(out)


def _missing_field(hw: CompiledHardware, name: str, why: str) -> Missing:
    return Missing(name, hw.span, f"hardware '{hw.name}' has no {name}{why}",
                   f"add `{name} = ...` to the hardware, or --set {name}=...")


def _first_user(forms: Forms, name: str) -> str | None:
    """The first op whose math may run at this peak, for messages."""
    return next((op.name for op in forms.model.ops
                 if name in (f"flops_{p}" for p in op_peaks(op))), None)


def op_peaks(op) -> tuple[str, ...]:
    """An op's peak chain (compiler/core/dtypes.py): collectives compute nothing."""
    return () if op.comm is not None else peak_chain(op.dtypes.math, op.dtypes.act)


def form_layout(forms: Forms) -> list[tuple[str, sympy.Expr]]:
    """(flat key, expr) for every form: params.*, memory.*, step.*, bound.*, ops.i.*."""
    items = [(f"params.{k}", v) for k, v in forms.params.items()]
    items += [(f"groups.{k}", v) for k, v in forms.groups.items()]
    items += [(f"memory.{k}", forms.memory[k]) for k in MEMORY_KEYS]
    items += [(f"step.{k}", forms.step[k]) for k in STEP_KEYS]
    items += [(f"bound.{k}", forms.bound_terms[k]) for k in BOUND_TERMS]
    items += [(f"parallel.{k}", v) for k, v in forms.parallel.items()]
    for i, op in enumerate(forms.ops):
        items += [(f"ops.{i}.{k}", op[k]) for k in OP_KEYS + PART_KEYS]
    return items
