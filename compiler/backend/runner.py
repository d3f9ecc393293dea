"""Evaluate a compiled model without sympy: inputs, checks, generated forms, results.

A Runner holds everything `infest eval` and `infest sweep` need once the closed forms
exist: every input with its default and kind, the generated numpy code of every form and
of the model's constraints, and the names, spans and keys that results and error
messages use. It is built from an Analysis (compiler/api.py) or read back from the
private cache (compiler/backend/cache.py): the same object either way, so a cached run prints
exactly what an uncached one prints. Nothing here imports sympy.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from fractions import Fraction
from functools import cached_property
from typing import Any, Callable, Mapping

import numpy as np

from infest.compiler.core.constraints import CheckInfo, exact_sides, failing, holds
from infest.compiler.backend.finite import check_finite
from infest.compiler.backend.generated import load_functions
from infest.compiler.backend.report import result_json
from infest.compiler.core.keys import BUILTINS, PARALLEL, PROBE_KEYS
from infest.dsl.errors import Diagnostic, SpecError, Span, did_you_mean, fail

DEFAULTS = {"B": Fraction(1), "N": Fraction(4096), "T": Fraction(1),
            **{p: Fraction(1) for p in PARALLEL}}
MAX_VALUE = 10**30  # --set values past this are typos (and would overflow exact checks)
FORMAT = 4          # bumped whenever the stored shape of a Runner changes


@dataclass(frozen=True)
class Input:
    """One input symbol: where it comes from and its value for this run."""

    name: str
    kind: str          # "builtin", "parallel", "offload", "model" or "hardware"
    value: Fraction


@dataclass(frozen=True)
class OpInfo:
    """What results and messages say about an op: its names and where it is written."""

    name: str
    kind: str
    group: str
    collective: bool
    span: Span | None
    peaks: tuple[str, ...] = ()   # the math peaks it may run at, first choice first


@dataclass(frozen=True)
class Missing:
    """An input with no value unless --set gives one (hardware without that field)."""

    name: str
    span: Span | None
    message: str
    hint: str


@dataclass
class Runner:
    """The evaluable form of one model, hardware, phase and policy (see module doc)."""

    model: str
    hardware: str | None
    phase: str
    policy: str | None
    engine: str
    groups: tuple[str, ...]
    names: tuple[str, ...]             # the forms' inputs, in argument order
    kinds: dict[str, str]              # every input name that may be set -> its kind
    defaults: dict[str, Fraction]      # every name with a default value
    derived: tuple[str, ...]           # params computed from others (cannot be set)
    check_names: tuple[str, ...]       # the constraints function's inputs, in order
    keys: tuple[str, ...]              # the flat key of each value the forms return
    uses: tuple[tuple[int, ...], ...]  # per key: indices into `names` it depends on
    ops: tuple[OpInfo, ...]
    checks: tuple[CheckInfo, ...]
    missing: tuple[Missing, ...]
    source: str                        # generated code: def forms(...), def constraints(...)
    policies: tuple[str, ...] = ()     # the sharding policies the spec declares
    policy_derived: bool = False       # `policy` derived from group names (none declared)
    spans: dict[str, Span] = field(default_factory=dict)  # where each model param is written

    @cached_property
    def _functions(self) -> dict[str, Callable]:
        return load_functions(self.source)

    def prepare(self) -> None:
        """Check and compile the generated code now (ValueError or SyntaxError if it is
        not code the generator writes)."""
        if set(self._functions) != {"forms", "constraints", "probe"}:
            raise ValueError("runner: the generated code lacks its functions")

    def inputs(self, overrides: Mapping[str, Any] | None = None, checked: bool = True
               ) -> list[Input]:
        """Every input with its value for this run (defaults, then overrides); `checked`:
        the model's constraints hold there (False: the caller checks them at the point it
        evaluates, e.g. serve's batch, which the default B = 1 would fail with dp = 2)."""
        fixed = {k: _fraction(k, v) for k, v in (overrides or {}).items()}
        self._check_overrides(fixed)
        absent = [m for m in self.missing if m.name not in fixed]
        if absent:
            raise SpecError([Diagnostic(m.span, m.message, m.hint) for m in absent])
        inputs = [Input(n, self.kinds.get(n, "hardware"), fixed.get(n, self.defaults.get(n)))
                  for n in self.names]
        if checked:  # exact values: whole and divides are checked exactly at one point
            self.check({i.name: i.value for i in inputs}, fixed)
        return inputs

    def _check_overrides(self, fixed: Mapping[str, Fraction]) -> None:
        for name, value in fixed.items():
            if name == "T" and self.phase == "prefill":
                raise fail(None, "T cannot be set in prefill", "prefill processes T = N prompt tokens")
            if name in self.derived:
                raise fail(None, f"'{name}' is derived from other params and cannot be set")
            if name not in self.kinds and name not in self.defaults:
                raise fail(None, f"--set {name}: no such input",
                           did_you_mean(name, set(self.kinds) | set(self.defaults))
                           or "see `infest eval --json` inputs")
            _check_sign(name, value)
            if value > MAX_VALUE:
                raise fail(None, f"--set {name}: absurdly large value", "values must stay below 1e30")
        self._check_clock(fixed)

    def _check_clock(self, fixed: Mapping[str, Fraction]) -> None:
        """A clock with sms = 1 (its default: not given) would send the whole GPU's loads
        through one SM (the per-SM ceiling, compiler/core/estimate_rule.py); a hardware
        block is checked so when loaded, a --set here."""
        changed = [n for n in ("clock", "sms") if n in fixed]
        value = {n: fixed.get(n, self.defaults.get(n)) for n in ("clock", "sms")}
        if changed and value["clock"] and value["sms"] == 1:
            raise fail(None, f"--set {changed[0]}: a clock needs the GPU's SM count, and sms "
                       "is 1 (its default: not given): one SM would stream the whole GPU's loads",
                       "--set sms=132 (the GPU's SMs), or --set clock=0: no per-SM ceiling")

    def check(self, values: Mapping[str, Any], overrides: Mapping[str, Any] | None = None) -> None:
        """Re-check the model's constraints (whole repeat counts, top_k <= experts, the
        layout's: tp divides heads, ...) at these inputs (floats or broadcastable arrays);
        SpecError at the first failure."""
        point, sides = self._sides(values, overrides)
        error = failing(self.checks, sides, point, self._exact_sides(point))
        if error is not None:
            raise error

    def _exact_sides(self, point: Mapping[str, Any]):
        """The constraint sides in exact arithmetic when every input is one number."""
        if not self.checks or any(np.ndim(point[n]) for n in self.check_names):
            return None
        return exact_sides(self._functions["constraints"], [point[n] for n in self.check_names])

    def valid(self, values: Mapping[str, Any]) -> Any:
        """As `check`, but a boolean array: True where every constraint holds."""
        return holds(self.checks, self._sides(values, None)[1])

    def _sides(self, values: Mapping[str, Any], overrides: Mapping[str, Any] | None):
        point = {n: (overrides or {}).get(n, self.defaults[n])  # exact: Fractions
                 for n in self.check_names if n in self.defaults}
        point.update(values)
        if self.phase == "prefill":  # as the forms: a prompt of N tokens, empty cache
            point["T"], point["N"] = point["N"], 0.0
        if not self.checks:
            return point, ()
        args = [np.asarray(point[n], dtype=float) for n in self.check_names]
        with np.errstate(all="ignore"):
            return point, self._functions["constraints"](*args)

    def compiled(self, names: list[str] | None = None) -> "Runner":
        """This runner as the compiled forms of its inputs (`names`, if given, must be
        exactly the inputs in order: the generated code takes them by position)."""
        if names is not None and tuple(names) != self.names:
            raise ValueError(f"the forms take {self.names}, not {tuple(names)}")
        return self

    def __call__(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """Every form at inputs (scalars or broadcastable arrays): flat key -> value."""
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            args = [np.asarray(values[n], dtype=float) for n in self.names]
            results = self._functions["forms"](*args)
        return dict(zip(self.keys, results))

    def probe(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """Only PROBE_KEYS (bound terms, step time, KV and weight bytes, fits) at inputs:
        what root finding evaluates again and again, for a third of the work."""
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            args = [np.asarray(values[n], dtype=float) for n in self.names]
            results = self._functions["probe"](*args)
        return dict(zip(PROBE_KEYS, results))

    def used_names(self, key: str) -> set[str]:
        """The inputs a value depends on (for messages)."""
        return {self.names[i] for i in self.uses[self.keys.index(key)]}

    def evaluate(self, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Evaluate at defaults plus overrides: a dict shaped like `eval --json`."""
        inputs = self.inputs(overrides)
        point = {i.name: float(i.value) for i in inputs}
        values = self(point)
        check_finite(self, values, point)
        return result_json(self, inputs, values)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (Fractions as [numerator, denominator])."""
        out = asdict(self)
        out["defaults"] = {k: [v.numerator, v.denominator] for k, v in self.defaults.items()}
        return {"format": FORMAT, **out}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Runner":
        """The inverse of to_json (ValueError on anything malformed)."""
        if data.get("format") != FORMAT:
            raise ValueError("runner: unknown format")
        d = dict(data)
        del d["format"]
        d["defaults"] = {k: Fraction(n, m) for k, (n, m) in d["defaults"].items()}
        d["ops"] = tuple(OpInfo(**{**o, "span": _span(o["span"]), "peaks": tuple(o["peaks"])})
                         for o in d["ops"])
        d["checks"] = tuple(CheckInfo(**{**c, "span": _span(c["span"]), "uses": tuple(c["uses"])})
                            for c in d["checks"])
        d["missing"] = tuple(Missing(**{**m, "span": _span(m["span"])}) for m in d["missing"])
        d["spans"] = {k: Span(**v) for k, v in d["spans"].items()}
        for key in ("groups", "names", "derived", "check_names", "keys", "policies"):
            d[key] = tuple(d[key])
        d["uses"] = tuple(tuple(u) for u in d["uses"])
        return cls(**d)


def _check_sign(name: str, value: Fraction) -> None:
    """Only fields that may be 0 (latencies: compiler/load/hardware.py) may be 0; nothing < 0;
    efficiencies lie in (0, 1]; a field with a least value (poll_interval: 1) is at least it."""
    from infest.compiler.load.fields import AT_LEAST, FIELDS, MAY_BE_ZERO, SHARES
    from infest.compiler.load.hardware import in_range, share_hint, sign_rule
    if in_range(name, value):
        return
    hint = FIELDS[name].doc if name in AT_LEAST else \
        share_hint(name) if name in SHARES else f"only {', '.join(sorted(MAY_BE_ZERO))} may be 0"
    raise fail(None, f"--set {name}: the value must be {sign_rule(name)}", hint)


def _span(data: Mapping[str, Any] | None) -> Span | None:
    return None if data is None else Span(**data)


def _fraction(name: str, value: Any) -> Fraction:
    if isinstance(value, Fraction):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return Fraction(value)
    raise fail(None, f"--set {name}: not a number: {value!r}")


def builtin_kinds() -> dict[str, str]:
    """Kinds of the inputs every model has."""
    return {**{b: "builtin" for b in BUILTINS}, **{p: "parallel" for p in PARALLEL}}


def evaluate(runner: Runner, overrides: Mapping[str, Any],
             point: Mapping[str, Any]) -> dict[str, Any]:
    """Every form at the inputs plus `point` (B, N, T: numbers or arrays that broadcast),
    with the model's constraints checked there and every value checked finite."""
    inputs = runner.inputs(overrides, checked=False)  # checked at the point, below
    values = {i.name: float(i.value) for i in inputs}
    values.update({k: np.asarray(v, dtype=float) for k, v in point.items()})
    runner.check(values, overrides)
    compiled = runner.compiled([i.name for i in inputs])
    out = compiled(values)
    check_finite(compiled, out, values)
    return {**out, "inputs": values}
