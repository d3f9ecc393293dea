"""Capacity answers: how much fits, how many GPUs, and where the binding ceiling moves.

Every answer comes from the compiled forms, with every input but one (B or N) fixed at
its value: max_batch and max_context are forms of their own; crossings of two forms
(bound terms in B, KV against weight bytes in N) are bracketed by a vectorised sign scan
on a geometric grid and refined by the Illinois variant of regula falsi, all brackets at
once (a linear difference, the dense-model case, is solved in one step; kinks and
curves in a few). Integer answers ("first batch where ...") are then checked with the
same function `infest eval` uses, so they agree with it. No sympy: a cached run
(compiler/backend/cache.py) answers exactly as an uncached one.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Callable, Mapping

import numpy as np

from infest.compiler.backend.report import step_bound
from infest.compiler.backend.runner import Runner
from infest.compiler.core.terms import BOUND_TERMS

if TYPE_CHECKING:
    import sympy

    from infest.compiler.api import Analysis

BATCH_LIMIT = 2**24      # search B in [1, 16M]: past any memory that exists today
CONTEXT_LIMIT = 2**30    # search N in [1, 1G tokens]
SCAN_POINTS = 4097       # geometric grid that brackets the crossings
MAX_REFINE = 100         # regula-falsi steps (each one evaluation of every bracket)
REL_TOL = 1e-13          # brackets this narrow (relative) are done


def capacity(analysis: "Analysis | Runner", overrides: Mapping[str, Any] | None = None) -> dict:
    """max_batch, max_context, gpus_to_hold_weights, bound transitions in B, KV vs weights in N."""
    point = _Point(analysis.compiled(), overrides or {})
    memory = point.values
    return {
        "max_batch": _int(memory["memory.max_batch"]),
        "max_context": _int(memory["memory.max_context"]),
        "gpus_to_hold_weights": gpus_to_hold_weights(point),
        "bound_transitions": bound_transitions(point),
        "kv_overtakes_weights": kv_overtakes_weights(point),
    }


class _Point:
    """The inputs of one evaluation, and the forms there with one input varied."""

    def __init__(self, runner: Runner, overrides: Mapping[str, Any]) -> None:
        self.runner = runner
        self.floats = {i.name: float(i.value) for i in runner.inputs(overrides)}
        self.values = runner(self.floats)

    def at(self, name: str, xs: np.ndarray) -> dict[str, Any]:
        """The probed forms (keys.PROBE_KEYS) with input `name` set to each of xs (one
        vectorised call)."""
        return self.runner.probe({**self.floats, name: np.asarray(xs, dtype=float)})


def _int(value: Any) -> int | None:
    v = float(value)
    return int(v) if math.isfinite(v) else None


def gpus_to_hold_weights(point: _Point) -> int:
    """ceil(weights_bytes / mem_capacity); a ratio within rounding of a whole number is
    that number (weights that exactly fill k GPUs need k, not k + 1)."""
    ratio = float(point.values["memory.weights_bytes"]) / float(point.values["memory.capacity_bytes"])
    nearest = round(ratio)
    return int(nearest) if abs(ratio - nearest) <= 1e-12 * max(1.0, ratio) else math.ceil(ratio)


# ---- the binding ceiling as B grows ------------------------------------------------

def bound_transitions(point: _Point) -> list[dict]:
    """Where, as B grows at this N (and T), the binding ceiling changes.

    Each entry: {"batch": B* (real crossing), "first_batch": smallest whole B with the
    new bound, "from", "to", "fits": whether first_batch fits in memory}.
    """
    pairs = [(a, b) for i, a in enumerate(BOUND_TERMS) for b in BOUND_TERMS[i + 1:]]

    def diffs(xs: np.ndarray) -> np.ndarray:
        v = point.at("B", xs)
        return np.stack([_full(v[f"bound.{a}"] - v[f"bound.{b}"], xs) for a, b in pairs])

    roots = sorted({r for rs in find_roots(diffs, 1.0, float(BATCH_LIMIT)) for r in rs})
    edges = [1.0] + roots + [float(BATCH_LIMIT)]
    mids = [math.sqrt(lo * hi) for lo, hi in zip(edges, edges[1:])]
    bounds = step_bound(point.at("B", np.asarray(mids))) if mids else []
    bounds = np.broadcast_to(bounds, (len(mids),))
    changes = [(roots[i], bounds[i], bounds[i + 1]) for i in range(len(roots))
               if bounds[i] != bounds[i + 1]]
    return [_transition(point, *c) for c in changes]


def _transition(point: _Point, root: float, before: str, after: str) -> dict:
    """The crossing, and the first whole batch at which eval names the new bound."""
    candidates = _whole_after(root)
    values = point.at("B", candidates)  # one evaluation answers both questions
    k = _first(candidates, step_bound(values) == after, root)
    fits = np.broadcast_to(np.asarray(values["memory.fits"]), candidates.shape)
    return {"batch": root, "first_batch": int(candidates[k]), "from": str(before),
            "to": str(after), "fits": bool(fits[k])}


def _whole_after(root: float) -> np.ndarray:
    """The whole numbers where the first one at or after a crossing can be (a tie at an
    exact integer may go either way)."""
    return np.arange(max(1, math.floor(root)), math.floor(root) + 3, dtype=float)


def _first(candidates: np.ndarray, ok: Any, root: float) -> int:
    """Index of the first candidate where `ok` holds (none does: the first >= root)."""
    ok = np.broadcast_to(np.asarray(ok), candidates.shape)
    return int(np.argmax(ok)) if ok.any() else int(np.searchsorted(candidates, root))


def _first_whole(root: float, holds: Callable[[np.ndarray], np.ndarray]) -> int:
    """Smallest whole x >= root where `holds`."""
    candidates = _whole_after(root)
    return int(candidates[_first(candidates, holds(candidates), root)])


# ---- KV traffic against weight traffic as N grows ----------------------------------

def kv_overtakes_weights(point: _Point) -> dict | None:
    """The context at which a step's KV bytes exceed its weight bytes, at this B (and T).

    {"context": N* (real crossing), "first_context": smallest whole N with kv > weights};
    None when it does not happen for N in [1, CONTEXT_LIMIT].
    """
    def diff(xs: np.ndarray) -> np.ndarray:
        v = point.at("N", xs)
        return _full(v["step.kv_bytes"] - v["step.weight_bytes"], xs)[None, :]

    roots = [r for r in find_roots(diff, 1.0, float(CONTEXT_LIMIT))[0] if _rising(point, r)]
    if not roots:
        return None
    first = _first_whole(roots[0], lambda xs: _kv_exceeds(point.at("N", xs)))
    return {"context": roots[0], "first_context": first}


def _kv_exceeds(values: Mapping[str, Any]) -> np.ndarray:
    return np.asarray(values["step.kv_bytes"] > values["step.weight_bytes"])


def _rising(point: _Point, root: float) -> bool:
    """Only a crossing where KV goes from below to above weights counts."""
    xs = np.asarray([max(1.0, root * (1 - 1e-9) - 1e-9), root * (1 + 1e-9) + 1e-9])
    above = np.broadcast_to(_kv_exceeds(point.at("N", xs)), (2,))
    return (not above[0]) and bool(above[1])


# ---- roots of several functions of one variable, all at once --------------------------

def _full(value: Any, xs: np.ndarray) -> np.ndarray:
    return np.broadcast_to(np.asarray(value, dtype=float), xs.shape)


def find_roots(fs: Callable[[np.ndarray], np.ndarray], lo: float, hi: float) -> list[list[float]]:
    """Sign changes in (lo, hi) of each of k functions: `fs(xs)` has shape (k, len(xs)).
    Returns, per function, its crossings in increasing order."""
    xs = np.geomspace(lo, hi, SCAN_POINTS)
    with np.errstate(all="ignore"):
        ys = fs(xs)
    which, idx = np.nonzero(np.sign(ys[:, :-1]) * np.sign(ys[:, 1:]) < 0)
    refined = _illinois(fs, which, xs[idx], xs[idx + 1], ys[which, idx], ys[which, idx + 1])
    out: list[list[float]] = [[] for _ in range(len(ys))]
    for k, x in zip(which, refined):
        out[int(k)].append(float(x))
    return out


def _illinois(fs, which, a, b, fa, fb) -> np.ndarray:
    """Regula falsi with the Illinois fix, every bracket [a, b] (function `which`) at once."""
    a, b, fa, fb = (np.array(v, dtype=float) for v in (a, b, fa, fb))
    side = np.zeros(len(a))  # which end moved last: -1 a, +1 b
    for _ in range(MAX_REFINE):
        if not len(a) or np.all(b - a <= REL_TOL * b):
            break
        c = np.clip((a * fb - b * fa) / (fb - fa), a, b)
        c = np.where(np.isfinite(c), c, (a + b) / 2)
        with np.errstate(all="ignore"):
            fc = fs(c)[which, np.arange(len(c))]
        left = np.sign(fc) == np.sign(fa)  # root in [c, b]: c replaces a
        fb = np.where(left & (side == -1), fb / 2, fb)   # a moved twice: pull b's weight
        fa = np.where(~left & (side == 1), fa / 2, fa)   # b moved twice: pull a's weight
        a, fa = np.where(left, c, a), np.where(left, fc, fa)
        b, fb = np.where(left, b, c), np.where(left, fb, fc)
        side = np.where(left, -1, 1)
        done = fc == 0
        a, b = np.where(done, c, a), np.where(done, c, b)
    return (a + b) / 2


def crossings(expr: "sympy.Expr", lo: float, hi: float) -> list[float]:
    """Real x in (lo, hi) where a sympy form of the symbol X changes sign (a helper for
    tests and symbolic callers; the capacity answers use the compiled forms)."""
    from infest.compiler.backend.codegen import compile_forms
    fn = compile_forms([__getattr__("X")], [expr])
    return find_roots(lambda xs: _full(fn(xs)[0], xs)[None, :], lo, hi)[0]


def __getattr__(name: str) -> Any:
    """`X`, the real stand-in symbol `crossings` takes, built only when asked for (so
    importing this module does not import sympy)."""
    if name == "X":
        import sympy
        return sympy.Symbol("x", positive=True)
    raise AttributeError(name)
