"""The Python API: load a spec, pick hardware, derive closed forms, evaluate.

    from infest.compiler.api import analyze
    a = analyze("specs/models/llama3_1_8b.arch", hw="h100_sxm")
    a.forms.step["time_s"]                 # sympy closed form
    a.evaluate({"B": 8, "N": 8192})         # dict shaped like `infest eval --json`
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Mapping

from infest.compiler.passes.collectives import LINK_FIELDS, NET_FIELDS, Links
from infest.compiler.core.elaborate import elaborate
from infest.compiler.core.graph import CompiledModel
from infest.compiler.core.estimate_rule import HARDWARE_PARAMS
from infest.compiler.forms.evaluate import build_runner
from infest.compiler.passes.engine import engine_hardware, resolve_engine
from infest.compiler.load.fields import REQUIRED
from infest.compiler.load.hardware import CompiledHardware, compile_hardware
from infest.compiler.load.files import Read
from infest.compiler.load.loader import (Lookup, Program, find_hardware, load_program,
                                         pick_model, resolve_spec, shipped)
from infest.compiler.forms.model import Forms, build_forms
from infest.compiler.passes.policy import resolve_policy
from infest.compiler.backend.runner import Input, Runner
from infest.dsl.errors import did_you_mean, fail


def load_model(path: str | Path, model: str | None = None,
               program: Program | None = None, draft: str | None = None) -> CompiledModel:
    """Parse and check the model a spec file defines (or the one named); `draft="mtp"`:
    its multi-token-prediction draft (compiler/core/mtp.py)."""
    path = resolve_spec(Path(path))
    program = program or load_program(path)
    node, file = pick_model(program, model, path)
    if draft is not None:
        from infest.compiler.core.mtp import mtp_model
        node = mtp_model(node)
    return elaborate(node, file, reserved=_hardware_field_names(program))


def _hardware_field_names(program: Program) -> set[str]:
    names = set(REQUIRED) | set(HARDWARE_PARAMS)
    for hw, _ in program.hardware.values():
        names.update(f.name for f in hw.fields)
    return names


def load_hardware(spec: str | Path, program: Program | None = None,
                  into: Program | None = None) -> CompiledHardware:
    """Hardware by shipped name, by a block name in the spec's program, or by path (what
    was read and looked up is added to `into`, for the cache)."""
    name = str(spec)
    if program is not None and name in program.hardware:
        node, file = program.hardware[name]
        return compile_hardware(node, file)
    path = find_hardware(name)
    if path is None:
        ship = shipped("hardware")
        raise fail(None, f"unknown hardware '{name}'",
                   did_you_mean(name, ship) or f"shipped: {', '.join(ship)}, or a path to a .arch file")
    hw_program = load_program(path)
    if into is not None:
        into.files.extend(hw_program.files)
        into.reads.extend(hw_program.reads)
        into.lookups.append(Lookup("hardware", os.getcwd(), name, os.path.abspath(path)))
        into.lookups.extend(hw_program.lookups[1:])  # its imports (the first: path itself)
    if not hw_program.hardware:
        raise fail(None, f"{path} defines no hardware block")
    node, file = next(iter(hw_program.hardware.values()))
    return compile_hardware(node, file)


@dataclass
class Analysis:
    """A model, optional hardware and a phase, with forms derived and ready to evaluate.

    Evaluation goes through `runner` (compiler/backend/runner.py: generated code, no sympy), the
    same object a cached `infest eval` reads back; the forms stay for symbolic work."""

    model: CompiledModel
    hardware: CompiledHardware | None
    forms: Forms
    files: tuple[Path, ...] = ()   # every file read (spec, imports, hardware), resolved
    reads: tuple[Read, ...] = ()   # each file's bytes as the parser read them (the cache)
    lookups: tuple[Lookup, ...] = ()  # each name -> the file it found (the cache)

    @cached_property
    def runner(self) -> Runner:
        """The sympy-free evaluator of these forms (built once)."""
        return build_runner(self.forms, self.hardware)

    def inputs(self, overrides: Mapping[str, Any] | None = None, checked: bool = True
               ) -> list[Input]:
        """Every input with its value for this run (see Runner.inputs)."""
        return self.runner.inputs(overrides, checked)

    def check(self, values: Mapping[str, Any], overrides: Mapping[str, Any] | None = None) -> None:
        """Re-check the model's constraints at these inputs (see Runner.check)."""
        self.runner.check(values, overrides)

    def valid(self, values: Mapping[str, Any]) -> Any:
        """As `check`, but a boolean array: True where every constraint holds."""
        return self.runner.valid(values)

    def compiled(self, names: list[str] | None = None) -> Runner:
        """The compiled forms (the runner; `names` must be its inputs in order)."""
        return self.runner.compiled(names)

    def evaluate(self, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Evaluate at defaults plus overrides: a dict shaped like `eval --json`."""
        return self.runner.evaluate(overrides)


def analyze(spec: str | Path, hw: str | Path | None = None, phase: str = "decode",
            model: str | None = None, policy: str | None = None,
            engine: str | None = None, draft: str | None = None) -> Analysis:
    """Load a spec (and hardware), derive the closed forms for a phase under a sharding
    policy (the named one, else `full`, else the first the model declares) and an engine
    profile (default eager: every op its own kernel; graphs: the spec's fusions, CUDA
    graphs, its per-kernel floor as launch_overhead's default). `draft="mtp"`: the spec's
    MTP layers as a draft model (compiler/core/mtp.py)."""
    profile = resolve_engine(engine)
    program = load_program(Path(spec))
    compiled = load_model(spec, model, program, draft)
    hardware = load_hardware(hw, program, program) if hw is not None else None
    if hardware is not None:
        _check_hardware_names(compiled, hardware)
    hardware = engine_hardware(hardware, profile)
    forms = build_forms(compiled, phase, resolve_policy(compiled, policy), links_of(hardware),
                        profile)
    return Analysis(forms.model, hardware, forms, tuple(program.files), tuple(program.reads),
                    tuple(program.lookups))  # as one GPU of the layout runs it


def links_of(hardware: CompiledHardware | None) -> Links:
    """Which interconnects the hardware describes (all, when it is left symbolic)."""
    if hardware is None:
        return Links()
    has = set(hardware.fields)
    # net_bw = 0 in the catalogue: no network between nodes (a group must fit one node).
    net = set(NET_FIELDS) <= has and hardware.fields["net_bw"].value > 0
    return Links(link=set(LINK_FIELDS) <= has, net=net, host="host_bw" in has)


def _check_hardware_names(model: CompiledModel, hardware: CompiledHardware) -> None:
    """A param must not share a name with a field of the chosen hardware, even in case
    only (workbook names ignore case): `--set` and the workbook would mix them up."""
    fields = {f.lower(): f for f in hardware.fields}
    for param in model.params.values():
        field_name = fields.get(param.name.lower())
        if field_name is not None:
            raise fail(param.span, f"param '{param.name}' clashes with hardware "
                       f"'{hardware.name}' field '{field_name}' (names ignore case)",
                       "rename the param")
